package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	proto "github.com/anvilproj/anvil/api/proto"
	"github.com/anvilproj/anvil/api/proto/tinkprotoconnect"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/clientheader"
	"github.com/anvilproj/anvil/internal/labels"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// discEnv is an API server with agent checks and discovery on, whose
// callers' address the test chooses, a discovery pool that leased
// 10.0.0.1xx to each MAC 52:54:00:00:00:xx, and the machine events
// discovery recorded.
type discEnv struct {
	*env
	from   atomic.Value // string: the caller's address
	mu     sync.Mutex
	events []machinelog.Event
}

func newDiscEnv(t *testing.T, configure func(*api.DiscoveryConfig)) *discEnv {
	t.Helper()
	key, err := auth.NewAgentKey([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	de := &discEnv{}
	de.from.Store("10.0.0.101")
	dc := &api.DiscoveryConfig{
		Lease: func(mac macaddr.MAC, ip netip.Addr) (model.IP, bool) {
			b := mac.Bytes()
			want := netip.AddrFrom4([4]byte{10, 0, 0, 100 + b[5]})
			if b[0] != 0x52 || ip != want {
				return model.IP{}, false
			}
			return model.IP{Address: ip.String(), Netmask: "255.255.255.0"}, true
		},
		Events: machinelog.SinkFunc(func(e machinelog.Event) {
			de.mu.Lock()
			defer de.mu.Unlock()
			de.events = append(de.events, e)
		}),
	}
	if configure != nil {
		configure(dc)
	}
	de.env = newEnv(t, envOptions{engine: true, configure: func(c *api.Config) {
		c.AgentKey = key
		c.MaxWait = time.Second
		c.Discovery = dc
		c.ClientIP = func(context.Context) string { return de.from.Load().(string) }
	}})
	return de
}

// inventory is an inventory as internal/hwinfo writes it.
func inventory(uuid string, macs ...string) []byte {
	a := model.Attributes{
		CPU:    &model.CPUAttributes{TotalCores: 2, TotalThreads: 2},
		Memory: &model.MemoryAttributes{Total: "2GB"},
		BlockDevices: []model.BlockDevice{
			{Name: "vda", Size: "8GB", SerialNumber: "DISK-1"},
		},
		Product: &model.Product{SerialNumber: "SER-1"},
		Anvil:   &model.AnvilAttributes{UUID: uuid, MemoryBytes: 2 << 30},
	}
	for i, m := range macs {
		a.NetworkInterfaces = append(a.NetworkInterfaces, model.NetworkInterface{Name: fmt.Sprintf("eth%d", i), MAC: m})
	}
	b, _ := json.Marshal(a)
	return b
}

func (de *discEnv) discover(ip, mac string, inv []byte, wait time.Duration) (*v1.DiscoverResponse, error) {
	de.from.Store(ip)
	return msgOf(de.ag.Discover(context.Background(), connect.NewRequest(&v1.DiscoverRequest{
		AgentId: mac, AgentAttributes: &v1.AgentAttributes{Inventory: inv}, Wait: durationpb.New(wait)})))
}

func (de *discEnv) hardware(t *testing.T, name string) *model.Hardware {
	t.Helper()
	obj, err := de.st.Get(context.Background(), model.KindHardware, "default", name)
	if err != nil {
		t.Fatalf("Hardware %s: %v", name, err)
	}
	return obj.(*model.Hardware)
}

func (de *discEnv) discovered(t *testing.T) int {
	t.Helper()
	objs, _, err := de.st.List(context.Background(), model.KindHardware, store.ListOptions{
		Labels: labels.Selector{{Key: model.LabelDiscovered, Operator: labels.Equals, Values: []string{"true"}}}})
	if err != nil {
		t.Fatal(err)
	}
	return len(objs)
}

func (de *discEnv) outcomes() []string {
	de.mu.Lock()
	defer de.mu.Unlock()
	var out []string
	for _, e := range de.events {
		out = append(out, e.Outcome)
	}
	return out
}

const testUUID = "9e8f3c36-0d3f-4a8e-9b6c-2f1d3c4b5a69"

// A machine with no Hardware reports its inventory: Anvil makes
// discovery-<uuid> of it, with the pool's lease as its reservation, and
// the machine waits; asking again writes nothing; once a workflow is
// given to the Hardware the answer carries its token, which GetAction
// accepts from the machine's address.
func TestDiscoverMakesHardwareThenHandsOverWork(t *testing.T) {
	de := newDiscEnv(t, nil)
	const mac = "52:54:00:00:00:01"
	inv := inventory(strings.ToUpper(testUUID), mac, "52:54:00:00:01:01")
	resp, err := de.discover("10.0.0.101", mac, inv, 0)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	name := "discovery-" + testUUID
	if !resp.GetCreated() || resp.GetHardware() != "default/"+name || resp.GetWorkflowId() != "" || resp.GetAgentToken() != "" {
		t.Fatalf("Discover = %+v; want default/%s created, no work yet", resp, name)
	}
	hw := de.hardware(t, name)
	if hw.Labels[model.LabelDiscovered] != "true" {
		t.Errorf("labels %v; want %s=true", hw.Labels, model.LabelDiscovered)
	}
	if got := hw.IPs(); len(got) != 1 || got[0] != "10.0.0.101" || hw.Spec.Interfaces[0].DHCP.IP.Netmask != "255.255.255.0" {
		t.Errorf("reservation %v (%+v); want the pool's lease 10.0.0.101/24", got, hw.Spec.Interfaces[0].DHCP.IP)
	}
	if got := fmt.Sprint(hw.MACs()); got != "[52:54:00:00:00:01 52:54:00:00:01:01]" {
		t.Errorf("MACs %s; want the boot MAC first, then the other NIC", got)
	}
	if a := hw.Status.Attributes; a == nil || a.Product == nil || a.Product.SerialNumber != "SER-1" || len(hw.Spec.Disks) != 1 {
		t.Errorf("status.attributes %+v, disks %+v; want the inventory", a, hw.Spec.Disks)
	}

	// Again, unchanged: nothing is written.
	rv := hw.ResourceVersion
	resp, err = de.discover("10.0.0.101", mac, inv, 0)
	if err != nil || resp.GetCreated() || resp.GetHardware() != "default/"+name {
		t.Fatalf("Discover again = %+v, %v; want the same Hardware, not created", resp, err)
	}
	if got := de.hardware(t, name).ResourceVersion; got != rv {
		t.Errorf("an unchanged inventory wrote the Hardware (resourceVersion %s -> %s)", rv, got)
	}
	if got := strings.Join(de.outcomes(), ","); got != "discovered,refreshed" {
		t.Errorf("machine events %s; want discovered,refreshed", got)
	}

	// Work arrives while the machine waits.
	if _, err := apply(de.env, `apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: one}
spec:
  data: |
    version: "0.1"
    name: one
    tasks:
    - name: os
      worker: "{{.device_1}}"
      actions:
      - {name: write, image: writefile, timeout: 60}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: install}
spec: {templateRef: one, hardwareRef: `+name+`, hardwareMap: {device_1: "`+mac+`"}}
`, false); err != nil {
		t.Fatal(err)
	}
	var work *v1.DiscoverResponse
	for range 20 { // as long as it takes the engine to render the workflow
		if work, err = de.discover("10.0.0.101", mac, inv, 2*time.Second); err != nil {
			t.Fatalf("Discover (waiting): %v", err)
		}
		if work.GetWorkflowId() != "" {
			break
		}
	}
	if work.GetWorkflowId() != "default/install" || work.GetAgentToken() == "" {
		t.Fatalf("Discover = %+v; want workflow default/install and its token", work)
	}
	ag := anvilv1connect.NewAgentServiceClient(de.http, de.url, clientheader.AgentToken(work.GetAgentToken()))
	act, err := ag.GetAction(context.Background(), connect.NewRequest(&v1.GetActionRequest{AgentId: mac}))
	if err != nil || act.Msg.GetName() != "write" {
		t.Fatalf("GetAction with the token Discover gave = %v, %v; want action write", act, err)
	}
	// The same call from an address the Hardware does not reserve gets
	// neither the Hardware nor the token.
	if _, err := de.discover("10.0.0.99", mac, inv, 0); connect.CodeOf(err) != connect.CodePermissionDenied ||
		!strings.Contains(err.Error(), "Hardware default/"+name) {
		t.Errorf("Discover from another address = %v; want PERMISSION_DENIED naming the Hardware", err)
	}
}

// Collisions are refused, named and recorded; nothing is overwritten.
func TestDiscoverCollisions(t *testing.T) {
	de := newDiscEnv(t, nil)
	if _, err := apply(de.env, `apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: rack1-node07}
spec:
  interfaces:
  - dhcp: {mac: "3c:ec:ef:12:34:07", ip: {address: 10.0.0.7}}
    netboot: {allowPXE: true}
`, false); err != nil {
		t.Fatal(err)
	}
	if _, err := de.discover("10.0.0.101", "52:54:00:00:00:01", inventory(testUUID, "52:54:00:00:00:01"), 0); err != nil {
		t.Fatal(err)
	}
	before := de.discovered(t)
	tests := []struct {
		name, ip, mac string
		inv           []byte
		code          connect.Code
		want          string
	}{
		{name: "another machine with the same UUID", ip: "10.0.0.102", mac: "52:54:00:00:00:02",
			inv: inventory(testUUID, "52:54:00:00:00:02"), code: connect.CodeAlreadyExists,
			want: "Hardware default/discovery-" + testUUID + " (MACs 52:54:00:00:00:01)"},
		{name: "a second NIC another Hardware has", ip: "10.0.0.103", mac: "52:54:00:00:00:03",
			inv: inventory("", "52:54:00:00:00:03", "3c:ec:ef:12:34:07"), code: connect.CodeAlreadyExists,
			want: "MAC 3c:ec:ef:12:34:07 is already claimed by Hardware default/rack1-node07"},
		{name: "a known machine from another address", ip: "10.0.0.104", mac: "3c:ec:ef:12:34:07",
			inv: inventory("", "3c:ec:ef:12:34:07"), code: connect.CodePermissionDenied,
			want: "MAC 3c:ec:ef:12:34:07 is Hardware default/rack1-node07's, which reserves 10.0.0.7"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := de.discover(tc.ip, tc.mac, tc.inv, 0)
			if connect.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Discover = %v; want %v naming %q", err, tc.code, tc.want)
			}
		})
	}
	if got := de.discovered(t); got != before {
		t.Errorf("%d discovered Hardware after the refusals; want %d", got, before)
	}
	if n := de.hardware(t, "rack1-node07"); n.Labels[model.LabelDiscovered] != "" || n.Status.Attributes != nil {
		t.Errorf("the known Hardware was written: %+v", n)
	}
	if got := strings.Join(de.outcomes(), ","); got != "discovered,collision,collision,collision" {
		t.Errorf("machine events %s; want discovered and three collisions", got)
	}
	// The known machine from its own address is left as it is and waits
	// for its workflow.
	resp, err := de.discover("10.0.0.7", "3c:ec:ef:12:34:07", inventory("", "3c:ec:ef:12:34:07"), 0)
	if err != nil || resp.GetHardware() != "default/rack1-node07" || resp.GetCreated() {
		t.Errorf("Discover of a known machine = %+v, %v; want its Hardware, not created", resp, err)
	}
	if n := de.hardware(t, "rack1-node07"); n.Status.Attributes != nil {
		t.Error("a known machine's Hardware was written by discovery")
	}
}

func TestDiscoverBadInput(t *testing.T) {
	de := newDiscEnv(t, nil)
	huge := inventory("", "52:54:00:00:00:01")
	huge = append(huge[:len(huge)-1], []byte(`,"pad":"`+strings.Repeat("x", 70<<10)+`"}`)...)
	tests := []struct {
		name, mac string
		inv       []byte
		want      string
	}{
		{name: "no inventory", mac: "52:54:00:00:00:01", want: "no inventory"},
		{name: "not JSON", mac: "52:54:00:00:00:01", inv: []byte("<xml/>"), want: "not a JSON object"},
		{name: "huge", mac: "52:54:00:00:00:01", inv: huge, want: "at most 65536 are kept"},
		{name: "agent ID not a MAC", mac: "node07", inv: inventory(""), want: "the MAC it booted from"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := de.discover("10.0.0.101", tc.mac, tc.inv, 0)
			if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Discover = %v; want INVALID_ARGUMENT saying %q", err, tc.want)
			}
		})
	}
	if n := de.discovered(t); n != 0 {
		t.Errorf("%d Hardware made of bad input", n)
	}

	off := newEnv(t, envOptions{engine: true})
	_, err := off.ag.Discover(context.Background(), connect.NewRequest(&v1.DiscoverRequest{AgentId: "52:54:00:00:00:01",
		AgentAttributes: &v1.AgentAttributes{Inventory: inventory("")}}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "--discovery") {
		t.Errorf("Discover with discovery off = %v; want FAILED_PRECONDITION naming --discovery", err)
	}
}

// A storm of unknown machines, more than the cap: exactly the cap's
// worth of Hardware is made, each machine once however often it asks;
// those past the cap and those that find every slot taken are told to
// wait (RESOURCE_EXHAUSTED), and the API answers meanwhile.
func TestDiscoverStorm(t *testing.T) {
	const machines, max = 500, 400
	de := newDiscEnv(t, func(c *api.DiscoveryConfig) { c.Max = max })
	var (
		wg            sync.WaitGroup
		full, created atomic.Int64
		failed        atomic.Value
	)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	stop := make(chan struct{})
	apiErrs := make(chan error, 1)
	go func() { // an operator's reads during the storm
		defer close(apiErrs)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := de.hw.List(context.Background(), connect.NewRequest(&v1.ListRequest{})); err != nil {
				apiErrs <- err
				return
			}
		}
	}()
	for i := range machines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mac := fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8, i&0xff)
			c := anvilv1connect.NewAgentServiceClient(de.http, de.url)
			for attempt := 0; attempt < 1000; attempt++ {
				resp, err := c.Discover(context.Background(), connect.NewRequest(&v1.DiscoverRequest{AgentId: mac,
					AgentAttributes: &v1.AgentAttributes{Inventory: inventory("", mac)}}))
				switch {
				case err == nil:
					if resp.Msg.GetCreated() {
						created.Add(1)
					}
					return
				case connect.CodeOf(err) == connect.CodeResourceExhausted && strings.Contains(err.Error(), "--discovery-max"):
					full.Add(1)
					return
				case connect.CodeOf(err) == connect.CodeResourceExhausted:
					time.Sleep(5 * time.Millisecond) // busy: back off, as the agent does
				default:
					failed.Store(err)
					return
				}
			}
			failed.Store(fmt.Errorf("machine %s: still busy after 1000 attempts", mac))
		}()
	}
	wg.Wait()
	took := time.Since(start)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	// Figures for the record, not asserted (the machine's load decides
	// them): the time of the storm, and the live heap it left (the
	// server's and the test's clients', in one process).
	t.Logf("%d machines, cap %d: %s (%.1f machines/s made), live heap %+.1f MiB",
		machines, max, took.Round(time.Millisecond), float64(max)/took.Seconds(), float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20))
	close(stop)
	if err := <-apiErrs; err != nil {
		t.Errorf("the API failed during the storm: %v", err)
	}
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	if created.Load() != max || full.Load() != machines-max {
		t.Errorf("%d made, %d refused as over the cap; want %d and %d", created.Load(), full.Load(), max, machines-max)
	}
	if n := de.discovered(t); n != max {
		t.Errorf("%d discovered Hardware in the store; want %d", n, max)
	}
	// Bounded memory: what the storm leaves live is the Hardware made
	// (~33 KiB each, measured, with the test's clients), not a cost per
	// call or per refused machine. 256 KiB a machine is far above the
	// measure and far below what keeping every call's inventory would be.
	const perMachine = 256 << 10
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > int64(max)*perMachine {
		t.Errorf("live heap grew %d MiB for %d machines made (%d refused); want at most %d KiB a machine made",
			grew>>20, max, machines-max, perMachine>>10)
	}
}

// Tinkerbell's tink-agent, unknown to Anvil, gets its Hardware made of
// the attributes it sends with GetAction (Tinkerbell's auto-discovery):
// discovery-<MAC>, its attributes in Tinkerbell's annotation too, its
// address reserved (the protocol binds by address), and then it waits.
func TestDiscoverTinkAgent(t *testing.T) {
	de := newDiscEnv(t, nil)
	tink := tinkprotoconnect.NewWorkflowServiceClient(de.http, de.url, connect.WithGRPC())
	de.from.Store("192.168.1.20")
	_, err := tink.GetAction(context.Background(), connect.NewRequest(&proto.ActionRequest{AgentId: "3c:ec:ef:00:09:01",
		AgentAttributes: &proto.AgentAttributes{
			Memory:  &proto.Memory{Total: "8GB"},
			Network: []*proto.Network{{Name: "eth0", Mac: "3c:ec:ef:00:09:01"}},
			Product: &proto.Product{SerialNumber: "TINK-1"},
		}}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("GetAction of an unknown tink-agent = %v; want NOT_FOUND (no work yet)", err)
	}
	hw := de.hardware(t, "discovery-3cecef000901")
	if hw.Labels[model.LabelDiscovered] != "true" || hw.Annotations[model.AgentAttributesAnnotation] == "" {
		t.Errorf("labels %v, annotations %v; want discovered, with Tinkerbell's attributes annotation", hw.Labels, hw.Annotations)
	}
	if got := hw.IPs(); len(got) != 1 || got[0] != "192.168.1.20" {
		t.Errorf("reservation %v; want the caller's address", got)
	}
	if a := hw.Status.Attributes; a == nil || a.Product == nil || a.Product.SerialNumber != "TINK-1" {
		t.Errorf("status.attributes %+v; want the agent's", a)
	}
}

// At the cap a new machine is refused without listing the namespace again
// at every call: a Hardware deleted meanwhile is seen once relistEvery
// (1 s) has passed on the discovery clock, and then the machine is made.
func TestDiscoverCapRecount(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	de := newDiscEnv(t, func(c *api.DiscoveryConfig) {
		c.Max = 1
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	first, second := "52:54:00:00:00:01", "52:54:00:00:00:02"
	if _, err := de.discover("10.0.0.101", first, inventory("", first), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := de.discover("10.0.0.102", second, inventory("", second), 0); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("second machine at the cap: %v; want RESOURCE_EXHAUSTED", err)
	}
	if err := de.st.Delete(context.Background(), model.KindHardware, "default", "discovery-525400000001", ""); err != nil {
		t.Fatal(err)
	}
	// Within relistEvery of the last count: the deletion is not seen yet.
	if _, err := de.discover("10.0.0.102", second, inventory("", second), 0); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("at once after the deletion: %v; want RESOURCE_EXHAUSTED (counted less than a second ago)", err)
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	resp, err := de.discover("10.0.0.102", second, inventory("", second), 0)
	if err != nil || !resp.GetCreated() {
		t.Fatalf("a second later: %v, %v; want the Hardware made", resp, err)
	}
}
