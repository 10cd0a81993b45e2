package bootpolicy

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/agentcmdline"
	"github.com/anvilproj/anvil/internal/httpboot"
)

// TestScriptListsReplicas: in Kubernetes mode the boot environment's
// anvil.server= lists this replica first, then the other live replicas,
// each once; what cannot be listed or used is left out with a warning,
// and the machine still boots.
func TestScriptListsReplicas(t *testing.T) {
	tests := []struct {
		name     string
		replicas func(context.Context) ([]string, error)
		want     []string // the agent's endpoints, in order
		warn     []string // substrings of the warnings, in order
	}{
		{name: "embedded store: this server alone", want: []string{"http://10.0.0.1:7080"}},
		{
			name: "this replica first, then the others, each once",
			replicas: func(context.Context) ([]string, error) {
				return []string{"http://10.0.0.2:7080", "http://10.0.0.3:7080/", "http://10.0.0.1:7080", "http://10.0.0.2:7080"}, nil
			},
			want: []string{"http://10.0.0.1:7080", "http://10.0.0.2:7080", "http://10.0.0.3:7080"},
		},
		{
			name: "unusable replica URLs are left out, named",
			replicas: func(context.Context) ([]string, error) {
				return []string{"10.0.0.2:7080", "http://10.0.0.4:7080/a,b", "http://10.0.0.3:7080"}, nil
			},
			want: []string{"http://10.0.0.1:7080", "http://10.0.0.3:7080"},
			warn: []string{`leaving a replica out of anvil.server= err=bootpolicy: replica URL: "10.0.0.2:7080" is not a URL`,
				`replica URL "http://10.0.0.4:7080/a,b" holds ","`},
		},
		{
			name:     "replicas not listed: this replica alone",
			replicas: func(context.Context) ([]string, error) { return nil, errors.New("the API server is away") },
			want:     []string{"http://10.0.0.1:7080"},
			warn:     []string{"the other replicas could not be listed", "the API server is away"},
		},
		{
			name: "the listing is bounded in time",
			replicas: func(ctx context.Context) ([]string, error) {
				<-ctx.Done() // a hung API server
				return nil, ctx.Err()
			},
			want: []string{"http://10.0.0.1:7080"},
			warn: []string{"context deadline exceeded"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig()
			cfg.Replicas = tc.replicas
			p, w := newPolicy(t, cfg, hw("m1", nic(mac1, "10.0.0.11", bp(true))), wf("default", "w", "m1", "PENDING"))
			s, err := p.Script(context.Background(), httpboot.ScriptRequest{MAC: mustMAC(mac1)})
			if err != nil {
				t.Fatal(err)
			}
			var kernel string
			for _, l := range strings.Split(s.Body, "\n") {
				if strings.HasPrefix(l, "kernel ") {
					kernel = l
				}
			}
			params, err := agentcmdline.Parse(kernel)
			if err != nil {
				t.Fatalf("the agent cannot read the kernel line %q: %v", kernel, err)
			}
			if got, _ := params.Endpoints(); !slices.Equal(got, tc.want) {
				t.Errorf("the agent's servers %q; want %q (line %q)", got, tc.want, kernel)
			}
			warnings := strings.Join(w.all(), "\n")
			for _, want := range tc.warn {
				i := strings.Index(warnings, want)
				if i < 0 {
					t.Errorf("warnings lack %q:\n%s", want, warnings)
					continue
				}
				warnings = warnings[i+len(want):]
			}
			if len(tc.warn) == 0 && len(w.all()) > 0 {
				t.Errorf("warnings %q; want none", w.all())
			}
		})
	}
}
