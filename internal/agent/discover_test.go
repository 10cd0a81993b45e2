package agent

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
)

// discoverAPI answers Discover from a script of answers, one per call,
// and records what it was sent.
type discoverAPI struct {
	anvilv1connect.UnimplementedAgentServiceHandler
	mu      sync.Mutex
	answers []func() (*v1.DiscoverResponse, error)
	got     []*v1.DiscoverRequest
}

func (d *discoverAPI) Discover(_ context.Context, req *connect.Request[v1.DiscoverRequest]) (*connect.Response[v1.DiscoverResponse], error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got = append(d.got, req.Msg)
	if len(d.got) > len(d.answers) {
		return nil, connect.NewError(connect.CodeInternal, errors.New("asked too often"))
	}
	r, err := d.answers[len(d.got)-1]()
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(r), nil
}

// The agent reports, waits while the server has no work for it, backs
// off when the server is busy, and returns the token of the workflow it
// is given.
func TestDiscover(t *testing.T) {
	hw := "default/discovery-525400000001"
	api := &discoverAPI{answers: []func() (*v1.DiscoverResponse, error){
		func() (*v1.DiscoverResponse, error) { return &v1.DiscoverResponse{Hardware: hw, Created: true}, nil },
		func() (*v1.DiscoverResponse, error) {
			return nil, connect.NewError(connect.CodeResourceExhausted, errors.New("8 discovery calls are at work; ask again"))
		},
		func() (*v1.DiscoverResponse, error) { return &v1.DiscoverResponse{Hardware: hw}, nil },
		func() (*v1.DiscoverResponse, error) {
			return &v1.DiscoverResponse{Hardware: hw, WorkflowId: "default/enroll-x", AgentToken: "v1.tok"}, nil
		},
	}}
	url := serveAPI(t, api)
	var out bytes.Buffer
	attrs := &v1.AgentAttributes{Inventory: []byte(`{"cpu":{"totalCores":2}}`)}
	token, err := Discover(context.Background(), DiscoverConfig{
		Servers:    []Server{{URL: url, Client: anvilv1connect.NewAgentServiceClient(http.DefaultClient, url)}},
		AgentID:    "52:54:00:00:00:01",
		Attributes: attrs,
		Console:    &out,
		Wait:       time.Second, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
	})
	if err != nil || token != "v1.tok" {
		t.Fatalf("Discover = %q, %v; want the workflow's token", token, err)
	}
	if len(api.got) != 4 {
		t.Fatalf("%d calls; want 4", len(api.got))
	}
	for _, r := range api.got {
		if r.GetAgentId() != "52:54:00:00:00:01" || string(r.GetAgentAttributes().GetInventory()) != string(attrs.Inventory) || r.GetWait().AsDuration() != time.Second {
			t.Errorf("request %+v; want the agent ID, the inventory and the wait", r)
		}
	}
	console := out.String()
	for _, want := range []string{"this machine is now Hardware " + hw + "; waiting for a workflow", "discovery refused: resource_exhausted",
		"workflow default/enroll-x is this machine's"} {
		if !strings.Contains(console, want) {
			t.Errorf("console lacks %q:\n%s", want, console)
		}
	}
	if strings.Count(console, "is now Hardware") != 1 {
		t.Errorf("the Hardware is announced more than once:\n%s", console)
	}
}

// A busy server's refusals are asked again after waits spread over
// [d/2, d], not all after d: a storm's machines do not come back in
// lockstep.
func TestSpread(t *testing.T) {
	d := 4 * time.Second
	seen := map[time.Duration]bool{}
	for range 200 {
		w := spread(d)
		if w < d/2 || w > d {
			t.Fatalf("spread(%s) = %s; want within [%s, %s]", d, w, d/2, d)
		}
		seen[w] = true
	}
	if len(seen) < 100 {
		t.Errorf("spread(%s) gave %d distinct waits in 200 draws; want them spread", d, len(seen))
	}
	for _, d := range []time.Duration{0, 1} {
		if w := spread(d); w != d {
			t.Errorf("spread(%s) = %s", d, w)
		}
	}
}
