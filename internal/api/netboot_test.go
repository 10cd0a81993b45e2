package api_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/audit"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// twoInterfaces is a Hardware of acme with labels, annotations, user data
// and two interfaces: the first netboots, the second has no netboot flags
// at all (both read as their defaults).
const twoInterfaces = `apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: n2, namespace: acme, labels: {rack: r1}, annotations: {note: keep}}
spec:
  userData: "#cloud-config\nhostname: n2\n"
  metadata: {instance: {id: n2-id, hostname: n2}}
  interfaces:
  - dhcp: {mac: "52:54:00:0a:00:02", hostname: n2, ip: {address: 10.0.1.12, netmask: 255.255.255.0}}
    netboot: {allowPXE: true, allowWorkflow: true}
  - dhcp: {mac: "52:54:00:0a:00:03", hostname: n2b, ip: {address: 10.0.1.13, netmask: 255.255.255.0}}
`

func newNetbootEnv(t *testing.T, more ...func(*api.Config)) (*env, *audit.Log) {
	t.Helper()
	e, al := newAuthEnv(t, more...)
	if _, err := e.man.Apply(context.Background(), as("admin", &v1.ApplyRequest{Source: "n2.yaml", Content: twoInterfaces})); err != nil {
		t.Fatalf("Apply n2: %v", err)
	}
	return e, al
}

func (e *env) hardware(t *testing.T, ns, name string) *model.Hardware {
	t.Helper()
	obj, err := e.st.Get(context.Background(), model.KindHardware, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*model.Hardware)
}

func changesOf(r *v1.SetNetbootResponse) string {
	var out []string
	for _, c := range r.GetChanges() {
		out = append(out, fmt.Sprintf("%d %s %s %t->%t", c.GetInterface(), c.GetMac(), c.GetField(), c.GetBefore(), c.GetAfter()))
	}
	return strings.Join(out, "; ")
}

// lastAudit is the newest audit record as "subject procedure outcome
// ns=namespace object".
func lastAudit(t *testing.T, al *audit.Log) string {
	t.Helper()
	recs, err := al.List(audit.Filter{})
	if err != nil || len(recs) == 0 {
		t.Fatalf("audit records: %v, %v", recs, err)
	}
	r := recs[len(recs)-1]
	return fmt.Sprintf("%s %s %s ns=%s %s", r.Subject, r.Procedure, r.Outcome, r.Namespace, r.Object)
}

// TestSetNetboot: an operator (provision, not write) denies and allows
// netboot; only the flags asked for change, on the interfaces asked for;
// a request that changes nothing writes nothing; every call is audited
// with what it asked.
func TestSetNetboot(t *testing.T) {
	e, al := newNetbootEnv(t)
	ctx := context.Background()
	set := func(req *v1.SetNetbootRequest) *v1.SetNetbootResponse {
		t.Helper()
		resp, err := e.hw.SetNetboot(ctx, as("acme-op", req))
		if err != nil {
			t.Fatalf("SetNetboot %v as acme-op: %v", req, err)
		}
		return resp.Msg
	}
	before := e.hardware(t, "acme", "n2")

	// Deny on every interface: only the first was allowed.
	r := set(&v1.SetNetbootRequest{Namespace: "acme", Hardware: "n2", AllowPxe: model.Bool(false)})
	if got, want := changesOf(r), "0 52:54:00:0a:00:02 allowPXE true->false"; got != want {
		t.Errorf("deny: changes %q; want %q", got, want)
	}
	if got, want := lastAudit(t, al), "acme-op /anvil.v1.HardwareService/SetNetboot ok ns=acme hardware=n2 allow_pxe=false"; got != want {
		t.Errorf("audit record %q; want %q", got, want)
	}
	after := e.hardware(t, "acme", "n2")
	if rv := r.GetHardware().GetMetadata().GetResourceVersion(); rv != after.ResourceVersion {
		t.Errorf("the answer's resourceVersion %s is not the stored %s", rv, after.ResourceVersion)
	}
	// Only the first interface's allowPXE changed: the second keeps no
	// netboot at all, labels, annotations, user data and status stay.
	want := model.DeepCopy(before)
	want.Spec.Interfaces[0].Netboot.AllowPXE = model.Bool(false)
	want.ResourceVersion, want.Generation = after.ResourceVersion, after.Generation
	if !reflect.DeepEqual(after, want) {
		t.Errorf("after deny the Hardware is\n%+v\nwant\n%+v", after, want)
	}

	// Asked again: nothing to change, nothing written.
	if r := set(&v1.SetNetbootRequest{Namespace: "acme", Hardware: "n2", AllowPxe: model.Bool(false)}); len(r.GetChanges()) != 0 {
		t.Errorf("a second deny changed %s", changesOf(r))
	}
	if rv := e.hardware(t, "acme", "n2").ResourceVersion; rv != after.ResourceVersion {
		t.Errorf("a deny that changed nothing wrote the Hardware (resourceVersion %s, was %s)", rv, after.ResourceVersion)
	}

	// One interface by MAC, in another spelling, with the version seen;
	// allowWorkflow too.
	r = set(&v1.SetNetbootRequest{Namespace: "acme", Hardware: "n2", AllowPxe: model.Bool(true), AllowWorkflow: model.Bool(false),
		Interfaces: []string{"52-54-00-0A-00-03"}, ResourceVersion: after.ResourceVersion})
	if got, want := changesOf(r), "1 52:54:00:0a:00:03 allowPXE false->true; 1 52:54:00:0a:00:03 allowWorkflow true->false"; got != want {
		t.Errorf("allow on one MAC: changes %q; want %q", got, want)
	}
	hw := e.hardware(t, "acme", "n2")
	if nb := hw.Spec.Interfaces[1].Netboot; nb == nil || !*nb.AllowPXE || *nb.AllowWorkflow {
		t.Errorf("interface 1's netboot %+v; want allowPXE true, allowWorkflow false", nb)
	}
	if nb := hw.Spec.Interfaces[0].Netboot; *nb.AllowPXE || !*nb.AllowWorkflow {
		t.Errorf("interface 0's netboot changed: %+v", nb)
	}
	if got, want := lastAudit(t, al), "acme-op /anvil.v1.HardwareService/SetNetboot ok ns=acme hardware=n2 allow_pxe=true allow_workflow=false"; got != want {
		t.Errorf("audit record %q; want %q", got, want)
	}

	// An admin may too; an operator of acme cannot reach globex.
	if _, err := e.hw.SetNetboot(ctx, as("admin", &v1.SetNetbootRequest{Namespace: "globex", Hardware: "g1", AllowPxe: model.Bool(false)})); err != nil {
		t.Errorf("admin denies globex's g1: %v", err)
	}
}

// TestSetNetbootRefusals: who may not, and what cannot be asked, is
// refused with the cause named; nothing is written, and each refusal is
// audited.
func TestSetNetbootRefusals(t *testing.T) {
	e, al := newNetbootEnv(t)
	ctx := context.Background()
	rv := e.hardware(t, "acme", "n2").ResourceVersion
	for _, tc := range []struct {
		name, who string
		req       *v1.SetNetbootRequest
		code      connect.Code
		says      string
	}{
		{"viewer", "acme-viewer", &v1.SetNetbootRequest{Namespace: "acme", Hardware: "n2", AllowPxe: model.Bool(false)},
			connect.CodePermissionDenied, `"provision"`},
		{"other organisation", "globex-op", &v1.SetNetbootRequest{Namespace: "acme", Hardware: "n2", AllowPxe: model.Bool(false)},
			connect.CodePermissionDenied, "permission denied"},
		{"other organisation, unknown hardware", "globex-op", &v1.SetNetbootRequest{Namespace: "acme", Hardware: "nope", AllowPxe: model.Bool(false)},
			connect.CodePermissionDenied, "permission denied"},
		{"unknown hardware", "acme-op", &v1.SetNetbootRequest{Namespace: "acme", Hardware: "nope", AllowPxe: model.Bool(false)},
			connect.CodeNotFound, "hardware acme/nope not found"},
		{"MAC not on it", "acme-op", &v1.SetNetbootRequest{Namespace: "acme", Hardware: "n2", AllowPxe: model.Bool(false),
			Interfaces: []string{"52:54:00:0a:00:02", "52:54:00:0a:00:99"}},
			connect.CodeInvalidArgument, "hardware acme/n2 has no interface with MAC 52:54:00:0a:00:99 (its MACs: 52:54:00:0a:00:02, 52:54:00:0a:00:03)"},
		{"not a MAC", "acme-op", &v1.SetNetbootRequest{Namespace: "acme", Hardware: "n2", AllowPxe: model.Bool(false), Interfaces: []string{"eth0"}},
			connect.CodeInvalidArgument, `interfaces: "eth0" is not a MAC address`},
		{"nothing to change", "acme-op", &v1.SetNetbootRequest{Namespace: "acme", Hardware: "n2"},
			connect.CodeInvalidArgument, "nothing to change: set allow_pxe, allow_workflow or both"},
		{"no hardware", "acme-op", &v1.SetNetbootRequest{Namespace: "acme", AllowPxe: model.Bool(false)},
			connect.CodeInvalidArgument, "missing hardware"},
		{"stale resourceVersion", "acme-op", &v1.SetNetbootRequest{Namespace: "acme", Hardware: "n2", AllowPxe: model.Bool(false), ResourceVersion: rv + "0"},
			connect.CodeAborted, "hardware acme/n2 was changed since resourceVersion " + rv + "0"},
	} {
		_, err := e.hw.SetNetboot(ctx, as(tc.who, tc.req))
		denied(t, tc.name, err, tc.code)
		if err != nil && !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v; want it to say %s", tc.name, err, tc.says)
		}
		if got := lastAudit(t, al); !strings.HasPrefix(got, tc.who+" /anvil.v1.HardwareService/SetNetboot "+strings.ToLower(tc.code.String())+" ") {
			t.Errorf("%s: audit record %q; want %s's refusal (%v)", tc.name, got, tc.who, tc.code)
		}
	}
	if now := e.hardware(t, "acme", "n2").ResourceVersion; now != rv {
		t.Errorf("a refused call wrote the Hardware (resourceVersion %s, was %s)", now, rv)
	}
}

// racingStore makes another write to a Hardware just before each of the
// next races Hardware updates: a label (raced=N), as an admin's edit or
// the engine would, between the API's read and its write.
type racingStore struct {
	store.Store
	races atomic.Int32
}

func (r *racingStore) Update(ctx context.Context, obj model.Object) (model.Object, error) {
	if hw, ok := obj.(*model.Hardware); ok {
		if n := r.races.Add(-1); n >= 0 {
			cur, err := r.Store.Get(ctx, model.KindHardware, hw.Namespace, hw.Name)
			if err != nil {
				return nil, err
			}
			cur.GetObjectMeta().Labels["raced"] = fmt.Sprint(n)
			if _, err := r.Store.Update(ctx, cur); err != nil {
				return nil, err
			}
		}
	}
	return r.Store.Update(ctx, obj)
}

// TestSetNetbootConcurrentChange: a write made between SetNetboot's read
// and its write is kept, never overwritten — the change is applied again
// to the Hardware as it is now — unless the caller named the version it
// saw: then the call is refused (ABORTED) and writes nothing.
func TestSetNetbootConcurrentChange(t *testing.T) {
	rs := &racingStore{}
	e, _ := newNetbootEnv(t, func(c *api.Config) { rs.Store = c.Store; c.Store = rs })
	ctx := context.Background()

	rs.races.Store(2)
	resp, err := e.hw.SetNetboot(ctx, as("acme-op", &v1.SetNetbootRequest{Namespace: "acme", Hardware: "n2", AllowPxe: model.Bool(false)}))
	if err != nil {
		t.Fatalf("SetNetboot while the Hardware changes: %v", err)
	}
	hw := e.hardware(t, "acme", "n2")
	if hw.Labels["raced"] != "0" || hw.Labels["rack"] != "r1" || *hw.Spec.Interfaces[0].Netboot.AllowPXE {
		t.Errorf("after two concurrent label changes: labels %v, allowPXE %v; want both writes kept", hw.Labels, *hw.Spec.Interfaces[0].Netboot.AllowPXE)
	}
	if got := changesOf(resp.Msg); got != "0 52:54:00:0a:00:02 allowPXE true->false" {
		t.Errorf("changes %q", got)
	}

	rs.races.Store(1)
	_, err = e.hw.SetNetboot(ctx, as("acme-op", &v1.SetNetbootRequest{Namespace: "acme", Hardware: "n2", AllowPxe: model.Bool(true), ResourceVersion: hw.ResourceVersion}))
	wantCode(t, "SetNetboot with the version seen, changed meanwhile", err, connect.CodeAborted)
	now := e.hardware(t, "acme", "n2")
	if now.Labels["raced"] != "0" || *now.Spec.Interfaces[0].Netboot.AllowPXE {
		t.Errorf("after a refused SetNetboot: labels %v, allowPXE %v; want the concurrent label, allowPXE still false", now.Labels, *now.Spec.Interfaces[0].Netboot.AllowPXE)
	}
}
