package bootpolicy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/dhcp"
	"github.com/anvilproj/anvil/internal/httpboot"
	"github.com/anvilproj/anvil/internal/ipxe"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store/bolt"
	"github.com/anvilproj/anvil/internal/workflow"
)

// ---- fixtures ----

func bp(b bool) *bool { return &b }

// openStore opens a real bolt store in a temp dir whose clock advances a
// second per object, so creation order is well defined.
func openStore(t testing.TB) *bolt.Store {
	t.Helper()
	// Each creation a second after the last: creation order decides
	// which workflow is active.
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	clk.Step = time.Second
	s, err := bolt.Open(filepath.Join(t.TempDir(), "anvil.db"), bolt.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// warnings counts the log records at Warn and above.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	w.msgs = append(w.msgs, b.String())
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }
func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.msgs)
}

func baseConfig() Config {
	return Config{
		Mode:          ModeReservation,
		PublicHTTP:    "http://10.0.0.1:7080",
		GRPCAuthority: "10.0.0.1:42113",
		SyslogHost:    "10.0.0.1",
	}
}

// newPolicy stores objs and returns a policy over them.
func newPolicy(t testing.TB, cfg Config, objs ...model.Object) (*Policy, *warnings) {
	t.Helper()
	s := openStore(t)
	for _, o := range objs {
		if _, err := s.Create(context.Background(), o); err != nil {
			t.Fatalf("create %s: %v", o.GetObjectMeta().Key(), err)
		}
	}
	w := &warnings{}
	cfg.Store = s
	cfg.Logger = slog.New(w)
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, w
}

// hw returns a Hardware "default/name" with the given interfaces.
func hw(name string, ifaces ...model.Interface) *model.Hardware {
	return &model.Hardware{ObjectMeta: model.ObjectMeta{Namespace: "default", Name: name},
		Spec: model.HardwareSpec{Interfaces: ifaces}}
}

// nic returns an interface with a MAC, an IP and netboot.allowPXE.
func nic(mac, ip string, allowPXE *bool) model.Interface {
	i := model.Interface{DHCP: &model.DHCP{MAC: mac}, Netboot: &model.Netboot{AllowPXE: allowPXE}}
	if ip != "" {
		i.DHCP.IP = &model.IP{Address: ip, Netmask: "255.255.255.0", Gateway: "10.0.0.254"}
	}
	return i
}

// with applies fn to a Hardware and returns it, for table literals.
func with(h *model.Hardware, fn func(*model.Hardware)) *model.Hardware { fn(h); return h }

// wf returns a Workflow in state (in either spelling), decoded from its
// JSON as every Workflow that enters Anvil is (the API, a manifest, the
// store's file): Tinkerbell's STATE_ spelling is read there.
func wf(ns, name, hwName string, state model.State, fn ...func(*model.Workflow)) *model.Workflow {
	w := &model.Workflow{ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name},
		Spec: model.WorkflowSpec{TemplateRef: "tpl", HardwareRef: hwName}, Status: model.WorkflowStatus{State: state}}
	for _, f := range fn {
		f(w)
	}
	b, err := json.Marshal(w)
	if err != nil {
		panic(err)
	}
	o, err := model.Decode(model.KindWorkflow, b)
	if err != nil {
		panic(err)
	}
	return o.(*model.Workflow)
}

func waiting(w *model.Workflow) {
	w.Status.Conditions = append(w.Status.Conditions, model.Condition{Type: workflow.ConditionWaiting, Status: "True"})
}

func mustMAC(s string) macaddr.MAC { return macaddr.MustParse(s) }

// kernelLine returns the tokens of the script's kernel command, without the
// "|| goto" that follows.
func kernelLine(body string) []string {
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "kernel ") {
			l, _, _ = strings.Cut(l, " || ")
			return strings.Fields(l)
		}
	}
	return nil
}

// ---- Script ----

const (
	mac1 = "52:54:00:00:00:01"
	mac2 = "52:54:00:00:00:02"
)

// defaultArgs are the kernel arguments baseConfig gives, after hw_addr.
var defaultArgs = []string{"tinkerbell_tls=false", "tinkerbell_insecure_tls=false", "syslog_host=10.0.0.1", "anvil.server=http://10.0.0.1:7080",
	"console=tty0", "console=ttyS0,115200"}

// defaultArgsARM64 is defaultArgs for aarch64 machines: their serial
// console is ttyAMA0.
var defaultArgsARM64 = append(slices.Clip(defaultArgs[:len(defaultArgs)-1]), "console=ttyAMA0,115200")

// bootEnvLine is the kernel line of the machine that booted from mac,
// whose agent is that MAC.
func bootEnvLine(arch, mac string, extra ...string) []string {
	return bootEnvLineAs(arch, mac, mac, extra...)
}

// bootEnvLineAs is the kernel line of the machine that booted from mac,
// whose agent is worker.
func bootEnvLineAs(arch, worker, mac string, extra ...string) []string {
	l := []string{"kernel", "http://10.0.0.1:7080/bootenv/vmlinuz-" + arch, "initrd=initramfs-" + arch,
		"grpc_authority=10.0.0.1:42113", "worker_id=" + worker, "hw_addr=" + mac}
	if arch == "aarch64" {
		l = append(l, defaultArgsARM64...)
	} else {
		l = append(l, defaultArgs...)
	}
	return append(l, extra...)
}

func TestScript(t *testing.T) {
	allowed := func() *model.Hardware { return hw("m1", nic(mac1, "10.0.0.11", bp(true))) }
	tests := []struct {
		name   string
		mode   string
		cfg    func(*Config)
		objs   []model.Object
		req    httpboot.ScriptRequest
		noMAC  bool // ask by source IP only
		source string

		wantErr     error  // errors.Is
		wantErrText string // substring of the error
		wantReason  string // substring
		wantKernel  []string
		wantBody    []string // substrings
	}{
		// Unknown machines, per mode.
		{name: "unknown, reservation", mode: ModeReservation, req: httpboot.ScriptRequest{MAC: mustMAC("52:54:00:00:00:99")},
			wantErr: httpboot.ErrNoScript, wantErrText: "no Hardware has MAC 52:54:00:00:00:99"},
		{name: "unknown, proxy", mode: ModeProxy, req: httpboot.ScriptRequest{MAC: mustMAC("52:54:00:00:00:99")},
			wantErr: httpboot.ErrNoScript, wantErrText: "no Hardware has MAC 52:54:00:00:00:99"},
		{name: "unknown, off", mode: ModeOff, req: httpboot.ScriptRequest{MAC: mustMAC("52:54:00:00:00:99")},
			wantErr: httpboot.ErrNoScript},
		{name: "unknown, auto-proxy", mode: ModeAutoProxy, req: httpboot.ScriptRequest{MAC: mustMAC("52:54:00:00:00:99")},
			wantReason: "no Hardware has MAC 52:54:00:00:00:99 (auto-proxy: generic script)",
			wantBody:   []string{"not known to Anvil", "spec.interfaces[].dhcp.mac: 52:54:00:00:00:99", "\nexit 1\n"}},
		{name: "unknown by IP, auto-proxy", mode: ModeAutoProxy, noMAC: true, source: "10.9.9.9",
			wantReason: "no Hardware has IP 10.9.9.9", wantBody: []string{"dhcp.mac: ${mac}"}},
		{name: "unknown by IP, reservation", noMAC: true, source: "10.9.9.9",
			wantErr: httpboot.ErrNoScript, wantErrText: "no Hardware has IP 10.9.9.9"},
		// Discovery: unknown machines, and discovered ones with no work.
		{name: "unknown, discovery, any mode", mode: ModeReservation, cfg: func(c *Config) { c.Discovery = true },
			req:        httpboot.ScriptRequest{MAC: mustMAC("52:54:00:00:00:99")},
			wantReason: "no Hardware has MAC 52:54:00:00:00:99: discovery boot",
			wantKernel: bootEnvLine("x86_64", "52:54:00:00:00:99", "anvil.discovery=1")},
		{name: "unknown, discovery, no token even with agent checks on", mode: ModeProxy, cfg: func(c *Config) {
			c.Discovery = true
			c.AgentToken = func(*model.Workflow) string { return "v1.never" }
		}, req: httpboot.ScriptRequest{MAC: mustMAC("52:54:00:00:00:99"), BuildArch: "arm64"},
			wantKernel: bootEnvLine("aarch64", "52:54:00:00:00:99", "anvil.discovery=1")},
		{name: "discovered, no workflow: discovery boot again", cfg: func(c *Config) { c.Discovery = true },
			objs:       []model.Object{with(allowed(), func(h *model.Hardware) { h.Labels = map[string]string{model.LabelDiscovered: "true"} })},
			req:        httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantReason: "hardware default/m1 was discovered and has no workflow yet: discovery boot",
			wantKernel: bootEnvLine("x86_64", mac1, "anvil.discovery=1")},
		{name: "discovered, with a workflow: its boot environment", cfg: func(c *Config) { c.Discovery = true },
			objs: []model.Object{with(allowed(), func(h *model.Hardware) { h.Labels = map[string]string{model.LabelDiscovered: "true"} }),
				wf("default", "enroll-m1", "m1", "PENDING")},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1)}, wantReason: "workflow default/enroll-m1 is PENDING", wantKernel: bootEnvLine("x86_64", mac1)},
		{name: "discovered, installed: local disk", cfg: func(c *Config) { c.Discovery = true },
			objs: []model.Object{with(allowed(), func(h *model.Hardware) { h.Labels = map[string]string{model.LabelDiscovered: "true"} }),
				wf("default", "enroll-m1", "m1", "SUCCESS")},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1)}, wantReason: "no pending workflow for hardware default/m1: booting from local disk"},
		{name: "discovered, discovery off: local disk", objs: []model.Object{with(allowed(), func(h *model.Hardware) {
			h.Labels = map[string]string{model.LabelDiscovered: "true"}
		})}, req: httpboot.ScriptRequest{MAC: mustMAC(mac1)}, wantReason: "no pending workflow for hardware default/m1: booting from local disk"},
		{name: "known, mode off still served", mode: ModeOff, objs: []model.Object{allowed(), wf("default", "w1", "m1", "PENDING")},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1)}, wantKernel: bootEnvLine("x86_64", mac1)},

		// allowPXE.
		{name: "allowPXE false", objs: []model.Object{hw("m1", nic(mac1, "", bp(false))), wf("default", "w1", "m1", "PENDING")},
			req:        httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantReason: "netboot not allowed for hardware default/m1 (spec.interfaces[0].netboot.allowPXE is false)",
			wantBody:   []string{"sanboot --no-describe --drive 0x80", "iseq ${platform} efi && exit 1 ||"}},
		{name: "allowPXE unset", objs: []model.Object{hw("m1", model.Interface{DHCP: &model.DHCP{MAC: mac1}})},
			req:        httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantReason: "(spec.interfaces[0].netboot.allowPXE is not set, which means false)"},

		// Workflows.
		{name: "pending workflow", objs: []model.Object{allowed(), wf("default", "install", "m1", "PENDING")},
			req:        httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantReason: "workflow default/install is PENDING: boot environment", wantKernel: bootEnvLine("x86_64", mac1),
			wantBody: []string{"initrd http://10.0.0.1:7080/bootenv/initramfs-x86_64 || goto anvil-failed", "\nboot || goto anvil-failed\n"}},
		{name: "STATE_ spelling and not yet rendered", objs: []model.Object{allowed(), wf("default", "install", "m1", "")},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1)}, wantReason: "workflow default/install is PENDING"},
		{name: "running workflow, aarch64", objs: []model.Object{
			with(allowed(), func(h *model.Hardware) { h.Spec.Interfaces[0].DHCP.Arch = "aarch64" }),
			wf("default", "install", "m1", "STATE_RUNNING")},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1)}, wantReason: "workflow default/install is RUNNING",
			wantKernel: bootEnvLine("aarch64", mac1)},
		{name: "arm64 is aarch64", objs: []model.Object{
			with(allowed(), func(h *model.Hardware) { h.Spec.Interfaces[0].DHCP.Arch = "arm64" }), wf("default", "w", "m1", "PENDING")},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1)}, wantKernel: bootEnvLine("aarch64", mac1)},
		{name: "arch from buildarch when the Hardware has none", objs: []model.Object{allowed(), wf("default", "w", "m1", "PENDING")},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1), BuildArch: "arm64"}, wantKernel: bootEnvLine("aarch64", mac1)},
		{name: "i386 iPXE on a PC is x86_64", objs: []model.Object{allowed(), wf("default", "w", "m1", "PENDING")},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1), BuildArch: "i386"}, wantKernel: bootEnvLine("x86_64", mac1)},
		{name: "Hardware arch beats buildarch", objs: []model.Object{
			with(allowed(), func(h *model.Hardware) { h.Spec.Interfaces[0].DHCP.Arch = "x86_64" }), wf("default", "w", "m1", "PENDING")},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1), BuildArch: "arm64"}, wantKernel: bootEnvLine("x86_64", mac1)},
		{name: "agentID is the worker ID", objs: []model.Object{
			with(allowed(), func(h *model.Hardware) { h.Spec.AgentID = "agent-7" }), wf("default", "w", "m1", "PENDING")},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1)}, wantKernel: bootEnvLineAs("x86_64", "agent-7", mac1)},
		{name: "agent token: the workflow's, last",
			cfg: func(c *Config) {
				c.AgentToken = func(w *model.Workflow) string { return "v1.tok-" + w.Name }
			},
			objs:       []model.Object{allowed(), wf("default", "install", "m1", "PENDING")},
			req:        httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantKernel: append(bootEnvLine("x86_64", mac1), "anvil.token=v1.tok-install")},
		{name: "vlan, facility, kernelParams, extra args in order",
			cfg: func(c *Config) {
				c.ExtraKernelArgs = []string{"anvil.debug=1"}
				c.Console = []string{"ttyS1,9600"}
				c.TLS = true
				c.InsecureTLS = true
			},
			objs: []model.Object{with(allowed(), func(h *model.Hardware) {
				h.Spec.Interfaces[0].DHCP.VLANID = "42"
				h.Spec.Metadata = &model.HardwareMetadata{Facility: &model.MetadataFacility{FacilityCode: "lab1"}}
				h.Spec.Interfaces[0].Netboot.OSIE = &model.OSIE{KernelParams: []string{"quiet", "", "ip=${ip}"}}
			}), wf("default", "w", "m1", "PENDING")},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantKernel: []string{"kernel", "http://10.0.0.1:7080/bootenv/vmlinuz-x86_64", "initrd=initramfs-x86_64",
				"grpc_authority=10.0.0.1:42113", "worker_id=" + mac1, "hw_addr=" + mac1, "tinkerbell_tls=true", "tinkerbell_insecure_tls=true", "syslog_host=10.0.0.1",
				"anvil.server=http://10.0.0.1:7080", "console=ttyS1,9600", "vlan_id=42", "facility=lab1", "quiet", "ip=${ip}", "anvil.debug=1"}},
		{name: "osie.baseURL", objs: []model.Object{with(allowed(), func(h *model.Hardware) {
			h.Spec.Interfaces[0].Netboot.OSIE = &model.OSIE{BaseURL: "http://mirror.lab/hook/"}
		}), wf("default", "w", "m1", "PENDING")},
			req:        httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantKernel: append([]string{"kernel", "http://mirror.lab/hook/vmlinuz-x86_64"}, bootEnvLine("x86_64", mac1)[2:]...),
			wantBody:   []string{"initrd http://mirror.lab/hook/initramfs-x86_64 ||"}},
		{name: "osie.baseURL, kernel and initrd", objs: []model.Object{with(allowed(), func(h *model.Hardware) {
			h.Spec.Interfaces[0].Netboot.OSIE = &model.OSIE{BaseURL: "http://mirror.lab/hook", Kernel: "vmlinuz-6.6", Initrd: "initramfs-6.6.img"}
		}), wf("default", "w", "m1", "PENDING")},
			req:        httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantKernel: append([]string{"kernel", "http://mirror.lab/hook/vmlinuz-6.6", "initrd=initramfs-6.6.img"}, bootEnvLine("x86_64", mac1)[3:]...),
			wantBody:   []string{"initrd http://mirror.lab/hook/initramfs-6.6.img ||"}},
		{name: "osie.kernel alone is under the boot env URL", objs: []model.Object{with(allowed(), func(h *model.Hardware) {
			h.Spec.Interfaces[0].Netboot.OSIE = &model.OSIE{Kernel: "vmlinuz-custom"}
		}), wf("default", "w", "m1", "PENDING")},
			req:      httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantBody: []string{"kernel http://10.0.0.1:7080/bootenv/vmlinuz-custom initrd=initramfs-x86_64 "}},
		{name: "BootEnvURL setting", cfg: func(c *Config) { c.BootEnvURL = "https://cdn.lab/anvil/" },
			objs: []model.Object{allowed(), wf("default", "w", "m1", "PENDING")},
			req:  httpboot.ScriptRequest{MAC: mustMAC(mac1)}, wantBody: []string{"kernel https://cdn.lab/anvil/vmlinuz-x86_64 "}},
		{name: "finished workflow: local disk", objs: []model.Object{allowed(), wf("default", "w", "m1", "SUCCESS")},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1)}, wantReason: "no pending workflow for hardware default/m1: booting from local disk",
			wantBody: []string{"sanboot"}},
		{name: "failed and timed out workflows: local disk", objs: []model.Object{allowed(),
			wf("default", "a", "m1", "FAILED"), wf("default", "b", "m1", "STATE_TIMEOUT")},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1)}, wantReason: "no pending workflow"},
		{name: "disabled workflow: local disk", objs: []model.Object{allowed(),
			wf("default", "w", "m1", "PENDING", func(w *model.Workflow) { w.Spec.Disabled = bp(true) })},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1)}, wantReason: "no pending workflow"},
		{name: "only a waiting workflow: local disk", objs: []model.Object{allowed(), wf("default", "w", "m1", "PENDING", waiting)},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1)}, wantReason: "no pending workflow"},
		{name: "the active one, not the waiting one", objs: []model.Object{allowed(),
			wf("default", "a-waits", "m1", "PENDING", waiting), wf("default", "b-active", "m1", "PENDING")},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1)}, wantReason: "workflow default/b-active is PENDING"},
		{name: "running before an older pending one", objs: []model.Object{allowed(),
			wf("default", "older", "m1", "PENDING"), wf("default", "newer", "m1", "RUNNING")},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1)}, wantReason: "workflow default/newer is RUNNING"},
		{name: "oldest of two pending", objs: []model.Object{allowed(),
			wf("default", "z-first", "m1", "PENDING"), wf("default", "a-second", "m1", "PENDING")},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1)}, wantReason: "workflow default/z-first is PENDING"},
		{name: "workflow in another namespace is not ours", objs: []model.Object{allowed(), wf("other", "w", "m1", "PENDING")},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1)}, wantReason: "no pending workflow"},
		{name: "allowWorkflow false", objs: []model.Object{
			with(allowed(), func(h *model.Hardware) { h.Spec.Interfaces[0].Netboot.AllowWorkflow = bp(false) }),
			wf("default", "w", "m1", "PENDING")},
			req:        httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantReason: "workflow default/w is PENDING but spec.interfaces[0].netboot.allowWorkflow is false for hardware default/m1: booting from local disk"},

		// Operator scripts.
		{name: "ipxe.url", objs: []model.Object{with(allowed(), func(h *model.Hardware) {
			h.Spec.Interfaces[0].Netboot.IPXE = &model.IPXE{URL: "http://10.0.0.2/menu.ipxe", Contents: "ignored"}
		})}, req: httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantReason: "hardware default/m1: spec.interfaces[0].netboot.ipxe.url",
			wantBody:   []string{"chain http://10.0.0.2/menu.ipxe || goto anvil-failed"}},
		{name: "workflow beats ipxe.url", objs: []model.Object{with(allowed(), func(h *model.Hardware) {
			h.Spec.Interfaces[0].Netboot.IPXE = &model.IPXE{URL: "http://10.0.0.2/menu.ipxe"}
		}), wf("default", "w", "m1", "PENDING")}, req: httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantKernel: bootEnvLine("x86_64", mac1)},
		{name: "ipxe.url when workflows are not allowed", objs: []model.Object{with(allowed(), func(h *model.Hardware) {
			h.Spec.Interfaces[0].Netboot.IPXE = &model.IPXE{URL: "http://10.0.0.2/menu.ipxe"}
			h.Spec.Interfaces[0].Netboot.AllowWorkflow = bp(false)
		}), wf("default", "w", "m1", "PENDING")}, req: httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantBody: []string{"chain http://10.0.0.2/menu.ipxe"}},
		{name: "ipxe.contents", objs: []model.Object{with(allowed(), func(h *model.Hardware) {
			h.Spec.Interfaces[0].Netboot.IPXE = &model.IPXE{Contents: "dhcp\nchain http://x/y"}
		})}, req: httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantReason: "hardware default/m1: spec.interfaces[0].netboot.ipxe.contents",
			wantBody:   []string{"#!ipxe\n# Anvil: hardware default/m1: spec.interfaces[0].netboot.ipxe.contents\ndhcp\nchain http://x/y\n"}},

		// Values that would inject iPXE commands are refused, naming the field.
		{name: "kernelParams injection", objs: []model.Object{with(allowed(), func(h *model.Hardware) {
			h.Spec.Interfaces[0].Netboot.OSIE = &model.OSIE{KernelParams: []string{"quiet", "x\nshell"}}
		}), wf("default", "w", "m1", "PENDING")}, req: httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantErr: ipxe.ErrUnsafe, wantErrText: "hardware default/m1: spec.interfaces[0].netboot.osie.kernelParams[1]"},
		{name: "kernelParams separator", objs: []model.Object{with(allowed(), func(h *model.Hardware) {
			h.Spec.Interfaces[0].Netboot.OSIE = &model.OSIE{KernelParams: []string{"||"}}
		}), wf("default", "w", "m1", "PENDING")}, req: httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantErr: ipxe.ErrUnsafe, wantErrText: "kernelParams[0]"},
		// The agent's arguments are refused by agentcmdline first (a value
		// the kernel command line cannot carry), else by ipxe.CheckArg.
		{name: "vlan_id injection", objs: []model.Object{with(allowed(), func(h *model.Hardware) {
			h.Spec.Interfaces[0].DHCP.VLANID = "5 ; shell"
		}), wf("default", "w", "m1", "PENDING")}, req: httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantErrText: `hardware default/m1: spec.interfaces[0].dhcp.vlan_id: "5 ; shell": want a VLAN ID from 1 to 4094`},
		{name: "vlan_id out of range", objs: []model.Object{with(allowed(), func(h *model.Hardware) {
			h.Spec.Interfaces[0].DHCP.VLANID = "4095"
		}), wf("default", "w", "m1", "PENDING")}, req: httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantErrText: `spec.interfaces[0].dhcp.vlan_id: "4095": want a VLAN ID`},
		{name: "agentID injection", objs: []model.Object{with(allowed(), func(h *model.Hardware) {
			h.Spec.AgentID = "a\r\nsanboot"
		}), wf("default", "w", "m1", "PENDING")}, req: httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantErrText: `hardware default/m1: spec.agentID: worker_id="a\r\nsanboot": a line break at byte 1`},
		{name: "agentID iPXE continues", objs: []model.Object{with(allowed(), func(h *model.Hardware) {
			h.Spec.AgentID = `a\`
		}), wf("default", "w", "m1", "PENDING")}, req: httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantErr: ipxe.ErrUnsafe, wantErrText: "hardware default/m1: spec.agentID: "},
		{name: "facility injection", objs: []model.Object{with(allowed(), func(h *model.Hardware) {
			h.Spec.Metadata = &model.HardwareMetadata{Facility: &model.MetadataFacility{FacilityCode: "x #"}}
		}), wf("default", "w", "m1", "PENDING")}, req: httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantErrText: "spec.metadata.facility.facility_code: facility=\"x #\": whitespace"},
		{name: "osie.baseURL injection", objs: []model.Object{with(allowed(), func(h *model.Hardware) {
			h.Spec.Interfaces[0].Netboot.OSIE = &model.OSIE{BaseURL: "http://x/\nshell"}
		}), wf("default", "w", "m1", "PENDING")}, req: httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantErr: ipxe.ErrUnsafe, wantErrText: "osie.baseURL"},
		{name: "ipxe.url injection", objs: []model.Object{with(allowed(), func(h *model.Hardware) {
			h.Spec.Interfaces[0].Netboot.IPXE = &model.IPXE{URL: "http://x/a\nshell"}
		})}, req: httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantErr: ipxe.ErrUnsafe, wantErrText: "spec.interfaces[0].netboot.ipxe.url"},
		{name: "hostile hostname does not reach the script", objs: []model.Object{with(allowed(), func(h *model.Hardware) {
			h.Spec.Interfaces[0].DHCP.Hostname = "node\nshell"
		}), wf("default", "w", "m1", "PENDING")}, req: httpboot.ScriptRequest{MAC: mustMAC(mac1)},
			wantKernel: bootEnvLine("x86_64", mac1)},

		// Finding the machine.
		{name: "by source IP", noMAC: true, source: "10.0.0.12", objs: []model.Object{
			hw("m1", nic(mac1, "10.0.0.11", bp(false)), nic(mac2, "10.0.0.12", bp(true))), wf("default", "w", "m1", "PENDING")},
			wantKernel: bootEnvLine("x86_64", mac2)},
		{name: "by source IP, IPv4-mapped", noMAC: true, source: "::ffff:10.0.0.12", objs: []model.Object{
			hw("m1", nic(mac2, "10.0.0.12", bp(true))), wf("default", "w", "m1", "PENDING")},
			wantKernel: bootEnvLine("x86_64", mac2)},
		{name: "second NIC gets its own netboot settings", objs: []model.Object{
			hw("m1", nic(mac1, "10.0.0.11", bp(false)), nic(mac2, "10.0.0.12", bp(true))), wf("default", "w", "m1", "PENDING")},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac2)}, wantKernel: bootEnvLine("x86_64", mac2)},
		{name: "first NIC of the same machine is refused", objs: []model.Object{
			hw("m1", nic(mac1, "10.0.0.11", bp(false)), nic(mac2, "10.0.0.12", bp(true))), wf("default", "w", "m1", "PENDING")},
			req: httpboot.ScriptRequest{MAC: mustMAC(mac1)}, wantReason: "spec.interfaces[0].netboot.allowPXE is false"},
		{name: "MAC written in upper case with hyphens", objs: []model.Object{
			hw("m1", nic("52-54-00-AA-BB-CC", "", bp(true))), wf("default", "w", "m1", "PENDING")},
			req: httpboot.ScriptRequest{MAC: mustMAC("52:54:00:aa:bb:cc")}, wantKernel: bootEnvLine("x86_64", "52:54:00:aa:bb:cc")},
		{name: "MAC written in upper case", objs: []model.Object{
			hw("m1", nic("52:54:00:AA:BB:CC", "", bp(true))), wf("default", "w", "m1", "PENDING")},
			req: httpboot.ScriptRequest{MAC: mustMAC("52:54:00:aa:bb:cc")}, wantKernel: bootEnvLine("x86_64", "52:54:00:aa:bb:cc")},
		{name: "no MAC and no source", wantErr: httpboot.ErrNoScript, noMAC: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig()
			if tc.mode != "" {
				cfg.Mode = tc.mode
			}
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			p, _ := newPolicy(t, cfg, tc.objs...)
			req := tc.req
			if tc.source != "" {
				req.Source = netip.MustParseAddr(tc.source)
			}
			if tc.noMAC {
				req.MAC = macaddr.MAC{}
			}
			s, err := p.Script(t.Context(), req)
			if tc.wantErr != nil || tc.wantErrText != "" {
				if err == nil {
					t.Fatalf("Script = %q (%s); want an error", s.Body, s.Reason)
				}
				if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
					t.Errorf("Script error = %v; want one wrapping %v", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErrText) {
					t.Errorf("Script error = %q; want it to contain %q", err, tc.wantErrText)
				}
				return
			}
			if err != nil {
				t.Fatalf("Script: %v", err)
			}
			if !strings.HasPrefix(s.Body, "#!ipxe\n") {
				t.Errorf("body does not start with #!ipxe:\n%s", s.Body)
			}
			if !strings.Contains(s.Reason, tc.wantReason) {
				t.Errorf("reason = %q; want it to contain %q", s.Reason, tc.wantReason)
			}
			if tc.wantKernel != nil {
				if got := kernelLine(s.Body); !slices.Equal(got, tc.wantKernel) {
					t.Errorf("kernel command:\n got %q\nwant %q\n%s", got, tc.wantKernel, s.Body)
				}
			}
			for _, w := range tc.wantBody {
				if !strings.Contains(s.Body, w) {
					t.Errorf("body lacks %q:\n%s", w, s.Body)
				}
			}
		})
	}
}

// ---- Lookup ----

func TestLookup(t *testing.T) {
	full := hw("m1",
		model.Interface{
			DHCP: &model.DHCP{
				MAC: "3C:EC:EF:12:34:07", Hostname: "rack1-node07", DomainName: "lab.example.com", LeaseTime: 3600,
				IP:          &model.IP{Address: "10.20.0.17", Netmask: "255.255.255.0", Gateway: "10.20.0.1"},
				NameServers: []string{"10.20.0.1", "1.1.1.1", "2001:db8::1", "dns.example.com"},
				TimeServers: []string{"10.20.0.2", "pool.ntp.org"},
				ClasslessStaticRoutes: []model.ClasslessStaticRoute{
					{DestinationDescriptor: "10.1.0.0/16", Router: "10.20.0.1"},
					{DestinationDescriptor: "10.2.3.4/255.255.0.0", Router: "10.20.0.1"},
					{DestinationDescriptor: "10.3.0.5", Router: "10.20.0.9"},
					{DestinationDescriptor: "nonsense", Router: "10.20.0.1"},
					{DestinationDescriptor: "10.4.0.0/16", Router: "gateway"},
					{DestinationDescriptor: "2001:db8::/32", Router: "10.20.0.1"},
				},
			},
			Netboot: &model.Netboot{AllowPXE: bp(true), IPXE: &model.IPXE{Binary: "snponly.efi"}},
		},
		model.Interface{
			DHCP: &model.DHCP{MAC: "3c:ec:ef:12:34:08", IP: &model.IP{Address: "192.168.7.8", Netmask: "/24"},
				TFTPServerName: "10.20.0.5", BootFileName: "pxelinux.0"},
			DisableDHCP: bp(true),
		},
	)
	meta := hw("m2", model.Interface{DHCP: &model.DHCP{MAC: "52:54:00:00:00:02", Hostname: "", TFTPServerName: "10.0.0.5",
		IP: &model.IP{Address: "10.0.0.2", Netmask: "255.0.255.0"}},
		Netboot: &model.Netboot{IPXE: &model.IPXE{Binary: "../../etc/shadow"}}})
	meta.Spec.Metadata = &model.HardwareMetadata{Instance: &model.MetadataInstance{Hostname: "from-metadata"}}
	evil := hw("m3", model.Interface{DHCP: &model.DHCP{MAC: "52:54:00:00:00:03", Hostname: "x\nreboot", DomainName: "a b"}})
	other := with(hw("m4", model.Interface{DHCP: &model.DHCP{MAC: "52:54:00:00:00:04"}}), func(h *model.Hardware) { h.Namespace = "lab" })

	p, warns := newPolicy(t, baseConfig(), full, meta, evil, other)
	tests := []struct {
		mac  string
		want dhcp.Host
	}{
		{"3c:ec:ef:12:34:07", dhcp.Host{
			Name: "default/m1", IP: netip.MustParseAddr("10.20.0.17"), Netmask: net.CIDRMask(24, 32),
			Gateway: netip.MustParseAddr("10.20.0.1"),
			DNS:     []netip.Addr{netip.MustParseAddr("10.20.0.1"), netip.MustParseAddr("1.1.1.1")},
			NTP:     []netip.Addr{netip.MustParseAddr("10.20.0.2")}, Hostname: "rack1-node07", Domain: "lab.example.com",
			LeaseTime: time.Hour,
			Routes: []dhcp.Route{
				{Dest: netip.MustParsePrefix("10.1.0.0/16"), Router: netip.MustParseAddr("10.20.0.1")},
				{Dest: netip.MustParsePrefix("10.2.0.0/16"), Router: netip.MustParseAddr("10.20.0.1")},
				{Dest: netip.MustParsePrefix("10.3.0.5/32"), Router: netip.MustParseAddr("10.20.0.9")},
			},
			AllowPXE: true, IPXEBinary: "snponly.efi",
		}},
		{"3C-EC-EF-12-34-08", dhcp.Host{
			Name: "default/m1", DisableDHCP: true, IP: netip.MustParseAddr("192.168.7.8"), Netmask: net.CIDRMask(24, 32),
			TFTPServer: "10.20.0.5", BootFile: "pxelinux.0",
		}},
		{"52:54:00:00:00:02", dhcp.Host{Name: "default/m2", IP: netip.MustParseAddr("10.0.0.2"), Hostname: "from-metadata"}},
		{"52:54:00:00:00:03", dhcp.Host{Name: "default/m3"}},
		{"52:54:00:00:00:04", dhcp.Host{Name: "lab/m4"}},
	}
	for _, tc := range tests {
		t.Run(tc.mac, func(t *testing.T) {
			got, err := p.Lookup(t.Context(), mustMAC(tc.mac))
			if err != nil {
				t.Fatal(err)
			}
			if g, w := fmt.Sprintf("%+v", *got), fmt.Sprintf("%+v", tc.want); g != w {
				t.Errorf("Lookup(%s)\n got %s\nwant %s", tc.mac, g, w)
			}
		})
	}

	// Every unusable field was reported, once, naming the Hardware and field.
	wantWarn := []string{
		`"2001:db8::1" is not an IPv4 address hardware=default/m1 field=spec.interfaces[0].dhcp.name_servers[2]`,
		`"dns.example.com" is not an IPv4 address hardware=default/m1 field=spec.interfaces[0].dhcp.name_servers[3]`,
		`"pool.ntp.org" is not an IPv4 address hardware=default/m1 field=spec.interfaces[0].dhcp.time_servers[1]`,
		`field=spec.interfaces[0].dhcp.classless_static_routes[3].destination_descriptor`,
		`"gateway" is not an IPv4 address hardware=default/m1 field=spec.interfaces[0].dhcp.classless_static_routes[4].router`,
		`field=spec.interfaces[0].dhcp.classless_static_routes[5].destination_descriptor`,
		`netmask "255.0.255.0" is not contiguous hardware=default/m2`,
		`"../../etc/shadow" is not a plain file name hardware=default/m2 field=spec.interfaces[0].netboot.ipxe.binary`,
		`tftp_server_name and boot_file_name go together`,
		`"x\nreboot" is not a hostname`,
		`"a b" is not a domain name`,
	}
	first := warns.all()
	for _, w := range wantWarn {
		n := 0
		for _, m := range first {
			if strings.Contains(m, w) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("warning %q logged %d times; want once. Warnings:\n%s", w, n, strings.Join(first, "\n"))
		}
	}
	for _, tc := range tests {
		if _, err := p.Lookup(t.Context(), mustMAC(tc.mac)); err != nil {
			t.Fatal(err)
		}
	}
	if again := warns.all(); len(again) != len(first) {
		t.Errorf("a second round of lookups logged %d more warnings; want none:\n%s", len(again)-len(first),
			strings.Join(again[len(first):], "\n"))
	}

	_, err := p.Lookup(t.Context(), mustMAC("52:54:00:00:00:99"))
	if !errors.Is(err, dhcp.ErrUnknownHost) || !strings.Contains(err.Error(), "52:54:00:00:00:99") {
		t.Errorf("Lookup(unknown) error = %v; want ErrUnknownHost naming the MAC", err)
	}
}

// A Hardware changed by the operator is warned about again.
func TestLookupWarnsAgainAfterChange(t *testing.T) {
	p, warns := newPolicy(t, baseConfig(), hw("m1", model.Interface{DHCP: &model.DHCP{MAC: mac1, TimeServers: []string{"ntp.lab"}}}))
	st := p.store.(*bolt.Store)
	for range 3 {
		if _, err := p.Lookup(t.Context(), mustMAC(mac1)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(warns.all()); n != 1 {
		t.Fatalf("%d warnings; want 1", n)
	}
	o, err := st.Get(t.Context(), model.KindHardware, "default", "m1")
	if err != nil {
		t.Fatal(err)
	}
	h := o.(*model.Hardware)
	h.Spec.Interfaces[0].DHCP.Hostname = "m1"
	if _, err := st.Update(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Lookup(t.Context(), mustMAC(mac1)); err != nil {
		t.Fatal(err)
	}
	if n := len(warns.all()); n != 2 {
		t.Errorf("%d warnings after the change; want 2", n)
	}
}

func TestDuplicateMAC(t *testing.T) {
	p, warns := newPolicy(t, baseConfig(),
		hw("a", nic(mac1, "10.0.0.1", bp(true))),
		hw("b", nic(mac1, "10.0.0.2", bp(true))))
	h, err := p.Lookup(t.Context(), mustMAC(mac1))
	if err != nil {
		t.Fatal(err)
	}
	if h.Name != "default/a" {
		t.Errorf("Lookup picked %s; want default/a, the first by name", h.Name)
	}
	if w := warns.all(); len(w) != 1 || !strings.Contains(w[0], "several Hardware have the same MAC") {
		t.Errorf("warnings = %q; want one about the duplicate MAC", w)
	}
}

// ---- New ----

func TestNew(t *testing.T) {
	s := openStore(t)
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{"ok", func(*Config) {}, ""},
		{"no store", func(c *Config) { c.Store = nil }, "no store"},
		{"bad mode", func(c *Config) { c.Mode = "dhcp" }, `unknown mode "dhcp"`},
		{"no public URL", func(c *Config) { c.PublicHTTP = "" }, "no public HTTP URL"},
		{"public URL not http", func(c *Config) { c.PublicHTTP = "tftp://10.0.0.1" }, "want an http:// or https:// URL"},
		{"public URL with a space", func(c *Config) { c.PublicHTTP = "http://10.0.0.1 /" }, "whitespace"},
		{"no gRPC authority", func(c *Config) { c.GRPCAuthority = "" }, "no gRPC authority"},
		{"gRPC authority without port", func(c *Config) { c.GRPCAuthority = "10.0.0.1" }, "want host:port"},
		{"syslog host injection", func(c *Config) { c.SyslogHost = "10.0.0.1\nshell" }, "line break"},
		{"console with a space", func(c *Config) { c.Console = []string{"ttyS0, 115200"} }, "whitespace"},
		{"extra arg separator", func(c *Config) { c.ExtraKernelArgs = []string{"&&"} }, "separator"},
		{"bad boot env URL", func(c *Config) { c.BootEnvURL = "/bootenv" }, "boot environment URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig()
			cfg.Store = s
			tc.mod(&cfg)
			_, err := New(cfg)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("New: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("New error = %v; want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	p, err := New(Config{Store: openStore(t), PublicHTTP: "http://10.0.0.1:7080/", GRPCAuthority: "10.0.0.1:42113"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode() != ModeReservation {
		t.Errorf("Mode() = %q; want %q", p.Mode(), ModeReservation)
	}
	if p.bootEnvURL != "http://10.0.0.1:7080/bootenv" {
		t.Errorf("boot env URL = %q", p.bootEnvURL)
	}
	if got := p.console("x86_64"); !slices.Equal(got, []string{"console=tty0", "console=ttyS0,115200"}) {
		t.Errorf("x86_64 console args = %q", got)
	}
	if got := p.console("aarch64"); !slices.Equal(got, []string{"console=tty0", "console=ttyAMA0,115200"}) {
		t.Errorf("aarch64 console args = %q", got)
	}
	if p.agentArgs.SyslogHost != "" {
		t.Errorf("syslog_host=%s given with no SyslogHost", p.agentArgs.SyslogHost)
	}
	p, err = New(Config{Store: openStore(t), PublicHTTP: "http://h", GRPCAuthority: "h:1", Console: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.console("x86_64")) != 0 || len(p.console("aarch64")) != 0 {
		t.Errorf("Console: []string{} gave %q and %q (aarch64); want no console= arguments", p.console("x86_64"), p.console("aarch64"))
	}
	// An operator's consoles are every architecture's.
	p, err = New(Config{Store: openStore(t), PublicHTTP: "http://h", GRPCAuthority: "h:1", Console: []string{"ttyS1,9600"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.console("aarch64"); !slices.Equal(got, []string{"console=ttyS1,9600"}) {
		t.Errorf("aarch64 console args with Console set = %q", got)
	}
}

// ---- cost ----

// BenchmarkScript and BenchmarkLookup run against a store of 10,000
// machines, each with a finished workflow: both are indexed lookups, so the
// size of the fleet must not show.
func benchPolicy(b *testing.B) *Policy {
	s := openStore(b)
	var objs []model.Object
	for n := range 10000 {
		mac := fmt.Sprintf("52:54:00:%02x:%02x:%02x", n>>16, (n>>8)&0xff, n&0xff)
		name := fmt.Sprintf("m%05d", n)
		objs = append(objs, hw(name, nic(mac, fmt.Sprintf("10.%d.%d.%d", n>>16, (n>>8)&0xff, n&0xff), bp(true))),
			wf("default", "w"+name, name, "SUCCESS"))
	}
	if _, err := s.Apply(context.Background(), objs); err != nil {
		b.Fatal(err)
	}
	cfg := baseConfig()
	cfg.Store = s
	cfg.Logger = slog.New(slog.DiscardHandler)
	p, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

func BenchmarkScript(b *testing.B) {
	p := benchPolicy(b)
	req := httpboot.ScriptRequest{MAC: mustMAC("52:54:00:00:12:34")}
	for b.Loop() {
		if _, err := p.Script(b.Context(), req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLookup(b *testing.B) {
	p := benchPolicy(b)
	mac := mustMAC("52:54:00:00:12:34")
	for b.Loop() {
		if _, err := p.Lookup(b.Context(), mac); err != nil {
			b.Fatal(err)
		}
	}
}

// ---- through the HTTP handler ----

// TestThroughHTTP serves the policy's scripts with httpboot, as anvil serve
// does, and checks what a machine and the machine log see.
func TestThroughHTTP(t *testing.T) {
	p, _ := newPolicy(t, baseConfig(), hw("m1", nic(mac1, "192.0.2.1", bp(true))), wf("default", "install", "m1", "PENDING"))
	var (
		mu     sync.Mutex
		events []string
	)
	h := httpboot.New(httpboot.Config{Scripter: p, Logger: slog.New(slog.DiscardHandler),
		Events: machinelog.SinkFunc(func(e machinelog.Event) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, e.Outcome+" "+e.Message)
		})})
	tests := []struct {
		target   string
		wantCode int
		wantBody string
	}{
		{"/ipxe/script/52-54-00-00-00-01/auto.ipxe?buildarch=arm64", 200, "kernel http://10.0.0.1:7080/bootenv/vmlinuz-aarch64 "},
		{"/ipxe/script/auto.ipxe", 200, "worker_id=52:54:00:00:00:01 "}, // httptest's source is 192.0.2.1
		{"/ipxe/script/52:54:00:00:00:99/auto.ipxe", 404, "no script for this machine: no Hardware has MAC 52:54:00:00:00:99\n"},
	}
	for _, tc := range tests {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", tc.target, nil))
		if w.Code != tc.wantCode || !strings.Contains(w.Body.String(), tc.wantBody) {
			t.Errorf("GET %s = %d %q; want %d and %q", tc.target, w.Code, w.Body.String(), tc.wantCode, tc.wantBody)
		}
	}
	want := []string{
		"served GET /ipxe/script/52-54-00-00-00-01/auto.ipxe: workflow default/install is PENDING: boot environment",
		"served GET /ipxe/script/auto.ipxe: workflow default/install is PENDING: boot environment",
		"not-found GET /ipxe/script/52:54:00:00:00:99/auto.ipxe: 404: no script for this machine: no Hardware has MAC 52:54:00:00:00:99",
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(events, want) {
		t.Errorf("machine log:\n got %q\nwant %q", events, want)
	}
}
