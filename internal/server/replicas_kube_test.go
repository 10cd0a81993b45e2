package server

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/agentcmdline"
	"github.com/anvilproj/anvil/internal/store/backend"
	"github.com/anvilproj/anvil/internal/testtool"
)

// TestKubernetesBootScriptListsReplicas: with two replicas on one cluster,
// the boot environment script each writes gives the agent both addresses,
// its own first, so that the agent moves on to the other when it dies.
func TestKubernetesBootScriptListsReplicas(t *testing.T) {
	_, kubeconfig := kubeCluster(t)
	var bases []string
	for range 2 {
		base, _, _, _, _ := startWith(t, func(cfg *Config) {
			cfg.Store = backend.Config{Kind: backend.Kubernetes, Kubeconfig: kubeconfig}
		})
		bases = append(bases, base)
	}
	m := anvilv1connect.NewManifestServiceClient(http.DefaultClient, bases[0])
	if _, err := m.Apply(context.Background(), connect.NewRequest(&v1.ApplyRequest{Source: "examples", Content: manifests(t)})); err != nil {
		t.Fatal(err)
	}
	for i, base := range bases {
		want := agentcmdline.JoinServers([]string{base, bases[1-i]})
		testtool.WaitFor(t, "replica "+base+"'s boot script to give anvil.server="+want, func() bool {
			return serverArg(bootScript(t, base)) == want
		})
	}
}

// serverArg is the value of anvil.server= in a boot script.
func serverArg(script string) string {
	for _, f := range strings.Fields(script) {
		if v, ok := strings.CutPrefix(f, agentcmdline.ArgServer+"="); ok {
			return v
		}
	}
	return ""
}
