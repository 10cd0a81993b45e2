package ui

// The operator's actions besides reprovision: cancel a workflow, allow or
// deny a machine's netboot, power a machine through its BMC. Each is the
// API call the CLI makes for it, sent through the API's own handler as
// the session's caller (apicall.go), so the API authorizes and audits it;
// the UI only decides which buttons to show, from the same auth.Principal
// the API will judge.

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/bmcjob"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// powerButtons are the power actions the machine page offers, in its
// order: every one `anvil power` takes.
var powerButtons = []string{model.PowerActionOn, model.PowerActionOff, model.PowerActionSoft,
	model.PowerActionCycle, model.PowerActionReset, model.PowerActionStatus}

// powerLabel is a power action's button text; its value is the action
// itself, as `anvil power` spells it.
func powerLabel(action string) string {
	switch action {
	case model.PowerActionOn:
		return "Power on"
	case model.PowerActionOff:
		return "Power off (hard)"
	case model.PowerActionSoft:
		return "Soft off (ACPI)"
	case model.PowerActionCycle:
		return "Power cycle"
	case model.PowerActionReset:
		return "Reset"
	case model.PowerActionStatus:
		return "Read power state"
	}
	return action
}

// machineActions is what the machine page shows of netboot and power.
type machineActions struct {
	// Netboot: the interfaces' allowPXE and allowWorkflow, and whether
	// the caller may change allowPXE (HardwareService.SetNetboot:
	// provision, as reprovision).
	Interfaces, PXEAllowed, WorkflowDenied int
	CanNetboot                             bool
	ResourceVersion                        string // of the Hardware shown, sent back with the change
	// Power: the Machine spec.bmcRef names ("" when none), what the
	// store holds of it, whether the caller may run a BMC Job
	// (provision), and the Job the last button press made.
	Machine      string
	MachineError string
	PowerState   string
	Contactable  *model.MachineCondition
	CanPower     bool
	Buttons      []string
	Job          *powerJob
}

// powerJob is a BMC Job as the page shows it.
type powerJob struct {
	Name, Task, State, Message string
	Started, Completed         *time.Time
}

// PXESummary says on how many interfaces netboot is allowed.
func (a machineActions) PXESummary() string {
	switch {
	case a.Interfaces == 0:
		return "no interface"
	case a.PXEAllowed == a.Interfaces:
		return fmt.Sprintf("allowed on every interface (%d)", a.Interfaces)
	case a.PXEAllowed == 0:
		return fmt.Sprintf("denied on every interface (%d)", a.Interfaces)
	}
	return fmt.Sprintf("allowed on %d of %d interfaces", a.PXEAllowed, a.Interfaces)
}

// machineActionsOf reads what the machine page shows of hw's netboot and
// power; job is the BMC Job named in the page's query (the last press).
func (u *UI) machineActionsOf(r *request, hw *model.Hardware, job string) machineActions {
	ns := hw.Namespace
	a := machineActions{ResourceVersion: hw.ResourceVersion, CanNetboot: r.principal.Allow(auth.Provision, ns) == nil,
		Interfaces: len(hw.Spec.Interfaces)}
	for _, ifc := range hw.Spec.Interfaces {
		if ifc.Netboot != nil && model.BoolValue(ifc.Netboot.AllowPXE, false) {
			a.PXEAllowed++
		}
		if ifc.Netboot != nil && !model.BoolValue(ifc.Netboot.AllowWorkflow, true) {
			a.WorkflowDenied++
		}
	}
	if hw.Spec.BMCRef == nil || hw.Spec.BMCRef.Name == "" {
		return a
	}
	a.Machine = hw.Spec.BMCRef.Name
	a.CanPower = r.principal.Allow(auth.Provision, ns) == nil
	if a.CanPower {
		a.Buttons = powerButtons
	}
	// The Job is read before the Machine: the executor writes the
	// Machine's power state first and the Job's outcome after it, so a
	// Job read as Completed is never shown beside the power state from
	// before it (two reads are not one snapshot: the page's stream is
	// rendered while the executor writes).
	if job != "" {
		a.Job = u.powerJobOf(r, ns, a.Machine, job)
	}
	obj, err := u.cfg.Store.Get(r.Context(), model.KindMachine, ns, a.Machine)
	switch {
	case errors.Is(err, store.ErrNotFound):
		a.MachineError = fmt.Sprintf("Machine %s/%s (spec.bmcRef) does not exist: apply it (docs/bmc.md).", ns, a.Machine)
	case err != nil:
		a.MachineError = "Machine " + a.Machine + " could not be read: " + err.Error()
	default:
		m := obj.(*model.Machine)
		a.PowerState = m.Status.PowerState
		if i := slices.IndexFunc(m.Status.Conditions, func(c model.MachineCondition) bool { return c.Type == model.ConditionContactable }); i >= 0 {
			a.Contactable = &m.Status.Conditions[i]
		}
	}
	return a
}

// powerJobOf reads the BMC Job name of namespace ns if it drives machine,
// else nil (a query naming another machine's Job shows nothing).
func (u *UI) powerJobOf(r *request, ns, machine, name string) *powerJob {
	obj, err := u.cfg.Store.Get(r.Context(), model.KindJob, ns, name)
	if err != nil {
		return nil
	}
	j := obj.(*model.Job)
	if j.Spec.MachineRef.Name != machine {
		return nil
	}
	pj := &powerJob{Name: j.Name, State: "Pending", Started: j.Status.StartTime, Completed: j.Status.CompletionTime}
	var tasks []string
	for _, t := range j.Spec.Tasks {
		tasks = append(tasks, t.Describe())
	}
	pj.Task = strings.Join(tasks, ", ")
	for _, c := range j.Status.Conditions {
		if c.Status == model.ConditionTrue {
			pj.State, pj.Message = c.Type, c.Message
		}
	}
	return pj
}

// cancelWorkflow is JobService.CancelJob, what `anvil workflow cancel`
// and `anvil job cancel` call: the workflow's page then shows CANCELLING
// and CANCELLED as its events arrive.
func (u *UI) cancelWorkflow(w http.ResponseWriter, r *request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	client := anvilv1connect.NewJobServiceClient(u.apiClient(r))
	_, err := client.CancelJob(r.Context(), asCaller(u, r, &v1.CancelJobRequest{JobId: ns + "/" + name,
		Reason: strings.TrimSpace(r.PostFormValue("reason")), Force: r.PostFormValue("force") != ""}))
	if err != nil {
		u.errorPage(w, r, httpStatus(err), "Cancel refused: "+connectMessage(err))
		return
	}
	http.Redirect(w, r.Request, basePath+"workflows/"+url.PathEscape(ns)+"/"+url.PathEscape(name), http.StatusSeeOther)
}

// setNetboot sets allowPXE on every interface of the machine to the
// form's allow with HardwareService.SetNetboot, what `anvil netboot
// allow|deny` calls (operators may: it needs the permission reprovision
// needs), with the resourceVersion the page showed: a change made
// meanwhile by someone else is refused with a conflict, never
// overwritten, and nothing but allowPXE is written.
func (u *UI) setNetboot(w http.ResponseWriter, r *request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	var allow bool
	switch r.PostFormValue("allow") {
	case "true":
		allow = true
	case "false":
	default:
		u.errorPage(w, r, http.StatusBadRequest, fmt.Sprintf("allow %q: want true or false", r.PostFormValue("allow")))
		return
	}
	client := anvilv1connect.NewHardwareServiceClient(u.apiClient(r))
	_, err := client.SetNetboot(r.Context(), asCaller(u, r, &v1.SetNetbootRequest{Namespace: ns, Hardware: name,
		AllowPxe: &allow, ResourceVersion: r.PostFormValue("resourceVersion")}))
	if err != nil {
		msg := "Netboot not changed: " + connectMessage(err)
		if connect.CodeOf(err) == connect.CodeAborted {
			msg = fmt.Sprintf("Netboot not changed: hardware %s/%s was changed since this page was loaded; reload it, check, and try again. The API said: %s",
				ns, name, connectMessage(err))
		}
		u.errorPage(w, r, httpStatus(err), msg)
		return
	}
	http.Redirect(w, r.Request, basePath+"hardware/"+url.PathEscape(ns)+"/"+url.PathEscape(name)+"#netboot", http.StatusSeeOther)
}

// power creates the BMC Job `anvil power ACTION hardware/NAME` creates
// (bmcjob decides it for both) with BmcJobService.Create, and shows the
// machine's page with the Job's state.
func (u *UI) power(w http.ResponseWriter, r *request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	hw := u.view.hardwareByKey(ns + "/" + name)
	if hw == nil || !r.principal.Sees(ns) {
		u.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("No hardware %s/%s.", ns, name))
		return
	}
	machine, err := bmcjob.MachineOf(hw)
	if err != nil {
		u.errorPage(w, r, http.StatusBadRequest, "Power refused: "+err.Error())
		return
	}
	job, err := bmcjob.Power(ns, machine, r.PostFormValue("action"), bmcjob.CreatedByUI)
	if err != nil {
		u.errorPage(w, r, http.StatusBadRequest, "Power refused: "+err.Error())
		return
	}
	msg, err := bmcjob.Message(job)
	if err == nil {
		client := anvilv1connect.NewBmcJobServiceClient(u.apiClient(r))
		_, err = client.Create(r.Context(), asCaller(u, r, &v1.CreateBmcJobRequest{Job: msg}))
	}
	if err != nil {
		u.errorPage(w, r, httpStatus(err), "Power refused: "+connectMessage(err))
		return
	}
	q := url.Values{"job": {job.Name}}
	http.Redirect(w, r.Request, basePath+"hardware/"+url.PathEscape(ns)+"/"+url.PathEscape(name)+"?"+q.Encode()+"#power", http.StatusSeeOther)
}

// canCancel reports whether r's caller may cancel wf and it has not
// ended: the workflow page then offers Cancel.
func canCancel(r *request, wf *model.Workflow) bool {
	return !wf.Status.State.IsFinal() && r.principal.Allow(auth.Provision, wf.Namespace) == nil
}

// cancelling reports whether wf runs with a cancellation asked for (the
// API's CANCELLING).
func cancelling(wf *model.Workflow) bool {
	return wf.Status.CancelRequested != nil && !wf.Status.State.IsFinal()
}

// powerEvents streams the machine page's power fragment as Server-Sent
// Events ("power"): now, and whenever the store's watch reports a change
// of the Hardware's Machine or of a Job on it, so a press's outcome and
// the power state it leaves appear without a reload. Each open stream
// holds two watches of the store narrowed by field selectors (the
// Machine by name, Jobs by spec.machineRef.name): a machine page is open
// in a few browsers at once, not thousands.
func (u *UI) powerEvents(w http.ResponseWriter, r *request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	hw := u.view.hardwareByKey(ns + "/" + name)
	if hw == nil || !r.principal.Sees(ns) || hw.Spec.BMCRef == nil || hw.Spec.BMCRef.Name == "" {
		http.Error(w, "no hardware "+ns+"/"+name+" with a bmcRef", http.StatusNotFound)
		return
	}
	machine, job := hw.Spec.BMCRef.Name, r.URL.Query().Get("job")
	ctx := r.Context()
	machines, err := u.cfg.Store.Watch(ctx, model.KindMachine, store.WatchOptions{Namespace: ns, Shared: true,
		Fields: []store.FieldRequirement{{Field: "metadata.name", Value: machine}}})
	if err != nil {
		http.Error(w, "the store cannot be watched: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	jobs, err := u.cfg.Store.Watch(ctx, model.KindJob, store.WatchOptions{Namespace: ns, Shared: true,
		Fields: []store.FieldRequirement{{Field: "spec.machineRef.name", Value: machine}}})
	if err != nil {
		http.Error(w, "the store cannot be watched: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	es := u.openEvents(w, r.Request)
	defer es.close()
	var last string
	for {
		var buf bytes.Buffer
		if err := u.pages["hardware_detail"].ExecuteTemplate(&buf, "power", u.machineActionsOf(r, hw, job)); err != nil {
			u.log.Error("ui: power fragment failed to render", "hardware", ns+"/"+name, "err", err)
			return
		}
		if s := buf.String(); s != last {
			last = s
			if es.send("power", s) != nil {
				return
			}
		}
		select {
		case <-es.done():
			return
		case <-es.keepAlive():
			if es.ping() != nil {
				return
			}
		case ev, ok := <-machines:
			if !ok || ev.Type == store.Error {
				return // the browser's EventSource reconnects
			}
		case ev, ok := <-jobs:
			if !ok || ev.Type == store.Error {
				return
			}
		}
	}
}
