package api

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/peers"
)

// Reads that fan out. In Kubernetes mode each replica keeps the machine
// records and the audit entries it received on its own disk
// (docs/kubernetes.md), so GetLogs, ListUnknownMachines and the audit List
// answer from the local store and from every peer replica: the replica
// that was asked puts the same request to each peer, marked with
// v1.PeerQueryHeader (a peer answers from its own data only, so a query
// never goes round) and with the caller's Authorization (every replica
// accepts the same tokens, and each authorizes the caller itself), waits
// at most Config.PeerTimeout, and merges. A peer that does not answer in
// time, or fails, is logged and named in the answer's
// v1.PeersUnansweredHeader; the answer comes anyway, from those that did.

// DefaultPeerTimeout bounds a peer's answer when Config.PeerTimeout is 0.
const DefaultPeerTimeout = 2 * time.Second

// Peers lists the other replicas answering this API (internal/peers'
// Registry implements it).
type Peers interface {
	Peers(ctx context.Context) ([]peers.Peer, error)
}

// fanOut reports whether the call req should be put to the peers too:
// there are peers, and req is not itself a peer's query.
func (s *Services) fanOut(h http.Header) bool {
	return s.cfg.Peers != nil && h.Get(v1.PeerQueryHeader) == ""
}

// askPeers puts msg, a call of procedure, to every peer with call, concurrently, each bounded
// by the peer timeout, forwarding the caller's Authorization from in. It
// returns the answers of those that answered and a description of each
// that did not (in peer order), having logged the latter. A failure to
// list the peers is one such description.
func askPeers[Req, Resp any](ctx context.Context, s *Services, procedure string, in http.Header, msg *Req,
	call func(ctx context.Context, hc connect.HTTPClient, base string, r *connect.Request[Req]) (*connect.Response[Resp], error),
) (answers []*Resp, unanswered []string) {
	// The list comes from the API server: when that is away, the answer
	// must not wait for it longer than for a peer.
	lctx, cancel := context.WithTimeout(ctx, s.cfg.PeerTimeout)
	ps, err := s.cfg.Peers.Peers(lctx)
	cancel()
	if err != nil {
		s.log.Warn("api: the peer replicas are unknown; answering from this replica's data alone", "procedure", procedure, "err", err)
		peerUnanswered.WithLabelValues(procedure).Inc()
		return nil, []string{fmt.Sprintf("the list of replicas: %v", err)}
	}
	results := make([]*Resp, len(ps))
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, s.cfg.PeerTimeout)
			defer cancel()
			r := connect.NewRequest(msg)
			r.Header().Set(v1.PeerQueryHeader, "1")
			if a := in.Get("Authorization"); a != "" {
				r.Header().Set("Authorization", a)
			}
			resp, err := call(pctx, s.cfg.PeerClient, strings.TrimSuffix(p.URL, "/"), r)
			if err != nil {
				errs[i] = err
				return
			}
			results[i] = resp.Msg
		})
	}
	wg.Wait()
	for i, p := range ps {
		if errs[i] != nil {
			s.log.Warn("api: a peer replica did not answer; its part is missing from the answer", "procedure", procedure, "peer", p.Name, "url", p.URL, "err", errs[i])
			peerUnanswered.WithLabelValues(procedure).Inc()
			unanswered = append(unanswered, fmt.Sprintf("%s (%s): %v", p.Name, p.URL, errs[i]))
			continue
		}
		answers = append(answers, results[i])
	}
	return answers, unanswered
}

// markUnanswered adds the v1.PeersUnansweredHeader values to h.
func markUnanswered(h http.Header, unanswered []string) {
	for _, u := range unanswered {
		h.Add(v1.PeersUnansweredHeader, u)
	}
}

// merged is an item of a merge of several replicas' answers: from
// replica origin (0 is this one).
type merged[T any] struct {
	v      T
	origin int
}

// mergeByTime merges the replicas' lists (each in time order) into one in
// time order, stable (within a replica, equal times keep their order; the
// asked replica's items come first), and drops an item equal to one from
// another replica (the same file read twice, on a shared volume).
func mergeByTime[T comparable](lists [][]T, at func(T) time.Time) []T {
	var all []merged[T]
	for origin, l := range lists {
		for _, v := range l {
			all = append(all, merged[T]{v, origin})
		}
	}
	slices.SortStableFunc(all, func(a, b merged[T]) int { return at(a.v).Compare(at(b.v)) })
	out := make([]T, 0, len(all))
	for i, m := range all {
		dup := false
		// Equal items have equal times: look back over the run of
		// items with this time.
		for j := i - 1; j >= 0 && at(all[j].v).Equal(at(m.v)); j-- {
			if all[j].origin != m.origin && all[j].v == m.v {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, m.v)
		}
	}
	return out
}

// lastN returns the last n of l, or all of it when n is 0 or more.
func lastN[T any](l []T, n int) []T {
	if n > 0 && len(l) > n {
		return l[len(l)-n:]
	}
	return l
}

// newestPerKey merges lists, keeping for each key the item with the
// newest time, newest first (ties by key).
func newestPerKey[T any](lists [][]T, key func(T) string, at func(T) time.Time) []T {
	best := map[string]T{}
	for _, l := range lists {
		for _, v := range l {
			if b, ok := best[key(v)]; !ok || at(v).After(at(b)) {
				best[key(v)] = v
			}
		}
	}
	out := make([]T, 0, len(best))
	for _, v := range best {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b T) int {
		return cmp.Or(at(b).Compare(at(a)), strings.Compare(key(a), key(b)))
	})
	return out
}
