package server

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/bmc/bmctest"
	"github.com/anvilproj/anvil/internal/testtool"
)

// TestBMCPolling: with BMCPollInterval set (anvil serve
// --bmc-poll-interval), a Machine applied to the running server gets its
// power state from its BMC (ipmi_sim) with no Job, as soon as it is
// applied, not at the end of the hour.
func TestBMCPolling(t *testing.T) {
	sim := bmctest.StartSim(t, "admin", "poll-test-pw")
	base, _, _, _, _ := startWith(t, func(c *Config) { c.BMCPollInterval = time.Hour })
	ctx := context.Background()
	manifests := anvilv1connect.NewManifestServiceClient(http.DefaultClient, base)
	doc := fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: bmc-auth
stringData:
  username: admin
  password: poll-test-pw
---
apiVersion: bmc.tinkerbell.org/v1alpha1
kind: Machine
metadata:
  name: polled
spec:
  connection:
    host: %s
    port: %d
    authSecretRef:
      name: bmc-auth
    providerOptions:
      ipmitool:
        cipherSuite: "3"
`, sim.Host, sim.Port)
	if _, err := manifests.Apply(ctx, connect.NewRequest(&v1.ApplyRequest{Source: "bmc.yaml", Content: doc})); err != nil {
		t.Fatal(err)
	}
	machines := anvilv1connect.NewMachineServiceClient(http.DefaultClient, base)
	testtool.WaitFor(t, "the machine's power state", func() bool {
		m, err := machines.Get(ctx, connect.NewRequest(&v1.GetRequest{Namespace: "default", Name: "polled"}))
		if err != nil {
			t.Fatal(err)
		}
		return m.Msg.GetStatus().GetFields()["powerState"].GetStringValue() == "off"
	})
	jobs, err := anvilv1connect.NewBmcJobServiceClient(http.DefaultClient, base).List(ctx, connect.NewRequest(&v1.ListRequest{Namespace: "default"}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(jobs.Msg.Items); n != 0 {
		t.Errorf("%d Jobs: the power state should come from the poller alone", n)
	}
}
