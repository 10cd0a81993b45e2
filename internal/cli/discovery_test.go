package cli

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/server"
)

// TestGetDiscoveredHardware: a server started with discovery makes the
// Hardware of a machine that reports itself, and `anvil get hardware -l
// anvil.io/discovered=true` lists it and only it.
func TestGetDiscoveredHardware(t *testing.T) {
	addr := startServerWith(t, func(c *server.Config) { c.Discovery = true })
	manifest := filepath.Join(t.TempDir(), "known.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: rack1-node07}
spec:
  interfaces:
  - dhcp: {mac: "3c:ec:ef:12:34:07"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, addr, "apply", "-f", manifest)

	ag := anvilv1connect.NewAgentServiceClient(http.DefaultClient, addr)
	resp, err := ag.Discover(context.Background(), connect.NewRequest(&v1.DiscoverRequest{AgentId: "52:54:00:00:00:01",
		AgentAttributes: &v1.AgentAttributes{Inventory: []byte(`{"anvil":{"uuid":"9E8F3C36-0D3F-4A8E-9B6C-2F1D3C4B5A69"},"blockDevices":[{"name":"vda","size":"8GB"}]}`)}}))
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	const name = "discovery-9e8f3c36-0d3f-4a8e-9b6c-2f1d3c4b5a69"
	if resp.Msg.GetHardware() != "default/"+name || !resp.Msg.GetCreated() {
		t.Fatalf("Discover = %+v; want default/%s created", resp.Msg, name)
	}
	if got := strings.TrimSpace(mustRun(t, addr, "get", "hardware", "-l", "anvil.io/discovered=true", "-o", "name")); got != "hardware/"+name {
		t.Errorf("anvil get hardware -l anvil.io/discovered=true -o name = %q; want hardware/%s alone", got, name)
	}
	all := mustRun(t, addr, "get", "hardware", "-o", "name")
	if !strings.Contains(all, "hardware/rack1-node07") || !strings.Contains(all, "hardware/"+name) {
		t.Errorf("anvil get hardware -o name = %q; want both machines", all)
	}
	out := mustRun(t, addr, "get", "hardware", name, "-o", "yaml")
	for _, want := range []string{"anvil.io/discovered: \"true\"", "tinkerbell.org/auto-discovered: \"true\"", "device: /dev/vda", `mac: "52:54:00:00:00:01"`} {
		if !strings.Contains(out, want) {
			t.Errorf("anvil get hardware %s -o yaml lacks %q:\n%s", name, want, out)
		}
	}
}
