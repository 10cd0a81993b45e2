package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/anvilproj/anvil/internal/leader"
	"github.com/anvilproj/anvil/internal/supervise"
)

// LeaderConfig is Kubernetes mode's leader election (docs/kubernetes.md):
// every replica serves DHCP, TFTP, HTTP, metadata, the API and agents;
// one, holding a coordination.k8s.io Lease, runs the workflow engine's
// reconciler and the BMC executor and poller. With the embedded store
// there is one server, and it is the leader without a Lease.
type LeaderConfig struct {
	// Namespace is the Lease's namespace. If empty, $POD_NAMESPACE, else
	// "default".
	Namespace string
	// Identity names this replica in the Lease. If empty, $POD_NAME
	// (else the host name) with a random suffix.
	Identity string
	// LeaseDuration is how long followers wait for a silent leader
	// before taking over; the leader's term ends 2/3 of it after its
	// last renewal. If 0, leader.DefaultLeaseDuration.
	LeaseDuration time.Duration
}

// kubeMissingGrace is the engine's MissingGrace in Kubernetes mode: long
// enough for a lagging watch (milliseconds) and for objects applied
// together by kubectl or a GitOps tool in any order; short enough that a
// Workflow naming a Template that does not exist fails while someone is
// still looking.
const kubeMissingGrace = time.Minute

// elector returns the Lease election of Kubernetes mode, or nil with the
// embedded store.
func elector(cfg Config) (*leader.Elector, error) {
	if !cfg.Store.IsKubernetes() {
		return nil, nil
	}
	rc, err := cfg.Store.RESTConfig()
	if err != nil {
		return nil, err
	}
	lc := leader.Config{REST: rc, Namespace: leaseNamespace(cfg), Identity: cfg.Leader.Identity, Log: cfg.Logger}
	if d := cfg.Leader.LeaseDuration; d > 0 {
		lc.LeaseDuration = d
		lc.RenewDeadline = d * 2 / 3
		lc.RetryPeriod = d * 2 / 15
	}
	el, err := leader.New(lc)
	if err != nil {
		return nil, fmt.Errorf("leader election: %w", err)
	}
	return el, nil
}

// leaseNamespace is where Kubernetes mode keeps the Lease and the shared
// keys: --lease-namespace, else the pod's namespace, else "default".
func leaseNamespace(cfg Config) string {
	if ns := cfg.Leader.Namespace; ns != "" {
		return ns
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return "default"
}

// leaderComponent runs cs only while this replica holds the Lease: each
// term starts them all with the term's context (which carries its Fence,
// so their writes through a leader.Fenced store stop when it ends) and
// waits for all of them before campaigning again. One that fails ends
// the term early, and the Lease passes on.
func leaderComponent(el *leader.Elector, cs []supervise.Component) supervise.Component {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return supervise.Component{
		Name: "leader election (" + strings.Join(names, ", ") + ")",
		Run: func(ctx context.Context) error {
			return el.Run(ctx, func(term context.Context) error {
				tctx, cancel := context.WithCancel(term)
				defer cancel()
				var wg sync.WaitGroup
				var mu sync.Mutex
				var errs []error
				for _, c := range cs {
					wg.Go(func() {
						err := c.Run(tctx)
						if term.Err() == nil {
							// It stopped while the term was on.
							if err == nil {
								err = supervise.ErrStopped
							}
							mu.Lock()
							errs = append(errs, fmt.Errorf("%s: %w", c.Name, err))
							mu.Unlock()
							cancel()
						}
					})
				}
				wg.Wait()
				return errors.Join(errs...)
			})
		},
	}
}
