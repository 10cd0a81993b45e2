package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/anvilproj/anvil/internal/actions"
	"github.com/anvilproj/anvil/internal/model"
)

// TestCommissioningChecksReported: the agent runs the native commissioning
// actions (on a fixture tree) and sends their checks with each end
// report, the failed ones too; the server keeps them on the machine's
// Hardware and labels it failed.
func TestCommissioningChecksReported(t *testing.T) {
	root := t.TempDir()
	for p, content := range map[string]string{
		"proc/meminfo":                     "MemTotal:        2014136 kB\n",
		"sys/class/net/eth0/address":       "52:54:00:aa:00:01\n",
		"sys/class/net/eth0/carrier":       "1\n",
		"sys/class/net/eth0/speed":         "1000\n",
		"sys/class/net/eth0/operstate":     "up\n",
		"sys/class/net/eth0/device/vendor": "0x1af4\n",
		"sys/class/net/eth1/address":       "52:54:00:aa:00:02\n",
		"sys/class/net/eth1/operstate":     "down\n",
		"sys/class/net/eth1/device/vendor": "0x1af4\n",
		"sys/class/net/lo/address":         "00:00:00:00:00:00\n",
		"sys/firmware/dmi/tables/DMI":      "\x7f\x04\x00\x00\x00\x00",
	} {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srv := newServer(t)
	srv.apply(manifest("commission",
		action("memory", "anvil/commission-memory", 60, `environment: {MIN_MEMORY: "1GiB"}`)+
			action("links", "commission-nic-link", 60, `environment: {NIC_LINK_REQUIRED: "all"}`)))
	runAgent(t, srv, actions.New(actions.Config{SysRoot: root}))

	if wf := srv.workflow("commission"); wf.Status.State != model.StateFailed {
		t.Fatalf("workflow %s; want FAILED (eth1 has no link)", wf.Status.State)
	}
	srv.mu.Lock()
	st := srv.st
	srv.mu.Unlock()
	obj, err := st.Get(context.Background(), model.KindHardware, "default", "m1")
	if err != nil {
		t.Fatal(err)
	}
	hw := obj.(*model.Hardware)
	c := hw.Status.Commissioning
	if c == nil || hw.Labels[model.LabelCommissioning] != model.CommissioningFailed || c.Result != model.CommissioningFailed {
		t.Fatalf("label %q, status.commissioning %+v", hw.Labels[model.LabelCommissioning], c)
	}
	want := map[string]string{"memory": "passed", "nic-link/eth0": "passed", "nic-link/eth1": "failed"}
	got := map[string]string{}
	for _, ch := range c.Checks {
		got[ch.Name] = ch.Result
	}
	if len(got) != len(want) || got["memory"] != want["memory"] || got["nic-link/eth0"] != want["nic-link/eth0"] || got["nic-link/eth1"] != want["nic-link/eth1"] {
		t.Fatalf("stored checks %v; want %v", got, want)
	}
	if c.Checks[0].Values["memTotalBytes"] != "2062475264" || c.Checks[0].Time == nil {
		t.Errorf("memory check %+v", c.Checks[0])
	}
}
