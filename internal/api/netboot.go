package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// Names of the netboot flags in a NetbootChange, as the manifest spells
// them.
const (
	flagAllowPXE      = "allowPXE"
	flagAllowWorkflow = "allowWorkflow"
)

// hardwareHandler is the HardwareService: the shared resource methods and
// SetNetboot.
type hardwareHandler struct {
	*hardwareService
}

// SetNetboot sets allowPXE and/or allowWorkflow on the interfaces the
// request names (every one when it names none) and nothing else.
//
// It needs auth.Provision, as Reprovision does: Reprovision sets allowPXE
// itself, so an operator who may start a network install may also stop a
// machine from netbooting; writing the whole Hardware (Update) stays an
// admin's. The change is a read-modify-write with the resourceVersion
// read (modifyHardware): a concurrent change to the Hardware — a label,
// the engine setting allowPXE — is re-read and kept, never overwritten,
// unless the caller named the version it saw: then any change since is
// a conflict (ABORTED).
func (h hardwareHandler) SetNetboot(ctx context.Context, req *connect.Request[v1.SetNetbootRequest]) (*connect.Response[v1.SetNetbootResponse], error) {
	s := h.s
	m := req.Msg
	ns := m.GetNamespace()
	if ns == "" {
		ns = model.DefaultNamespace
	}
	if m.GetHardware() == "" {
		return nil, invalid("missing hardware: the name of the Hardware whose netboot to change")
	}
	if m.AllowPxe == nil && m.AllowWorkflow == nil {
		return nil, invalid("nothing to change: set allow_pxe, allow_workflow or both")
	}
	macs := make([]macaddr.MAC, 0, len(m.GetInterfaces()))
	for _, v := range m.GetInterfaces() {
		mac, err := macaddr.Parse(v)
		if err != nil {
			return nil, invalid("interfaces: %v", err)
		}
		macs = append(macs, mac)
	}
	if err := authorize(ctx, auth.Provision, ns); err != nil {
		return nil, err
	}
	obj, err := s.cfg.Store.Get(ctx, model.KindHardware, ns, m.GetHardware())
	if errors.Is(err, store.ErrNotFound) {
		return nil, hardwareNotFound(ns, m.GetHardware())
	}
	if err != nil {
		return nil, s.toConnect(err)
	}
	var changes []*v1.NetbootChange
	hw, err := modifyHardware(ctx, s.cfg.Store, obj.(*model.Hardware), func(hw *model.Hardware) (bool, error) {
		if rv := m.GetResourceVersion(); rv != "" && hw.ResourceVersion != rv {
			return false, connect.NewError(connect.CodeAborted, fmt.Errorf(
				"hardware %s was changed since resourceVersion %s (it is at %s now): read it again, check, and retry", hw.Key(), rv, hw.ResourceVersion))
		}
		var err error
		changes, err = setNetbootFlags(hw, macs, m.AllowPxe, m.AllowWorkflow)
		return len(changes) > 0, err
	})
	if err != nil {
		return nil, s.toConnect(err)
	}
	out := &v1.SetNetbootResponse{Changes: changes}
	if out.Hardware, err = h.encode(hw); err != nil {
		return nil, err
	}
	return connect.NewResponse(out), nil
}

// hardwareNotFound is the NOT_FOUND answer for a Hardware a call names.
func hardwareNotFound(ns, name string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("hardware %s/%s not found (anvil get hardware -n %s lists them)", ns, name, ns))
}

// setNetbootFlags sets allowPXE (if pxe is not nil) and allowWorkflow (if
// workflow is not nil) on hw's interfaces whose MAC is in macs, or on
// every interface when macs is empty, and returns what changed. A MAC of
// macs no interface has is an error (INVALID_ARGUMENT) naming it, and so
// is a Hardware without interfaces: there is nothing to set.
func setNetbootFlags(hw *model.Hardware, macs []macaddr.MAC, pxe, workflow *bool) ([]*v1.NetbootChange, error) {
	if len(hw.Spec.Interfaces) == 0 {
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("hardware %s has no interface (spec.interfaces): there is no netboot flag to set", hw.Key()))
	}
	var missing []string
	for _, mac := range macs {
		if !slices.ContainsFunc(hw.Spec.Interfaces, func(ifc model.Interface) bool { return ifc.MAC() == mac }) {
			missing = append(missing, mac.String())
		}
	}
	if len(missing) > 0 {
		return nil, invalid("hardware %s has no interface with MAC %s (its MACs: %s)", hw.Key(), strings.Join(missing, ", "), macList(hw))
	}
	var changes []*v1.NetbootChange
	// set changes one flag of interface i (a nil flag reads as def) when
	// asked to and it differs: an interface left as it is keeps even its
	// unset flags unset.
	set := func(i int, field string, flag func(*model.Netboot) **bool, to *bool, def bool) {
		ifc := &hw.Spec.Interfaces[i]
		var before bool
		if ifc.Netboot != nil {
			before = model.BoolValue(*flag(ifc.Netboot), def)
		} else {
			before = def
		}
		if to == nil || before == *to {
			return
		}
		if ifc.Netboot == nil {
			ifc.Netboot = &model.Netboot{}
		}
		*flag(ifc.Netboot) = model.Bool(*to)
		changes = append(changes, &v1.NetbootChange{Interface: int32(i), Mac: macOf(*ifc), Field: field, Before: before, After: *to})
	}
	for i, ifc := range hw.Spec.Interfaces {
		if len(macs) > 0 && !slices.Contains(macs, ifc.MAC()) {
			continue
		}
		set(i, flagAllowPXE, func(n *model.Netboot) **bool { return &n.AllowPXE }, pxe, false)
		set(i, flagAllowWorkflow, func(n *model.Netboot) **bool { return &n.AllowWorkflow }, workflow, true)
	}
	return changes, nil
}

// macOf is an interface's MAC in canonical form, or "" when it has none.
func macOf(ifc model.Interface) string {
	if m := ifc.MAC(); m.IsValid() {
		return m.String()
	}
	return ""
}

// hardwareRetries bounds modifyHardware's re-reads when the Hardware
// changes between reading and writing it.
const hardwareRetries = 5

// modifyHardware applies change to hw and stores the result with a
// conditional update (hw's resourceVersion), re-reading the Hardware and
// applying change again on conflict, so a concurrent write is kept, not
// overwritten. change reports whether it changed anything (if not,
// nothing is written) or an error, which is returned as is. It returns
// the Hardware as stored.
func modifyHardware(ctx context.Context, st store.Store, hw *model.Hardware, change func(*model.Hardware) (bool, error)) (*model.Hardware, error) {
	for attempt := 0; ; attempt++ {
		changed, err := change(hw)
		if err != nil || !changed {
			return hw, err
		}
		updated, err := st.Update(ctx, hw) // hw carries the resourceVersion read: conditional
		if err == nil {
			return updated.(*model.Hardware), nil
		}
		if !errors.Is(err, store.ErrConflict) || attempt == hardwareRetries {
			return hw, err
		}
		obj, gerr := st.Get(ctx, model.KindHardware, hw.Namespace, hw.Name)
		if gerr != nil {
			return hw, gerr
		}
		hw = obj.(*model.Hardware)
	}
}
