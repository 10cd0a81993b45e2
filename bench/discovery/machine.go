package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/agent"
	"github.com/anvilproj/anvil/internal/benchfleet"
	"github.com/anvilproj/anvil/internal/clientheader"
	"github.com/anvilproj/anvil/internal/discovery"
	"github.com/anvilproj/anvil/internal/hwinfo"
	"github.com/anvilproj/anvil/internal/model"
)

// loadFixture reads an inventory in internal/hwinfo's JSON (one of its
// golden files): every simulated machine is a variation of it.
func loadFixture(path string) (*model.Attributes, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("inventory fixture: %w", err)
	}
	var a model.Attributes
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return nil, fmt.Errorf("inventory fixture %s: not internal/hwinfo's JSON: %w", path, err)
	}
	if len(a.NetworkInterfaces) == 0 || a.Anvil == nil {
		return nil, fmt.Errorf("inventory fixture %s: needs networkInterfaces and the anvil section (a machine's boot NIC and UUID)", path)
	}
	return &a, nil
}

// memoryProfiles are the memory sizes the machines have, in turn: a third
// of them match the large-memory rule set (largeMemory), the rest the
// general one.
var memoryProfiles = []uint64{64 << 30, 128 << 30, 256 << 30}

// largeMemory is memoryProfiles' size the higher-priority rule set
// matches, as the inventory spells it.
var largeMemory = hwinfo.HumanBytes(256 << 30)

// machineMAC is NIC j of machine i: j 0 (the boot NIC) is the fleet's
// MAC of machine i, so discovered machines look like the fleet's; the
// others differ in the second octet, so no two machines share any MAC
// (discovery refuses a MAC another Hardware claims).
func machineMAC(i, j int) string {
	return fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", byte(j), byte(i>>24), byte(i>>16), byte(i>>8), byte(i))
}

// machineUUID is machine i's SMBIOS system UUID (version 4 form): its
// Hardware is discovery-<UUID>.
func machineUUID(i int) string {
	return fmt.Sprintf("b3ac0000-0000-4000-8000-%012x", i)
}

// inventory is machine i's inventory: base with its own UUID, MACs and
// serials, and one of memoryProfiles. It returns the JSON the agent sends
// and the boot MAC.
func inventory(base *model.Attributes, i int) (raw []byte, bootMAC string, err error) {
	b, err := json.Marshal(base)
	if err != nil {
		return nil, "", err
	}
	var a model.Attributes
	if err := json.Unmarshal(b, &a); err != nil { // a deep copy
		return nil, "", err
	}
	serial := fmt.Sprintf("ANVB%06d", i)
	a.Anvil.UUID = machineUUID(i)
	for j := range a.NetworkInterfaces {
		a.NetworkInterfaces[j].MAC = machineMAC(i, j)
	}
	for j := range a.BlockDevices {
		if a.BlockDevices[j].SerialNumber != "" || a.BlockDevices[j].WWN != "" {
			a.BlockDevices[j].SerialNumber = fmt.Sprintf("%s-D%d", serial, j)
		}
	}
	if a.Product != nil {
		a.Product.SerialNumber = serial
	}
	if a.Chassis != nil {
		a.Chassis.Serial = serial
	}
	if a.Baseboard != nil {
		a.Baseboard.SerialNumber = serial + "-MB"
	}
	mem := memoryProfiles[i%len(memoryProfiles)]
	a.Anvil.MemoryBytes = mem
	a.Memory = &model.MemoryAttributes{Total: hwinfo.HumanBytes(mem), Usable: hwinfo.HumanBytes(mem)}
	raw, err = json.Marshal(&a)
	return raw, a.NetworkInterfaces[0].MAC, err
}

// hardwareName is machine i's discovered Hardware's name.
func hardwareName(i int) string { return discovery.Name(machineUUID(i)) }

// countingClient is the agent's client with a count of what it was
// answered: every call goes through unchanged (the agent's own code,
// agent.Discover, makes them and backs off); the bench only watches.
type countingClient struct {
	anvilv1connect.AgentServiceClient
	// refused counts RESOURCE_EXHAUSTED answers (busy or full), each
	// asked again after the agent's back-off.
	refused atomic.Int64
	// lastRefused is the time of the last refusal (UnixNano).
	lastRefused atomic.Int64
	// other counts any other failed call.
	other atomic.Int64
	// workflow and hardware are the last answer's.
	workflow, hardware atomic.Value
}

func (c *countingClient) Discover(ctx context.Context, req *connect.Request[v1.DiscoverRequest]) (*connect.Response[v1.DiscoverResponse], error) {
	resp, err := c.AgentServiceClient.Discover(ctx, req)
	switch {
	case err == nil:
		c.hardware.Store(resp.Msg.GetHardware())
		c.workflow.Store(resp.Msg.GetWorkflowId())
	case connect.CodeOf(err) == connect.CodeResourceExhausted:
		c.refused.Add(1)
		c.lastRefused.Store(time.Now().UnixNano())
	case ctx.Err() == nil:
		c.other.Add(1)
	}
	return resp, err
}

// machineOut is one machine's discovery.
type machineOut struct {
	// total is from its first Discover call to the answer carrying its
	// workflow; zero if it got none.
	total     time.Duration
	tokenAt   time.Time
	getAction time.Duration
	hardware  string
	workflow  string
	action    string
	err       error
	cc        *countingClient
}

// machine is simulated machine i: its agent's discovery (agent.Discover,
// the agent's own code, over gRPC on hc, a connection of its own, through
// cc), then, with
// getAction, its first GetAction with the token it was given. ready, if
// not nil, is told when it has its workflow.
func machine(ctx context.Context, i int, base *model.Attributes, url string, o options, hc *http.Client, cc *countingClient, ready func()) (out machineOut) {
	out.cc = cc
	raw, mac, err := inventory(base, i)
	if err != nil {
		out.err = err
		return out
	}
	defer hc.CloseIdleConnections()
	start := time.Now()
	token, err := agent.Discover(ctx, agent.DiscoverConfig{
		Servers:    []agent.Server{{URL: url, Client: out.cc}},
		AgentID:    mac,
		Attributes: &v1.AgentAttributes{Inventory: raw},
		Wait:       o.wait,
	})
	if err != nil {
		out.err = fmt.Errorf("machine %d (%s): %w", i, mac, err)
		return out
	}
	out.tokenAt = time.Now()
	out.total = out.tokenAt.Sub(start)
	out.hardware, _ = out.cc.hardware.Load().(string)
	out.workflow, _ = out.cc.workflow.Load().(string)
	if ready != nil {
		ready()
	}
	if want := benchfleet.Namespace + "/" + hardwareName(i); out.hardware != want {
		out.err = fmt.Errorf("machine %d (%s): Hardware %q, want %q", i, mac, out.hardware, want)
		return out
	}
	if want := benchfleet.Namespace + "/enroll-" + hardwareName(i); out.workflow != want {
		out.err = fmt.Errorf("machine %d (%s): workflow %q, want %q (the rule set's)", i, mac, out.workflow, want)
		return out
	}
	if !o.getAction {
		return out
	}
	ac := anvilv1connect.NewAgentServiceClient(hc, url, connect.WithGRPC(), clientheader.AgentToken(token))
	t := time.Now()
	resp, err := ac.GetAction(ctx, connect.NewRequest(&v1.GetActionRequest{AgentId: mac, Wait: durationpb.New(10 * time.Second)}))
	out.getAction = time.Since(t)
	if err != nil {
		out.err = fmt.Errorf("machine %d (%s): first GetAction: %w", i, mac, err)
		return out
	}
	out.action = resp.Msg.GetName()
	if out.action != actionName {
		out.err = fmt.Errorf("machine %d (%s): first action %q, want %q", i, mac, out.action, actionName)
	}
	return out
}
