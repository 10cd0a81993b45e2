package api

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/labels"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/wire"
	"github.com/anvilproj/anvil/internal/workflow"
)

// Where a job's Workflow keeps what ProvisionDevice was asked, so that a
// retried call finds it after a restart. Keys are free text and label values
// are not (63 characters of [A-Za-z0-9._-]), so the label holds a digest of
// the key — the store finds the job by it — and an annotation the key
// itself, which a match must equal.
const (
	// labelIdempotencyKey is the label holding idempotencyDigest(key).
	labelIdempotencyKey = "anvil.dev/idempotency-key"
	// annotationIdempotencyKey is the annotation holding the key.
	annotationIdempotencyKey = "anvil.dev/idempotency-key"
	// annotationDeviceID is the annotation holding the device_id as the
	// caller wrote it.
	annotationDeviceID = "anvil.dev/device-id"
)

// maxIdempotencyKey bounds an idempotency key (an annotation value).
const maxIdempotencyKey = 253

// jobNameSuffixLen is the length of the hex suffix of a job's Workflow name.
const jobNameSuffixLen = 10

// maxJobNameHardware bounds the Hardware's part of a job's Workflow name,
// so that name, "-" and suffix stay a valid object name (253).
const maxJobNameHardware = 200

type jobService struct{ s *Services }

// ProvisionDevice creates a job, or finds the one its idempotency key
// created. The key lookup, the checks and the create run under the lock
// Reprovision takes, so concurrent calls with one key create one job.
func (j jobService) ProvisionDevice(ctx context.Context, req *connect.Request[v1.ProvisionDeviceRequest]) (*connect.Response[v1.ProvisionDeviceResponse], error) {
	s := j.s
	m := req.Msg
	ns := cmp.Or(auth.FromContext(ctx).Scope(m.GetNamespace()), model.DefaultNamespace)
	switch {
	case m.GetDeviceId() == "":
		return nil, invalid("missing device_id: a Hardware's name, one of its MACs or its instance ID")
	case m.GetTemplate() == "":
		return nil, invalid("missing template: the name of the Template the job runs")
	case len(m.GetIdempotencyKey()) > maxIdempotencyKey:
		return nil, invalid("idempotency_key is %d characters long; at most %d", len(m.GetIdempotencyKey()), maxIdempotencyKey)
	}
	for k := range m.GetParameters() {
		switch k {
		case "":
			return nil, invalid("parameters: an empty key")
		case hardwareMapDevice:
			return nil, invalid("parameters: %q is the device's first MAC, set by the server", k)
		case "hardware", "Hardware":
			return nil, invalid("parameters: %q is reserved for the Hardware's data in templates", k)
		}
	}
	if err := authorize(ctx, auth.Provision, ns); err != nil {
		return nil, err
	}

	s.reprovisionMu.Lock()
	defer s.reprovisionMu.Unlock()

	key := m.GetIdempotencyKey()
	if key != "" {
		prev, err := s.jobByKey(ctx, ns, key)
		if err != nil {
			return nil, s.toConnect(err)
		}
		if prev != nil {
			return s.repeatedProvision(ctx, prev, m)
		}
	}

	hw, err := s.findDevice(ctx, ns, m.GetDeviceId())
	if err != nil {
		return nil, err
	}
	mac, err := s.checkProvisionable(ctx, hw, m.GetTemplate())
	if err != nil {
		return nil, err
	}
	suffix, err := jobNameSuffix(key)
	if err != nil {
		return nil, s.toConnect(err)
	}
	name := hw.Name
	if len(name) > maxJobNameHardware {
		name = strings.TrimRight(name[:maxJobNameHardware], "-.")
	}
	wf := newProvisionWorkflow(hw, name+"-"+suffix, m.GetTemplate(), mac, m.GetParameters())
	wf.Annotations = map[string]string{annotationDeviceID: m.GetDeviceId()}
	if key != "" {
		wf.Labels = map[string]string{labelIdempotencyKey: idempotencyDigest(key)}
		wf.Annotations[annotationIdempotencyKey] = key
	}
	if err := model.Validate(wf); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("the job's workflow %s is invalid:\n%w", wf.Key(), err))
	}
	unlock, err := s.admitOne(ctx, wf)
	if err != nil {
		return nil, s.toConnect(err)
	}
	defer unlock()
	obj, err := s.cfg.Store.Create(ctx, wf)
	if errors.Is(err, store.ErrAlreadyExists) {
		// The suffix comes from the key (a digest collision, or a workflow
		// so named by hand) or from chance.
		retry := "try again"
		if key != "" {
			retry = "use another idempotency_key"
		}
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("a workflow %s already exists: %s", wf.Key(), retry))
	}
	if err != nil {
		return nil, s.toConnect(fmt.Errorf("create workflow %s: %w", wf.Key(), err))
	}
	created := obj.(*model.Workflow)
	hw, warnings := s.enableNetboot(ctx, hw, created)
	msg := fmt.Sprintf("job %s created: template %s on hardware %s, which network boots into it next (allowPXE set)",
		jobID(created), created.Spec.TemplateRef, hw.Key())
	if r := hw.Spec.BMCRef; r != nil && r.Name != "" {
		msg += fmt.Sprintf("; its BMC (machine/%s) powers it on to that network boot", r.Name)
	}
	return connect.NewResponse(&v1.ProvisionDeviceResponse{
		JobId:    jobID(created),
		Status:   v1.JobState_JOB_STATE_ACCEPTED,
		Message:  msg,
		Device:   hw.Key(),
		Warnings: warnings,
	}), nil
}

// repeatedProvision answers a ProvisionDevice whose idempotency key made
// prev: prev again if the call asks for what the first one did, else
// ALREADY_EXISTS naming what differs.
func (s *Services) repeatedProvision(ctx context.Context, prev *model.Workflow, m *v1.ProvisionDeviceRequest) (*connect.Response[v1.ProvisionDeviceResponse], error) {
	var diffs []string
	if prev.Spec.TemplateRef != m.GetTemplate() {
		diffs = append(diffs, fmt.Sprintf("template %q, not %q", prev.Spec.TemplateRef, m.GetTemplate()))
	}
	params := maps.Clone(prev.Spec.HardwareMap)
	delete(params, hardwareMapDevice)
	if !maps.Equal(params, m.GetParameters()) {
		diffs = append(diffs, fmt.Sprintf("parameters %s, not %s", formatParams(params), formatParams(m.GetParameters())))
	}
	if dev := m.GetDeviceId(); dev != prev.Annotations[annotationDeviceID] {
		// Another spelling of the same device (its MAC, not its name) is
		// the same call.
		hw, err := s.findDevice(ctx, prev.Namespace, dev)
		if err != nil && connect.CodeOf(err) != connect.CodeNotFound {
			return nil, err
		}
		if hw == nil || hw.Name != prev.Spec.HardwareRef {
			diffs = append(diffs, fmt.Sprintf("device %s, not %q", prev.Spec.HardwareRef, dev))
		}
	}
	if len(diffs) > 0 {
		return nil, connect.NewError(connect.CodeAlreadyExists,
			fmt.Errorf("idempotency_key %q was used for job %s with other arguments: %s; use a new key for a new job",
				m.GetIdempotencyKey(), jobID(prev), strings.Join(diffs, "; ")))
	}
	state := jobState(prev)
	return connect.NewResponse(&v1.ProvisionDeviceResponse{
		JobId:  jobID(prev),
		Status: state,
		Message: fmt.Sprintf("job %s was created by an earlier call with this idempotency_key; nothing changed (it is %s)",
			jobID(prev), jobStateName(state)),
		Device:   prev.Namespace + "/" + prev.Spec.HardwareRef,
		Existing: true,
	}), nil
}

// GetJobStatus returns one job with its actions.
func (j jobService) GetJobStatus(ctx context.Context, req *connect.Request[v1.GetJobStatusRequest]) (*connect.Response[v1.JobStatus], error) {
	wf, err := j.s.job(ctx, req.Msg.GetJobId(), auth.Read)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(jobStatus(wf, true)), nil
}

// ListJobs lists the jobs the caller may read, newest first.
func (j jobService) ListJobs(ctx context.Context, req *connect.Request[v1.ListJobsRequest]) (*connect.Response[v1.ListJobsResponse], error) {
	s := j.s
	m := req.Msg
	if m.GetLimit() < 0 {
		return nil, invalid("limit %d: want 0 (all) or more", m.GetLimit())
	}
	if _, ok := v1.JobState_name[int32(m.GetState())]; !ok {
		return nil, invalid("state %d: not a JobState", m.GetState())
	}
	ns := auth.FromContext(ctx).Scope(m.GetNamespace())
	if err := authorize(ctx, auth.Read, ns); err != nil {
		return nil, err
	}
	var objs []model.Object
	if dev := m.GetDeviceId(); dev != "" {
		hws, err := s.findDevices(ctx, ns, dev)
		if err != nil {
			return nil, s.toConnect(err)
		}
		if len(hws) == 0 {
			return nil, deviceNotFound(ns, dev)
		}
		for _, hw := range hws {
			wfs, err := s.cfg.Store.ByIndex(ctx, model.KindWorkflow, store.IndexHardwareRef, hw.Name)
			if err != nil {
				return nil, s.toConnect(err)
			}
			for _, o := range wfs {
				if o.GetObjectMeta().Namespace == hw.Namespace {
					objs = append(objs, o)
				}
			}
		}
	} else {
		var err error
		if objs, _, err = s.cfg.Store.List(ctx, model.KindWorkflow, store.ListOptions{Namespace: ns}); err != nil {
			return nil, s.toConnect(err)
		}
	}
	var wfs []*model.Workflow
	for _, o := range objs {
		wf := o.(*model.Workflow)
		if !sees(ctx, wf.Namespace) || (m.GetState() != v1.JobState_JOB_STATE_UNSPECIFIED && jobState(wf) != m.GetState()) {
			continue
		}
		wfs = append(wfs, wf)
	}
	slices.SortFunc(wfs, func(a, b *model.Workflow) int {
		if c := timeOf(b.CreationTimestamp).Compare(timeOf(a.CreationTimestamp)); c != 0 {
			return c
		}
		return cmp.Compare(jobID(a), jobID(b))
	})
	if n := int(m.GetLimit()); n > 0 && len(wfs) > n {
		wfs = wfs[:n]
	}
	out := &v1.ListJobsResponse{Jobs: make([]*v1.JobStatus, 0, len(wfs))}
	for _, wf := range wfs {
		out.Jobs = append(out.Jobs, jobStatus(wf, false))
	}
	return connect.NewResponse(out), nil
}

// CancelJob cancels a job through the workflow engine.
func (j jobService) CancelJob(ctx context.Context, req *connect.Request[v1.CancelJobRequest]) (*connect.Response[v1.CancelJobResponse], error) {
	s := j.s
	wf, err := s.job(ctx, req.Msg.GetJobId(), auth.Provision)
	if err != nil {
		return nil, err
	}
	if s.cfg.Engine == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the workflow engine is not running"))
	}
	reason := req.Msg.GetReason()
	if p := auth.FromContext(ctx); p != nil && p.Subject != "" {
		reason = strings.TrimSuffix("by "+p.Subject+": "+reason, ": ")
	}
	cancelled, err := s.cfg.Engine.Cancel(ctx, jobID(wf), workflow.CancelOptions{Force: req.Msg.GetForce(), Reason: reason})
	if errors.Is(err, workflow.ErrEnded) {
		if cancelled != nil {
			wf = cancelled
		}
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("job %s already ended (%s): there is nothing to cancel",
			req.Msg.GetJobId(), jobStateName(jobState(wf))))
	}
	if err != nil {
		return nil, s.toConnect(fmt.Errorf("cancel job %s: %w", req.Msg.GetJobId(), err))
	}
	return connect.NewResponse(&v1.CancelJobResponse{Job: jobStatus(cancelled, true)}), nil
}

// job reads the Workflow of a job the caller may use with perm.
func (s *Services) job(ctx context.Context, id string, perm auth.Permission) (*model.Workflow, error) {
	ns, name, ok := strings.Cut(id, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return nil, invalid("job_id %q: want namespace/name, as ProvisionDevice and ListJobs answer it", id)
	}
	if err := authorize(ctx, perm, ns); err != nil {
		return nil, err
	}
	obj, err := s.cfg.Store.Get(ctx, model.KindWorkflow, ns, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("job %s not found", id))
	}
	if err != nil {
		return nil, s.toConnect(err)
	}
	return obj.(*model.Workflow), nil
}

// jobByKey returns the job of namespace ns that idempotency key made, or nil.
func (s *Services) jobByKey(ctx context.Context, ns, key string) (*model.Workflow, error) {
	objs, _, err := s.cfg.Store.List(ctx, model.KindWorkflow, store.ListOptions{
		Namespace: ns,
		Labels:    labels.FromMap(map[string]string{labelIdempotencyKey: idempotencyDigest(key)}),
	})
	if err != nil {
		return nil, fmt.Errorf("find the job of idempotency key %q: %w", key, err)
	}
	for _, o := range objs {
		if wf := o.(*model.Workflow); wf.Annotations[annotationIdempotencyKey] == key {
			return wf, nil
		}
	}
	return nil, nil
}

// findDevice returns the one Hardware of namespace ns that id names (see
// findDevices), or NOT_FOUND, or FAILED_PRECONDITION when several match.
func (s *Services) findDevice(ctx context.Context, ns, id string) (*model.Hardware, error) {
	hws, err := s.findDevices(ctx, ns, id)
	if err != nil {
		return nil, s.toConnect(err)
	}
	switch len(hws) {
	case 0:
		return nil, deviceNotFound(ns, id)
	case 1:
		return hws[0], nil
	}
	var names []string
	for _, hw := range hws {
		names = append(names, hw.Name)
	}
	return nil, connect.NewError(connect.CodeFailedPrecondition,
		fmt.Errorf("device %q is several Hardware in namespace %s (%s): name one of them", id, ns, strings.Join(names, ", ")))
}

func deviceNotFound(ns, id string) error {
	where := "namespace " + ns
	if ns == "" {
		where = "any namespace you may read"
	}
	return connect.NewError(connect.CodeNotFound,
		fmt.Errorf("device %q not found in %s: no Hardware has that name, MAC or instance ID (anvil get hardware lists them)", id, where))
}

// findDevices returns the Hardware id names in namespace ns (every
// namespace when ns is empty): those named id, else those with the MAC id
// (any spelling macaddr.Parse reads), else those with the instance
// ID id. The first kind of match wins.
func (s *Services) findDevices(ctx context.Context, ns, id string) ([]*model.Hardware, error) {
	st := s.cfg.Store
	var objs []model.Object
	if ns != "" {
		obj, err := st.Get(ctx, model.KindHardware, ns, id)
		if err == nil {
			return []*model.Hardware{obj.(*model.Hardware)}, nil
		}
		if !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrInvalid) {
			return nil, err
		}
	} else {
		var err error
		objs, _, err = st.List(ctx, model.KindHardware, store.ListOptions{
			Fields: []store.FieldRequirement{{Field: "metadata.name", Value: id}},
		})
		if err != nil {
			return nil, err
		}
	}
	inNS := func(objs []model.Object) []*model.Hardware {
		var out []*model.Hardware
		for _, o := range objs {
			if hw := o.(*model.Hardware); ns == "" || hw.Namespace == ns {
				out = append(out, hw)
			}
		}
		return out
	}
	if hws := inNS(objs); len(hws) > 0 {
		return hws, nil
	}
	if mac, err := macaddr.Parse(id); err == nil {
		objs, err := st.ByIndex(ctx, model.KindHardware, store.IndexMAC, mac.String())
		if err != nil {
			return nil, err
		}
		if hws := inNS(objs); len(hws) > 0 {
			return hws, nil
		}
	}
	objs, err := st.ByIndex(ctx, model.KindHardware, store.IndexInstanceID, id)
	if err != nil {
		return nil, err
	}
	return inNS(objs), nil
}

// jobID is a job's ID: its Workflow's "namespace/name".
func jobID(wf *model.Workflow) string { return wf.Namespace + "/" + wf.Name }

// idempotencyDigest is the label value that finds key's job: 32 hex
// digits of its SHA-256.
func idempotencyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:16])
}

// jobNameSuffix is the suffix of a new job's Workflow name: from the
// idempotency key when there is one (a second create of that key fails on
// the name, whatever else happens), else random.
func jobNameSuffix(key string) (string, error) {
	if key != "" {
		return idempotencyDigest(key)[:jobNameSuffixLen], nil
	}
	b := make([]byte, jobNameSuffixLen/2)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random job name: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// jobState maps a Workflow's state to its job's (the table is in
// jobs.proto's JobState).
func jobState(wf *model.Workflow) v1.JobState {
	switch wf.Status.State {
	case "":
		return v1.JobState_JOB_STATE_ACCEPTED
	case model.StatePending:
		return v1.JobState_JOB_STATE_PENDING
	case model.StateRunning:
		if wf.Status.CancelRequested != nil {
			return v1.JobState_JOB_STATE_CANCELLING
		}
		return v1.JobState_JOB_STATE_RUNNING
	case model.StateSuccess:
		return v1.JobState_JOB_STATE_SUCCEEDED
	case model.StateFailed:
		return v1.JobState_JOB_STATE_FAILED
	case model.StateTimeout:
		return v1.JobState_JOB_STATE_TIMEOUT
	case model.StateCancelled:
		return v1.JobState_JOB_STATE_CANCELLED
	}
	return v1.JobState_JOB_STATE_UNSPECIFIED
}

// jobStateName is a JobState without its prefix: "RUNNING".
func jobStateName(s v1.JobState) string { return strings.TrimPrefix(s.String(), "JOB_STATE_") }

// jobStatus converts a job's Workflow; withActions adds every action.
func jobStatus(wf *model.Workflow, withActions bool) *v1.JobStatus {
	st := &wf.Status
	out := &v1.JobStatus{
		JobId:           jobID(wf),
		State:           jobState(wf),
		WorkflowState:   string(st.State),
		Device:          wf.Namespace + "/" + wf.Spec.HardwareRef,
		Template:        wf.Spec.TemplateRef,
		Created:         wire.TimeToProto(wf.CreationTimestamp),
		Started:         wire.TimeToProto(st.StartTime),
		Completed:       wire.TimeToProto(st.CompletionTime),
		CancelRequested: wire.TimeToProto(st.CancelRequested),
		Message:         jobMessage(wf),
		IdempotencyKey:  wf.Annotations[annotationIdempotencyKey],
		Parameters:      wf.Spec.HardwareMap,
	}
	if wf.Spec.HardwareRef == "" {
		out.Device = ""
	}
	if cs := st.CurrentState; cs != nil {
		out.CurrentTask, out.CurrentAction = cs.TaskName, cs.ActionName
		if a := findAction(st, cs.TaskID, cs.ActionID); a != nil {
			out.Progress = wire.ProgressToProto(a.Progress)
		}
	}
	if withActions {
		for _, t := range st.Tasks {
			for _, a := range t.Actions {
				out.Actions = append(out.Actions, &v1.ActionResult{
					Task: t.Name, Name: a.Name, State: string(a.State), Attempt: int32(a.Attempt),
					Started: wire.TimeToProto(a.ExecutionStart), Ended: wire.TimeToProto(a.ExecutionStop),
					Message: a.Message, Progress: wire.ProgressToProto(a.Progress),
				})
			}
		}
	}
	return out
}

// jobMessage says why a job is where it is.
func jobMessage(wf *model.Workflow) string {
	st := &wf.Status
	state := st.State
	if state == model.StateSuccess {
		// Not the last history line: after SUCCESS the engine may still
		// record what it did next (toggleAllowNetboot), which is not why
		// the job is where it is, and would make the message depend on
		// when it is read.
		return "every action succeeded"
	}
	if state.IsFinal() {
		for i := len(st.History) - 1; i >= 0; i-- {
			if h := st.History[i]; h.Type == workflow.HistoryWorkflow && h.State == state && h.Message != "" {
				return h.Message
			}
		}
		return ""
	}
	if c := workflow.FindCondition(st, workflow.ConditionWaiting); c != nil && c.Status == "True" {
		return c.Message
	}
	if c := workflow.PendingBootJob(st); c != nil {
		return "waiting for the BMC: " + c.Message
	}
	cs := st.CurrentState
	switch {
	case state == "":
		return "waiting for the workflow engine to render the template"
	case st.CancelRequested != nil && cs != nil:
		msg := fmt.Sprintf("cancel requested: action %q of task %q finishes first; no further action is handed out", cs.ActionName, cs.TaskName)
		if st.CancelReason != "" {
			msg += "; reason: " + st.CancelReason
		}
		return msg
	case state == model.StateRunning && cs != nil:
		return fmt.Sprintf("action %q of task %q is %s", cs.ActionName, cs.TaskName, cs.State)
	case state == model.StatePending && len(st.Tasks) > 0:
		return fmt.Sprintf("waiting for agent %s to ask for work (the machine's next network boot)", st.Tasks[0].AgentID)
	}
	return ""
}

func findAction(st *model.WorkflowStatus, taskID, actionID string) *model.Action {
	for i := range st.Tasks {
		if st.Tasks[i].ID != taskID {
			continue
		}
		for j := range st.Tasks[i].Actions {
			if a := &st.Tasks[i].Actions[j]; a.ID == actionID {
				return a
			}
		}
	}
	return nil
}

func timeOf(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// formatParams is a parameter map as "{a=1, b=2}", keys sorted.
func formatParams(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
