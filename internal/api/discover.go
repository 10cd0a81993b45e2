package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/discovery"
	"github.com/anvilproj/anvil/internal/labels"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/workflow"
)

// Discovery defaults (DiscoveryConfig's zero values).
const (
	// DefaultDiscoveryNamespace is Tinkerbell's default too.
	DefaultDiscoveryNamespace = "default"
	// DefaultDiscoveryMax bounds the discovered Hardware of the
	// namespace: a storm of unknown machines (or of forged calls) stops
	// there rather than filling the store. A rack row is a few hundred.
	DefaultDiscoveryMax = 1000
	// DefaultDiscoveryConcurrency bounds the discovery calls that read
	// and write the store at once; more are answered RESOURCE_EXHAUSTED
	// and the agent asks again after a back-off. The long poll that
	// follows is not counted: a waiting machine costs a goroutine, as a
	// waiting GetAction does.
	DefaultDiscoveryConcurrency = 8
)

// DiscoveryConfig turns discovery on (anvil serve --discovery): machines
// with no Hardware get one made of their inventory, through Anvil's
// agent's Discover and a tink-agent's GetAction.
type DiscoveryConfig struct {
	// Namespace is where discovered Hardware goes. If "",
	// DefaultDiscoveryNamespace.
	Namespace string
	// Max caps the discovered Hardware (label anvil.io/discovered=true)
	// of Namespace; past it a new machine is refused
	// (RESOURCE_EXHAUSTED) until some are deleted. If 0,
	// DefaultDiscoveryMax.
	Max int
	// Concurrency caps the discovery calls at work at once. If 0,
	// DefaultDiscoveryConcurrency.
	Concurrency int
	// Lease, if set, returns the address the discovery pool leased to mac
	// (reservation mode: internal/dhcp/pool), with its netmask and
	// gateway, when that address is ip; ok false otherwise. The lease
	// then becomes the Hardware's reservation. If nil, or for an address
	// the pool did not lease (the network's DHCP server gave it: proxy
	// modes), Anvil's agent's Hardware reserves no address.
	Lease func(mac macaddr.MAC, ip netip.Addr) (model.IP, bool)
	// Events receives an event per discovery and per refusal, in the
	// machine's record. If nil, machinelog.Discard.
	Events machinelog.Sink
	// Now is the clock of the cap's re-count (relistEvery). If nil,
	// time.Now.
	Now func() time.Time
}

// relistEvery bounds how often a namespace at the cap is listed again to
// see whether Hardware were deleted: at the cap every new machine's call
// would otherwise list every discovered Hardware, and the discovery bench
// measured twice the server CPU per machine in a storm at the cap. A
// deletion is seen within it.
const relistEvery = time.Second

// Discovery outcomes: the result label of anvil_discovery_total and the
// outcome of the machine's events.
const (
	discoveredNew   = "discovered" // a Hardware was made
	discoveredAgain = "refreshed"  // the machine's discovered Hardware was there
	discoveredKnown = "known"      // a Hardware (not discovered) has its MAC
	discoveryClash  = "collision"  // its UUID, a MAC or its address is another Hardware's: nothing written
	discoveryFull   = "full"       // the cap on discovered Hardware is reached
	discoveryBusy   = "busy"       // too many discovery calls at once
	discoveryBad    = "bad-inventory"
)

var discoveryTotal = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "anvil_discovery_total",
	Help: "Discovery calls (Anvil's Discover, an unknown tink-agent's GetAction), by result: discovered (a Hardware was made), refreshed, known (a Hardware not discovered has the MAC), collision (refused: its UUID, a MAC or the address is another Hardware's), full (--discovery-max reached), busy (too many at once), bad-inventory.",
}, []string{"result"})

var discoveredSelector = labels.Selector{{Key: model.LabelDiscovered, Operator: labels.Equals, Values: []string{"true"}}}

// discoveryState is the Services' discovery runtime: the call limit and
// the lock that makes the cap check and the create one step.
type discoveryState struct {
	cfg   DiscoveryConfig
	slots chan struct{}
	// createMu serialises the making of Hardware: the cap counted, the
	// claims checked and the object created with no other discovery in
	// between, so that --discovery-max holds. It guards listed and made.
	createMu chan struct{}
	// listed is the count of discovered Hardware at the last List, -1
	// before the first; made counts the Hardware made since. Deletions
	// only lower the true count, so listed+made is an upper bound: the
	// namespace is listed again only when that bound reaches the cap (and
	// then at most every relistEvery), and a storm does not list a growing
	// namespace at every machine.
	listed, made int
	// listedAt is when listed was counted.
	listedAt time.Time
}

// count returns the number of discovered Hardware in the namespace, or an
// upper bound of it below the cap (see listed). Call it holding createMu.
func (d *discoveryState) count(ctx context.Context, st store.Store) (int, error) {
	now := d.cfg.Now()
	if d.listed >= 0 && (d.listed+d.made < d.cfg.Max || now.Sub(d.listedAt) < relistEvery) {
		return d.listed + d.made, nil
	}
	objs, _, err := st.List(ctx, model.KindHardware, store.ListOptions{Namespace: d.cfg.Namespace, Labels: discoveredSelector})
	if err != nil {
		return 0, err
	}
	d.listed, d.made, d.listedAt = len(objs), 0, now
	return d.listed, nil
}

func newDiscoveryState(cfg *DiscoveryConfig) *discoveryState {
	if cfg == nil {
		return nil
	}
	c := *cfg
	if c.Namespace == "" {
		c.Namespace = DefaultDiscoveryNamespace
	}
	if c.Max <= 0 {
		c.Max = DefaultDiscoveryMax
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultDiscoveryConcurrency
	}
	if c.Events == nil {
		c.Events = machinelog.Discard
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &discoveryState{cfg: c, slots: make(chan struct{}, c.Concurrency), createMu: make(chan struct{}, 1), listed: -1}
}

// lease is the discovery pool's lease of ip to mac (Config.Lease), or
// nil.
func (d *discoveryState) lease(mac macaddr.MAC, ip string) *model.IP {
	a, err := netip.ParseAddr(ip)
	if d.cfg.Lease == nil || err != nil {
		return nil
	}
	l, ok := d.cfg.Lease(mac, a.Unmap())
	if !ok {
		return nil
	}
	return &l
}

// Discover makes or refreshes the Hardware of a machine booted for
// discovery, then long-polls for its work (see the RPC's doc).
func (a agentService) Discover(ctx context.Context, req *connect.Request[v1.DiscoverRequest]) (*connect.Response[v1.DiscoverResponse], error) {
	s := a.s
	if s.disc == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			errors.New("discovery is off on this server: start it with anvil serve --discovery, or give the machine a Hardware"))
	}
	if s.cfg.Engine == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the workflow engine is not running"))
	}
	id := req.Msg.GetAgentId()
	if err := checkTinkAgentID(id); err != nil {
		return nil, err
	}
	mac, err := macaddr.Parse(id)
	if err != nil {
		return nil, invalid("agent_id %q: a discovering agent is known by the MAC it booted from (worker_id=)", id)
	}
	raw := req.Msg.GetAgentAttributes().GetInventory()
	attrs, err := parseInventory(raw)
	if err != nil {
		discoveryTotal.WithLabelValues(discoveryBad).Inc()
		return nil, invalid("machine %s: %v", mac, err)
	}
	call := newAgentCall(req.Spec().Procedure, req.Header(), req.Peer().Addr, workflow.AgentName{ID: mac.String(), MAC: mac})
	ip := s.clientIP(ctx, call.peer)
	hw, created, err := s.discover(ctx, call, mac, ip, s.disc.lease(mac, ip), attrs, raw, false)
	if err != nil {
		return nil, err
	}
	resp := &v1.DiscoverResponse{Hardware: hw.Key(), Created: created}
	wait := req.Msg.GetWait().AsDuration()
	if req.Msg.GetWait() == nil || wait < 0 {
		wait = 0
	}
	na, err := s.pollAction(ctx, workflow.AgentNameOf(hw), wait)
	if connect.CodeOf(err) == connect.CodeNotFound {
		return connect.NewResponse(resp), nil // no work yet: ask again
	}
	if err != nil {
		return nil, err
	}
	resp.WorkflowId = na.WorkflowID
	if k := s.cfg.AgentKey; k != nil {
		ns, name, _ := strings.Cut(na.WorkflowID, "/")
		obj, err := store.GetShared(ctx, s.cfg.Store, model.KindWorkflow, ns, name) // read only
		if err != nil {
			return nil, s.toConnect(fmt.Errorf("workflow %s of machine %s: %w", na.WorkflowID, mac, err))
		}
		wf := obj.(*model.Workflow)
		resp.AgentToken = k.Token(wf.Key(), wf.UID)
	}
	s.log.Info("discovery: machine has work", "hardware", hw.Key(), "workflow", na.WorkflowID, "client_ip", ip)
	return connect.NewResponse(resp), nil
}

// parseInventory reads an inventory (internal/hwinfo's JSON, Tinkerbell's
// attributes shape) within maxAttributesBytes.
func parseInventory(raw []byte) (*model.Attributes, error) {
	switch {
	case len(raw) == 0:
		return nil, errors.New("no inventory (agent_attributes.inventory): discovery makes the Hardware of it")
	case len(raw) > maxAttributesBytes:
		return nil, fmt.Errorf("inventory of %d bytes; at most %d are kept", len(raw), maxAttributesBytes)
	}
	var attrs model.Attributes
	if err := json.Unmarshal(raw, &attrs); err != nil {
		return nil, fmt.Errorf("inventory is not a JSON object in Tinkerbell's attributes shape: %w", err)
	}
	return &attrs, nil
}

// discover returns the Hardware of the machine that booted from mac and
// calls from ip, making it of attrs when there is none:
//
//   - a Hardware has mac: if it reserves addresses, ip must be one
//     (else refused, as checkAgent would); a discovered one gets attrs
//     as its status.attributes when they changed (storeAttributes: an
//     unchanged inventory writes nothing); one an operator made is not
//     written.
//   - else the Hardware discovery.Name(discovery.ID(attrs, mac)) is made
//     (its reservation lease, when set), unless a Hardware of that name
//     exists (two machines report the same system UUID), the cap is
//     reached, or another Hardware claims one of its MACs or its address:
//     those are refused, naming the Hardware, and nothing is written.
//
// Each outcome is counted, logged and recorded in the machine's record.
// raw is attrs as the agent sent them; with annotate (a tink-agent's
// attributes) they are also kept as model.AgentAttributesAnnotation,
// Tinkerbell's place for them.
func (s *Services) discover(ctx context.Context, c agentCall, mac macaddr.MAC, ip string, lease *model.IP,
	attrs *model.Attributes, raw []byte, annotate bool) (*model.Hardware, bool, error) {
	d := s.disc
	select {
	case d.slots <- struct{}{}:
		defer func() { <-d.slots }()
	default:
		discoveryTotal.WithLabelValues(discoveryBusy).Inc()
		return nil, false, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("%d discovery calls are at work; ask again", cap(d.slots)))
	}
	addr, _ := netip.ParseAddr(ip)
	addr = addr.Unmap()
	event := func(outcome, msg string) {
		discoveryTotal.WithLabelValues(outcome).Inc()
		d.cfg.Events.Record(machinelog.Event{Service: machinelog.ServiceDiscovery, MAC: mac, IP: addr, Outcome: outcome, Message: msg})
	}
	refuse := func(code connect.Code, outcome string, err error) (*model.Hardware, bool, error) {
		event(outcome, "discovery refused: "+err.Error())
		s.log.Warn("discovery refused", "protocol", c.protocol, "mac", mac.String(), "client_ip", ip, "reason", outcome, "err", err)
		return nil, false, connect.NewError(code, err)
	}

	hw, err := s.hardwareByMAC(ctx, mac)
	if err != nil {
		return nil, false, s.toConnect(err)
	}
	if hw != nil {
		if ips := hw.IPs(); len(ips) > 0 && !slices.Contains(ips, ip) {
			return refuse(connect.CodePermissionDenied, discoveryClash,
				fmt.Errorf("MAC %s is Hardware %s's, which reserves %s; this call comes from %s: not this machine's", mac, hw.Key(), strings.Join(ips, ", "), ip))
		}
		if hw.Labels[model.LabelDiscovered] != "true" {
			event(discoveredKnown, fmt.Sprintf("discovery: MAC %s is Hardware %s's (not discovered): left as it is; the machine waits for its workflow", mac, hw.Key()))
			return hw, false, nil
		}
		s.storeAttributes(ctx, hw, raw, annotate)
		event(discoveredAgain, fmt.Sprintf("discovery: Hardware %s booted for discovery again; inventory refreshed if it changed", hw.Key()))
		return hw, false, nil
	}

	// A new machine: one at a time from here to the create.
	select {
	case d.createMu <- struct{}{}:
		defer func() { <-d.createMu }()
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	want := discovery.Machine{Namespace: d.cfg.Namespace, BootMAC: mac, IP: lease, Attributes: attrs}.Hardware()
	if annotate {
		want.Annotations = map[string]string{model.AgentAttributesAnnotation: string(raw)}
	}
	if old, err := s.cfg.Store.Get(ctx, model.KindHardware, want.Namespace, want.Name); err == nil {
		other := old.(*model.Hardware)
		why := "its name"
		if u := discovery.UsableUUID(attrs); u != "" {
			why = "system UUID " + u
		}
		return refuse(connect.CodeAlreadyExists, discoveryClash,
			fmt.Errorf("machine %s reports %s, and Hardware %s (MACs %s) already has it: not overwritten; "+
				"if it is the same machine with another boot NIC, add this MAC to that Hardware; if two machines share the UUID, delete or rename the Hardware",
				mac, why, other.Key(), macList(other)))
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, false, s.toConnect(err)
	}
	n, err := d.count(ctx, s.cfg.Store)
	if err != nil {
		return nil, false, s.toConnect(err)
	}
	if n >= d.cfg.Max {
		return refuse(connect.CodeResourceExhausted, discoveryFull,
			fmt.Errorf("namespace %s has %d discovered Hardware, the most discovery makes (anvil serve --discovery-max); enrol or delete some", want.Namespace, n))
	}
	if err := model.Validate(want); err != nil {
		return refuse(connect.CodeInvalidArgument, discoveryBad, fmt.Errorf("the Hardware made of the inventory is invalid: %w", err))
	}
	unlock, err := s.admitOne(ctx, want)
	if err != nil {
		var list model.ErrorList
		if errors.As(err, &list) {
			return refuse(connect.CodeAlreadyExists, discoveryClash,
				fmt.Errorf("machine %s: Hardware %s not made, nothing overwritten: %w", mac, want.Key(), err))
		}
		return nil, false, s.toConnect(err)
	}
	stored, err := s.cfg.Store.Create(ctx, want)
	unlock()
	if err != nil {
		return nil, false, s.toConnect(fmt.Errorf("create Hardware %s: %w", want.Key(), err))
	}
	d.made++
	hw = stored.(*model.Hardware)
	at := ""
	if ips := hw.IPs(); len(ips) > 0 {
		at = ", reserving " + ips[0]
	}
	event(discoveredNew, fmt.Sprintf("discovery: Hardware %s made of the machine's inventory (%s%s)", hw.Key(), summary(attrs), at))
	s.log.Info("discovery: hardware made", "protocol", c.protocol, "hardware", hw.Key(), "mac", mac.String(), "client_ip", ip, "inventory", summary(attrs))
	return hw, true, nil
}

// hardwareByMAC returns a private copy of the Hardware with an interface
// of mac (the first by namespace and name when several claim it), or nil.
func (s *Services) hardwareByMAC(ctx context.Context, mac macaddr.MAC) (*model.Hardware, error) {
	objs, err := s.cfg.Store.ByIndex(ctx, model.KindHardware, store.IndexMAC, mac.String())
	if err != nil {
		return nil, fmt.Errorf("find hardware by MAC %s: %w", mac, err)
	}
	for _, o := range objs {
		if hw, ok := o.(*model.Hardware); ok {
			return hw, nil
		}
	}
	return nil, nil
}

// macList is hw's MACs, comma-separated, for a message.
func macList(hw *model.Hardware) string {
	var out []string
	for _, m := range hw.MACs() {
		out = append(out, m.String())
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// summary is a short account of an inventory for a log line: CPUs,
// memory, disks.
func summary(a *model.Attributes) string {
	var parts []string
	if a.CPU != nil && a.CPU.TotalThreads > 0 {
		parts = append(parts, fmt.Sprintf("%d CPUs", a.CPU.TotalThreads))
	}
	if a.Memory != nil && a.Memory.Total != "" {
		parts = append(parts, a.Memory.Total+" memory")
	}
	parts = append(parts, fmt.Sprintf("%d disks", len(a.BlockDevices)))
	return strings.Join(parts, ", ")
}
