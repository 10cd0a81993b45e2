package agent

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
)

// DiscoverConfig configures Discover.
type DiscoverConfig struct {
	// Servers are the server's addresses, in the order they are tried.
	// Required.
	Servers []Server
	// AgentID is the MAC the machine booted from (worker_id=). Required.
	AgentID string
	// Attributes carry the inventory. Required: the server makes the
	// machine's Hardware of it.
	Attributes *v1.AgentAttributes
	// Console receives the operator's lines. If nil, they are discarded.
	Console io.Writer
	// ConsoleStamp, if set, prefixes each console line.
	ConsoleStamp func() string
	// Wait, MinBackoff and MaxBackoff are as Config's.
	Wait, MinBackoff, MaxBackoff time.Duration
}

// refusedBackoff is the wait before asking again after a refusal (a
// collision, a full cap): an operator has to act, and asking every few
// seconds would only fill the server's log.
const refusedBackoff = 30 * time.Second

// Discover reports this machine's inventory to the server
// (AgentService.Discover), which makes its Hardware, and asks again, long
// polling, until the server answers that the machine has work. It
// returns the agent token of that workflow, which the agent then sends
// with every call ("" from a server that does not check agents). A
// refusal (the UUID or a MAC is another Hardware's, the cap on discovered
// machines is reached) is printed and asked again after refusedBackoff,
// so that an operator's fix is picked up without a reboot. It returns an
// error only when ctx ends or cfg is broken.
func Discover(ctx context.Context, cfg DiscoverConfig) (string, error) {
	if len(cfg.Servers) == 0 || cfg.AgentID == "" || cfg.Attributes == nil {
		return "", errors.New("agent: discovery needs servers, an agent ID and the inventory")
	}
	if cfg.Wait <= 0 {
		cfg.Wait = DefaultWait
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	con := newConsole(cfg.Console)
	con.stamp = cfg.ConsoleStamp
	srv := newServers(cfg.Servers, con.printf)
	req := &v1.DiscoverRequest{AgentId: cfg.AgentID, AgentAttributes: cfg.Attributes, Wait: durationpb.New(cfg.Wait)}
	bo := backoff{min: cfg.MinBackoff, max: cfg.MaxBackoff}
	con.printf("anvil agent: discovery: reporting this machine (%s) to %s", cfg.AgentID, srv.describe())
	known := ""
	lastRefusal := ""
	for {
		var resp *connect.Response[v1.DiscoverResponse]
		err := srv.call(ctx, cfg.Wait+pollGrace, "discovery", func(ctx context.Context, c anvilv1connect.AgentServiceClient) (err error) {
			resp, err = c.Discover(ctx, connect.NewRequest(req))
			return err
		})
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if err == nil {
			bo.n, lastRefusal = 0, ""
			m := resp.Msg
			if m.GetHardware() != known {
				known = m.GetHardware()
				verb := "is"
				if m.GetCreated() {
					verb = "is now"
				}
				con.printf("anvil agent: discovery: this machine %s Hardware %s; waiting for a workflow (an operator's, or a WorkflowRuleSet's)", verb, known)
			}
			if m.GetWorkflowId() != "" {
				con.printf("anvil agent: discovery: workflow %s is this machine's; running it", m.GetWorkflowId())
				return m.GetAgentToken(), nil
			}
			continue
		}
		wait := bo.next()
		switch connect.CodeOf(err) {
		case connect.CodeAlreadyExists, connect.CodePermissionDenied, connect.CodeFailedPrecondition, connect.CodeInvalidArgument:
			wait = refusedBackoff
			fallthrough
		case connect.CodeResourceExhausted:
			if wait != refusedBackoff {
				wait = spread(wait)
			}
			if msg := err.Error(); msg != lastRefusal {
				lastRefusal = msg
				con.printf("anvil agent: discovery refused: %v (asking again)", err)
			}
		default:
			if bo.n == 1 || bo.n%10 == 0 {
				con.printf("anvil agent: discovery: %v (retrying)", err)
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		case <-t.C:
		}
	}
}

// spread is a wait drawn evenly from [d/2, d]. A busy server refuses the
// machines of a storm together, and the same back-off for all would bring
// them back together: each round a handful get in and the server idles
// between rounds (bench/discovery measured 1,000 machines admitted in
// waves 5 s apart). Spread out, they come back as the server frees its
// slots.
func spread(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}
