// Package peers is Kubernetes mode's replica registry: how one replica of
// `anvil serve` finds the others, to ask them for what only they hold.
//
// Machine records and the audit log stay on the disk of the replica that
// received them (they are an append-heavy stream, not etcd material; see
// docs/kubernetes.md), so a read of them must ask every replica. Each
// replica keeps a coordination.k8s.io Lease of its own, named
// "anvil-replica-<identity>", labelled LabelComponent=ComponentValue, with
// the URL of its API in the annotation AnnotationURL and the URL machines'
// agents reach it at in AnnotationAgentURL (the two differ when replicas
// reach each other on the pod network, --peer-url); it renews the Lease
// every Period and, when it stops cleanly, releases it (clears its holder).
// The peers of a replica are the other replicas whose Lease is held and
// current: renewed within its leaseDurationSeconds (3×Period), as this
// replica's clock reads the Lease's renewTime. A replica that crashed
// stays a peer until then, and is then skipped.
//
// Identities carry a random suffix (internal/leader), so every start makes
// a new Lease. In a pod (Config.Pod set) the Lease is owned by the Pod,
// and Kubernetes' garbage collector deletes it with the Pod; so replicas
// need no right to delete Leases (the deployment's Role grants none: the
// leader's Lease is not theirs to delete). Run out of a pod, the Leases
// stay, released or lapsed, until deleted by hand.
//
// The agent URLs are for the boot scripts a replica writes: they list every
// live replica's (internal/bootpolicy), so that an agent whose replica dies
// moves on to another (internal/agent).
//
// It owns those Leases and nothing else: it does not call the peers (the
// API does, internal/api) and does not elect anyone (internal/leader).
package peers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"

	"github.com/anvilproj/anvil/internal/clock"
)

// The Lease's label, annotation and name prefix.
const (
	LabelComponent     = "app.kubernetes.io/component"
	ComponentValue     = "anvil-replica"
	AnnotationURL      = "anvil.dev/api-url"
	AnnotationAgentURL = "anvil.dev/agent-url"
	NamePrefix         = "anvil-replica-"
)

// DefaultPeriod is Config.Period's default.
const DefaultPeriod = 10 * time.Second

// Pod names the Pod a replica runs in (from the downward API), the owner
// of its Lease.
type Pod struct {
	Name string
	UID  string
}

// Peer is another replica.
type Peer struct {
	// Name is its identity (the Lease's holder).
	Name string
	// URL is where its API answers (http://10.0.0.3:7080).
	URL string
	// AgentURL is where machines' agents reach its API (anvil.server=),
	// or "" if it publishes none.
	AgentURL string
}

// Config configures a Registry.
type Config struct {
	// REST reaches the API server. Required.
	REST *rest.Config
	// Namespace holds the Leases (the leader's Lease's namespace).
	// Required.
	Namespace string
	// Identity names this replica: the Lease's holder and the end of its
	// name (lower-cased, characters a name cannot hold turned into '-').
	// Required.
	Identity string
	// URL is where the other replicas reach this one's API. If empty,
	// this replica publishes no Lease (no peer can ask it) but still
	// finds its peers.
	URL string
	// AgentURL is where machines' agents reach this replica's API: the
	// HTTP port at the public address, which the boot scripts give as
	// anvil.server=. It may differ from URL (--peer-url on the pod
	// network); if empty, agents are not sent here by the other replicas.
	AgentURL string
	// Pod, if its UID is set, owns the Lease, which is then deleted with
	// it. `anvil serve` reads $POD_NAME and $POD_UID.
	Pod Pod
	// Period is how often the Lease is renewed; a Lease is current for
	// 3×Period after its renewal. A whole number of seconds (the Lease
	// records seconds). If 0, DefaultPeriod.
	Period time.Duration
	// Clock reads the time. If nil, clock.Real.
	Clock clock.Clock
	// Log receives renewal failures. If nil, slog.Default().
	Log *slog.Logger
}

// Registry publishes this replica's Lease and lists the others. Peers is
// safe for concurrent use; Run is called once.
type Registry struct {
	cfg    Config
	name   string
	leases coordclient.LeaseInterface
}

// New returns a Registry, or an error naming what is wrong with cfg. It
// makes no request.
func New(cfg Config) (*Registry, error) {
	switch {
	case cfg.REST == nil:
		return nil, errors.New("peers: Config.REST is nil")
	case cfg.Namespace == "":
		return nil, errors.New("peers: Config.Namespace is empty")
	case cfg.Identity == "":
		return nil, errors.New("peers: Config.Identity is empty")
	case cfg.Period < 0 || cfg.Period%time.Second != 0:
		return nil, fmt.Errorf("peers: Config.Period %v is not a whole number of seconds: the Lease records seconds", cfg.Period)
	}
	if cfg.URL != "" && !isBaseURL(cfg.URL) {
		return nil, fmt.Errorf("peers: URL %q: want http://HOST:PORT or https://HOST:PORT, where the other replicas reach this one's API", cfg.URL)
	}
	if cfg.AgentURL != "" && !isBaseURL(cfg.AgentURL) {
		return nil, fmt.Errorf("peers: AgentURL %q: want http://HOST:PORT or https://HOST:PORT, where machines' agents reach this replica's API", cfg.AgentURL)
	}
	if cfg.Period == 0 {
		cfg.Period = DefaultPeriod
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	name := LeaseName(cfg.Identity)
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("peers: identity %q makes the Lease name %q: %s", cfg.Identity, name, errs[0])
	}
	rc := rest.CopyConfig(cfg.REST)
	if rc.Timeout == 0 {
		// One hung request must not hold a renewal past its Lease.
		rc.Timeout = cfg.Period
	}
	c, err := coordclient.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("peers: %w", err)
	}
	cfg.Log = cfg.Log.With("replica_lease", cfg.Namespace+"/"+name)
	return &Registry{cfg: cfg, name: name, leases: c.Leases(cfg.Namespace)}, nil
}

// isBaseURL reports whether s is an http(s) URL with a host.
func isBaseURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// LeaseName is the name of the Lease of the replica identity: NamePrefix
// and the identity lower-cased, every character a Lease name cannot hold
// turned into '-'.
func LeaseName(identity string) string {
	b := []byte(strings.ToLower(identity))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '.' {
			b[i] = '-'
		}
	}
	return NamePrefix + strings.Trim(string(b), "-.")
}

// Run publishes this replica's Lease and renews it every Period until ctx
// ends, then releases it and returns nil. A failed renewal is logged and
// tried again at the next period: the API server being away must not stop
// the replica (its Lease then lapses, and the others skip it). Without a
// URL it waits for ctx and publishes nothing.
func (r *Registry) Run(ctx context.Context) error {
	if r.cfg.URL == "" {
		r.cfg.Log.Warn("no URL for the API of this replica: the other replicas will not ask it for its machine records and audit log")
		<-ctx.Done()
		return nil
	}
	failing := false
	for {
		err := r.renew(ctx, true)
		switch {
		case err != nil && ctx.Err() == nil:
			r.cfg.Log.Warn("replica Lease not renewed; trying again", "in", r.cfg.Period, "err", err)
			failing = true
		case err == nil && failing:
			r.cfg.Log.Info("replica Lease renewed again")
			failing = false
		}
		select {
		case <-ctx.Done():
			// Going away cleanly: say so at once rather than let the
			// others ask a replica that is gone for 3 periods.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Period)
			defer cancel()
			if err := r.renew(dctx, false); err != nil && !apierrors.IsNotFound(err) {
				r.cfg.Log.Warn("replica Lease not released; it lapses by itself", "err", err)
			}
			return nil
		case <-r.cfg.Clock.After(r.cfg.Period):
		}
	}
}

// renew creates the Lease or brings its renewal time, holder and URL up
// to date; with held false it releases the Lease (clears its holder).
func (r *Registry) renew(ctx context.Context, held bool) error {
	now := metav1.NewMicroTime(r.cfg.Clock.Now())
	secs := int32(3 * r.cfg.Period / time.Second)
	l, err := r.leases.Get(ctx, r.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && held {
		l = &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: r.name, Namespace: r.cfg.Namespace}}
		if p := r.cfg.Pod; p.UID != "" {
			l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: types.UID(p.UID)}}
		}
		r.fill(l, now, secs, held)
		l.Spec.AcquireTime = &now
		_, err = r.leases.Create(ctx, l, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	r.fill(l, now, secs, held)
	_, err = r.leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

func (r *Registry) fill(l *coordv1.Lease, now metav1.MicroTime, secs int32, held bool) {
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Labels[LabelComponent] = ComponentValue
	l.Annotations[AnnotationURL] = r.cfg.URL
	if r.cfg.AgentURL != "" {
		l.Annotations[AnnotationAgentURL] = r.cfg.AgentURL
	} else {
		delete(l.Annotations, AnnotationAgentURL)
	}
	id := r.cfg.Identity
	l.Spec.HolderIdentity = &id
	if !held {
		l.Spec.HolderIdentity = nil
	}
	l.Spec.LeaseDurationSeconds = &secs
	l.Spec.RenewTime = &now
}

// Peers returns the other replicas whose Lease is current, in name order.
// It asks the API server each time: reads of the machine records are rare,
// and a cached list would keep a replica that has just gone.
func (r *Registry) Peers(ctx context.Context) ([]Peer, error) {
	ls, err := r.leases.List(ctx, metav1.ListOptions{LabelSelector: LabelComponent + "=" + ComponentValue})
	if err != nil {
		return nil, fmt.Errorf("listing the replicas' Leases: %w", err)
	}
	now := r.cfg.Clock.Now()
	var out []Peer
	for _, l := range ls.Items {
		if l.Name == r.name || !current(&l, now) {
			continue
		}
		u, h := l.Annotations[AnnotationURL], l.Spec.HolderIdentity
		if u == "" || h == nil || *h == "" {
			continue // released: that replica stopped
		}
		out = append(out, Peer{Name: *h, URL: u, AgentURL: l.Annotations[AnnotationAgentURL]})
	}
	return out, nil
}

// AgentURLs returns the agent URLs of the other replicas whose Lease is
// current (Peers), in name order, leaving out those that publish none.
func (r *Registry) AgentURLs(ctx context.Context) ([]string, error) {
	ps, err := r.Peers(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range ps {
		if p.AgentURL != "" {
			out = append(out, p.AgentURL)
		}
	}
	return out, nil
}

// expiry is when l stops being current; zero if it was never renewed.
func expiry(l *coordv1.Lease) time.Time {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
}

func current(l *coordv1.Lease, now time.Time) bool {
	return now.Before(expiry(l))
}
