package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// jobsManifest is, in namespace ns, a Hardware node1 (MAC
// 3c:ec:ef:00:<n>:01, instance ID i-<ns>-1, allowPXE false) and a
// Template install of three actions whose first reads the parameter image.
func jobsManifest(ns string, n int) string {
	return fmt.Sprintf(`apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: node1, namespace: %[1]s}
spec:
  metadata: {instance: {id: i-%[1]s-1, hostname: node1}}
  interfaces:
  - dhcp: {mac: "3c:ec:ef:00:%02[2]x:01"}
    netboot: {allowPXE: false, allowWorkflow: true}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: install, namespace: %[1]s}
spec:
  data: |
    version: "0.1"
    name: install
    global_timeout: 600
    tasks:
    - name: os
      worker: "{{.device_1}}"
      actions:
      - name: write
        image: image2disk
        timeout: 60
        environment: {IMG_URL: "{{ index . "image" }}"}
      - name: hostname
        image: writefile
        timeout: 60
      - name: reboot
        image: reboot
        timeout: 30
`, ns, n)
}

// macOf is node1's MAC in jobsManifest(_, n).
func macOf(n int) string { return fmt.Sprintf("3c:ec:ef:00:%02x:01", n) }

// principalHeader carries a test principal, "subject/org/role,role", to
// withTestPrincipal.
const principalHeader = "Test-Principal"

// withTestPrincipal puts the principal principalHeader names into the
// request's context, as the authentication interceptor will.
// headerPrincipal authenticates by the test header "sub/org/role,role";
// a call without it is the anonymous principal.
func headerPrincipal(_ context.Context, h http.Header) (*auth.Principal, error) {
	v := h.Get(principalHeader)
	if v == "" {
		return auth.Anonymous, nil
	}
	f := strings.SplitN(v, "/", 3)
	if len(f) != 3 {
		return nil, errors.New("bad test principal header")
	}
	return &auth.Principal{Subject: f[0], Org: f[1], Roles: strings.Split(f[2], ",")}, nil
}

// by is a request made by the principal who ("" for none).
func by[T any](who string, m *T) *connect.Request[T] {
	r := connect.NewRequest(m)
	if who != "" {
		r.Header().Set(principalHeader, who)
	}
	return r
}

func newJobsEnv(t *testing.T, engine bool, namespaces ...string) *env {
	t.Helper()
	e := newEnv(t, envOptions{engine: engine, configure: func(c *api.Config) { c.Authenticate = headerPrincipal }})
	if len(namespaces) == 0 {
		namespaces = []string{"default"}
	}
	for i, ns := range namespaces {
		if _, err := apply(e, jobsManifest(ns, i+1), false); err != nil {
			t.Fatalf("apply %s: %v", ns, err)
		}
	}
	return e
}

func (e *env) workflows(t *testing.T, ns string) []*model.Workflow {
	t.Helper()
	objs, _, err := e.st.List(context.Background(), model.KindWorkflow, store.ListOptions{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	var out []*model.Workflow
	for _, o := range objs {
		out = append(out, o.(*model.Workflow))
	}
	return out
}

func (e *env) provision(t *testing.T, who string, m *v1.ProvisionDeviceRequest) *v1.ProvisionDeviceResponse {
	t.Helper()
	r, err := e.jobs.ProvisionDevice(context.Background(), by(who, m))
	if err != nil {
		t.Fatalf("ProvisionDevice(%v): %v", m, err)
	}
	return r.Msg
}

func (e *env) status(t *testing.T, id string) *v1.JobStatus {
	t.Helper()
	r, err := e.jobs.GetJobStatus(context.Background(), connect.NewRequest(&v1.GetJobStatusRequest{JobId: id}))
	if err != nil {
		t.Fatalf("GetJobStatus(%s): %v", id, err)
	}
	return r.Msg
}

// waitJob polls a job until cond holds.
func (e *env) waitJob(t *testing.T, id, what string, cond func(*v1.JobStatus) bool) *v1.JobStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := e.status(t, id)
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: timed out waiting for %s; last %v", id, what, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func stateIs(want v1.JobState) func(*v1.JobStatus) bool {
	return func(s *v1.JobStatus) bool { return s.GetState() == want }
}

// nextAction long-polls for agent's next action.
func (e *env) nextAction(t *testing.T, agent string) *v1.GetActionResponse {
	t.Helper()
	for range 20 {
		r, err := e.ag.GetAction(context.Background(), connect.NewRequest(&v1.GetActionRequest{AgentId: agent, Wait: durationpb.New(2 * time.Second)}))
		if connect.CodeOf(err) == connect.CodeNotFound {
			continue
		}
		if err != nil {
			t.Fatalf("GetAction: %v", err)
		}
		return r.Msg
	}
	t.Fatal("GetAction: no action after 20 polls")
	return nil
}

func (e *env) reportAction(t *testing.T, agent string, a *v1.GetActionResponse, st v1.ActionState, p *v1.Progress) string {
	t.Helper()
	r, err := e.ag.ReportActionStatus(context.Background(), connect.NewRequest(&v1.ReportActionStatusRequest{
		WorkflowId: a.GetWorkflowId(), AgentId: agent, TaskId: a.GetTaskId(), ActionId: a.GetActionId(),
		ActionName: a.GetName(), ActionState: st, ExecutionStart: timestamppb.Now(), Message: "test " + st.String(), Progress: p,
	}))
	if err != nil {
		t.Fatalf("ReportActionStatus(%s, %v): %v", a.GetName(), st, err)
	}
	return r.Msg.GetWorkflowState()
}

// TestProvisionDevice: a job for a device named by name, MAC (any
// spelling) or instance ID; its parameters are the workflow's template
// data; netboot is allowed; what cannot be done is refused, creating
// nothing.
func TestProvisionDevice(t *testing.T) {
	for _, tc := range []struct {
		name   string
		device string
	}{
		{name: "hardware name", device: "node1"},
		{name: "MAC", device: macOf(1)},
		{name: "MAC upper case, dashes", device: strings.ToUpper(strings.ReplaceAll(macOf(1), ":", "-"))},
		{name: "MAC dotted", device: "3cec.ef00.0101"},
		{name: "instance ID", device: "i-default-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newJobsEnv(t, true)
			r := e.provision(t, "", &v1.ProvisionDeviceRequest{DeviceId: tc.device, Template: "install",
				Parameters: map[string]string{"image": "http://img/debian.raw"}})
			if r.GetStatus() != v1.JobState_JOB_STATE_ACCEPTED || r.GetDevice() != "default/node1" || r.GetExisting() ||
				!strings.HasPrefix(r.GetJobId(), "default/node1-") {
				t.Fatalf("ProvisionDevice(%s) = %v; want a new ACCEPTED job default/node1-… for default/node1", tc.device, r)
			}
			wfs := e.workflows(t, "default")
			if len(wfs) != 1 {
				t.Fatalf("%d workflows; want 1", len(wfs))
			}
			wf := wfs[0]
			if wf.Spec.HardwareRef != "node1" || wf.Spec.TemplateRef != "install" || wf.Spec.HardwareMap["device_1"] != macOf(1) ||
				wf.Spec.HardwareMap["image"] != "http://img/debian.raw" || !wf.Spec.BootOptions.ToggleAllowNetboot {
				t.Errorf("workflow spec %+v; want node1, install, device_1 its MAC, the image parameter, toggleAllowNetboot", wf.Spec)
			}
			hw, err := e.st.Get(context.Background(), model.KindHardware, "default", "node1")
			if err != nil {
				t.Fatal(err)
			}
			if !model.BoolValue(hw.(*model.Hardware).Spec.Interfaces[0].Netboot.AllowPXE, false) {
				t.Error("allowPXE not set")
			}
			// The engine renders the parameter into the action.
			s := e.waitJob(t, r.GetJobId(), "PENDING", stateIs(v1.JobState_JOB_STATE_PENDING))
			if s.GetParameters()["image"] != "http://img/debian.raw" || len(s.GetActions()) != 3 {
				t.Errorf("status %v; want the image parameter and 3 actions", s)
			}
			if a := e.nextAction(t, macOf(1)); a.GetEnvironment()["IMG_URL"] != "http://img/debian.raw" {
				t.Errorf("first action's IMG_URL = %q; want the parameter", a.GetEnvironment()["IMG_URL"])
			}
		})
	}

	t.Run("refusals", func(t *testing.T) {
		e := newJobsEnv(t, false)
		for _, tc := range []struct {
			name string
			req  *v1.ProvisionDeviceRequest
			code connect.Code
			want string
		}{
			{name: "no device", req: &v1.ProvisionDeviceRequest{Template: "install"},
				code: connect.CodeInvalidArgument, want: "missing device_id"},
			{name: "no template", req: &v1.ProvisionDeviceRequest{DeviceId: "node1"},
				code: connect.CodeInvalidArgument, want: "missing template"},
			{name: "device_1 parameter", req: &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install",
				Parameters: map[string]string{"device_1": "x"}}, code: connect.CodeInvalidArgument, want: `"device_1" is the device's first MAC`},
			{name: "long key", req: &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install",
				IdempotencyKey: strings.Repeat("k", 254)}, code: connect.CodeInvalidArgument, want: "at most 253"},
			{name: "unknown device", req: &v1.ProvisionDeviceRequest{DeviceId: "node9", Template: "install"},
				code: connect.CodeNotFound, want: `device "node9" not found in namespace default`},
			{name: "unknown MAC", req: &v1.ProvisionDeviceRequest{DeviceId: "3c:ec:ef:99:99:99", Template: "install"},
				code: connect.CodeNotFound, want: "not found"},
			{name: "unknown template", req: &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "nope"},
				code: connect.CodeNotFound, want: "template default/nope not found"},
			{name: "other namespace", req: &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install", Namespace: "lab"},
				code: connect.CodeNotFound, want: "namespace lab"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := e.jobs.ProvisionDevice(context.Background(), connect.NewRequest(tc.req))
				if connect.CodeOf(err) != tc.code || err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("ProvisionDevice = %v; want %v containing %q", err, tc.code, tc.want)
				}
			})
		}
		if n := len(e.workflows(t, "")); n != 0 {
			t.Errorf("%d workflows after refusals; want 0", n)
		}
		// An unfinished job keeps the device busy.
		e.provision(t, "", &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install"})
		_, err := e.jobs.ProvisionDevice(context.Background(), connect.NewRequest(&v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install"}))
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "anvil job cancel default/node1-") {
			t.Errorf("second job on a busy device: %v; want FAILED_PRECONDITION naming the way out", err)
		}
	})
}

// TestProvisionIdempotency: one key, one job — retried, raced, and after a
// restart; the same key with other arguments is refused; keys are per
// namespace.
func TestProvisionIdempotency(t *testing.T) {
	ctx := context.Background()
	e := newJobsEnv(t, false, "default", "lab")
	req := func() *v1.ProvisionDeviceRequest {
		return &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install", IdempotencyKey: "order 42/attempt#1 ✓",
			Parameters: map[string]string{"image": "a"}}
	}

	// Concurrent calls with one key: one creates, every one answers it.
	const callers = 12
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ids     = map[string]int{}
		created int
	)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := e.jobs.ProvisionDevice(ctx, connect.NewRequest(req()))
			if err != nil {
				t.Errorf("ProvisionDevice: %v", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[r.Msg.GetJobId()]++
			if !r.Msg.GetExisting() {
				created++
			}
		}()
	}
	wg.Wait()
	if len(ids) != 1 || created != 1 {
		t.Fatalf("%d concurrent calls: job IDs %v, %d created; want one job, created once", callers, ids, created)
	}
	if n := len(e.workflows(t, "default")); n != 1 {
		t.Fatalf("%d workflows; want 1", n)
	}
	var id string
	for k := range ids {
		id = k
	}

	// Retried with another spelling of the same device: the same job.
	again := req()
	again.DeviceId = strings.ToUpper(macOf(1))
	if r := e.provision(t, "", again); r.GetJobId() != id || !r.GetExisting() || r.GetStatus() != v1.JobState_JOB_STATE_ACCEPTED {
		t.Errorf("retry by MAC = %v; want existing job %s, ACCEPTED", r, id)
	}

	// After a restart: a new server process over the same store, over
	// the Connect protocol's JSON.
	svc := api.New(api.Config{Store: e.st})
	mux := http.NewServeMux()
	svc.Mount(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	restarted := anvilv1connect.NewJobServiceClient(srv.Client(), srv.URL, connect.WithProtoJSON())
	r, err := restarted.ProvisionDevice(ctx, connect.NewRequest(req()))
	if err != nil || r.Msg.GetJobId() != id || !r.Msg.GetExisting() {
		t.Errorf("after a restart: %v, %v; want existing job %s", r, err, id)
	}

	// The same key with other arguments.
	for _, tc := range []struct {
		name   string
		change func(*v1.ProvisionDeviceRequest)
		want   string
	}{
		{name: "template", change: func(r *v1.ProvisionDeviceRequest) { r.Template = "other" }, want: `template "install", not "other"`},
		{name: "parameters", change: func(r *v1.ProvisionDeviceRequest) { r.Parameters["image"] = "b" }, want: "parameters {image=a}, not {image=b}"},
		{name: "no parameters", change: func(r *v1.ProvisionDeviceRequest) { r.Parameters = nil }, want: "parameters {image=a}, not {}"},
		{name: "device", change: func(r *v1.ProvisionDeviceRequest) { r.DeviceId = "node2" }, want: `device node1, not "node2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := req()
			tc.change(m)
			_, err := e.jobs.ProvisionDevice(ctx, connect.NewRequest(m))
			if connect.CodeOf(err) != connect.CodeAlreadyExists || !strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), id) {
				t.Errorf("ProvisionDevice = %v; want ALREADY_EXISTS naming job %s and %q", err, id, tc.want)
			}
		})
	}

	// Keys are per namespace.
	lab := req()
	lab.Namespace = "lab"
	if r := e.provision(t, "", lab); r.GetExisting() || !strings.HasPrefix(r.GetJobId(), "lab/") {
		t.Errorf("same key in namespace lab = %v; want a new job there", r)
	}
	if n := len(e.workflows(t, "")); n != 2 {
		t.Errorf("%d workflows; want 2", n)
	}

	// Without an engine there is no cancelling.
	if _, err := e.jobs.CancelJob(ctx, connect.NewRequest(&v1.CancelJobRequest{JobId: id})); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("CancelJob without an engine: %v; want UNAVAILABLE", err)
	}
}

// TestJobLifecycle follows a job from ACCEPTED to SUCCEEDED through the
// agent API, and lists jobs by namespace, device, state and limit.
func TestJobLifecycle(t *testing.T) {
	ctx := context.Background()
	e := newJobsEnv(t, true, "default", "lab")
	agent := macOf(1)
	id := e.provision(t, "", &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install", IdempotencyKey: "k1"}).GetJobId()
	s := e.waitJob(t, id, "PENDING", stateIs(v1.JobState_JOB_STATE_PENDING))
	if s.GetDevice() != "default/node1" || s.GetTemplate() != "install" || s.GetIdempotencyKey() != "k1" ||
		s.GetCreated() == nil || s.GetStarted() != nil || !strings.Contains(s.GetMessage(), "waiting for agent "+agent) {
		t.Errorf("PENDING status %v", s)
	}

	a := e.nextAction(t, agent)
	e.reportAction(t, agent, a, v1.ActionState_ACTION_STATE_RUNNING, nil)
	e.reportAction(t, agent, a, v1.ActionState_ACTION_STATE_RUNNING, &v1.Progress{Bytes: 512, TotalBytes: 1024, BytesPerSec: 64})
	s = e.status(t, id)
	if s.GetState() != v1.JobState_JOB_STATE_RUNNING || s.GetWorkflowState() != "RUNNING" || s.GetCurrentAction() != "write" ||
		s.GetCurrentTask() != "os" || s.GetProgress().GetBytes() != 512 || s.GetProgress().GetBytesPerSec() != 64 || s.GetStarted() == nil {
		t.Errorf("RUNNING status %v; want action write with 512 bytes at 64 B/s", s)
	}
	for _, want := range []string{"write", "hostname", "reboot"} {
		if a.GetName() != want {
			a = e.nextAction(t, agent)
			e.reportAction(t, agent, a, v1.ActionState_ACTION_STATE_RUNNING, nil)
		}
		e.reportAction(t, agent, a, v1.ActionState_ACTION_STATE_SUCCESS, nil)
	}
	s = e.status(t, id)
	if s.GetState() != v1.JobState_JOB_STATE_SUCCEEDED || s.GetCompleted() == nil || s.GetMessage() != "every action succeeded" {
		t.Errorf("final status %v; want SUCCEEDED", s)
	}
	for _, r := range s.GetActions() {
		if r.GetState() != "SUCCESS" || r.GetAttempt() != 1 || r.GetStarted() == nil || r.GetEnded() == nil || r.GetMessage() != "test ACTION_STATE_SUCCESS" {
			t.Errorf("action result %v; want SUCCESS with times and message", r)
		}
	}

	// Two more: one in lab, a newer one in default.
	labID := e.provision(t, "", &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install", Namespace: "lab"}).GetJobId()
	time.Sleep(2 * time.Millisecond) // distinct creation times
	newID := e.provision(t, "", &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install"}).GetJobId()
	for _, tc := range []struct {
		name string
		req  *v1.ListJobsRequest
		want []string
	}{
		{name: "all, newest first", req: &v1.ListJobsRequest{}, want: []string{newID, labID, id}},
		{name: "namespace", req: &v1.ListJobsRequest{Namespace: "lab"}, want: []string{labID}},
		{name: "device by MAC", req: &v1.ListJobsRequest{DeviceId: strings.ToUpper(agent)}, want: []string{newID, id}},
		{name: "device by instance ID", req: &v1.ListJobsRequest{DeviceId: "i-lab-1"}, want: []string{labID}},
		{name: "device by name, all namespaces", req: &v1.ListJobsRequest{DeviceId: "node1"}, want: []string{newID, labID, id}},
		{name: "state", req: &v1.ListJobsRequest{State: v1.JobState_JOB_STATE_SUCCEEDED}, want: []string{id}},
		{name: "limit", req: &v1.ListJobsRequest{Limit: 1}, want: []string{newID}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := e.jobs.ListJobs(ctx, connect.NewRequest(tc.req))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, j := range r.Msg.GetJobs() {
				got = append(got, j.GetJobId())
				if len(j.GetActions()) != 0 {
					t.Errorf("ListJobs carries actions of %s", j.GetJobId())
				}
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("ListJobs(%v) = %v; want %v", tc.req, got, tc.want)
			}
		})
	}
	_, err := e.jobs.ListJobs(ctx, connect.NewRequest(&v1.ListJobsRequest{DeviceId: "node9"}))
	wantCode(t, "ListJobs of an unknown device", err, connect.CodeNotFound)
	_, err = e.jobs.GetJobStatus(ctx, connect.NewRequest(&v1.GetJobStatusRequest{JobId: "default/nope"}))
	wantCode(t, "GetJobStatus of an unknown job", err, connect.CodeNotFound)
	_, err = e.jobs.GetJobStatus(ctx, connect.NewRequest(&v1.GetJobStatusRequest{JobId: "nope"}))
	wantCode(t, "GetJobStatus of a malformed ID", err, connect.CodeInvalidArgument)
}

// TestCancelJob: a job not yet running is CANCELLED at once; a running one
// is CANCELLING until the running action's end is reported, which is
// recorded, and no further action is handed out; an ended one cannot be
// cancelled.
func TestCancelJob(t *testing.T) {
	ctx := context.Background()
	agent := macOf(1)
	cancel := func(t *testing.T, e *env, id string, force bool) *v1.JobStatus {
		t.Helper()
		r, err := e.jobs.CancelJob(ctx, connect.NewRequest(&v1.CancelJobRequest{JobId: id, Force: force, Reason: "test"}))
		if err != nil {
			t.Fatalf("CancelJob(%s): %v", id, err)
		}
		return r.Msg.GetJob()
	}

	t.Run("pending", func(t *testing.T) {
		e := newJobsEnv(t, true)
		id := e.provision(t, "", &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install"}).GetJobId()
		e.waitJob(t, id, "PENDING", stateIs(v1.JobState_JOB_STATE_PENDING))
		if s := cancel(t, e, id, false); s.GetState() != v1.JobState_JOB_STATE_CANCELLED || !strings.Contains(s.GetMessage(), "cancelled before it started; reason: by anonymous: test") {
			t.Fatalf("CancelJob = %v; want CANCELLED with the reason", s)
		}
		_, err := e.ag.GetAction(ctx, connect.NewRequest(&v1.GetActionRequest{AgentId: agent}))
		wantCode(t, "GetAction after the cancel", err, connect.CodeNotFound)
		// The device is free again.
		e.provision(t, "", &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install"})
	})

	t.Run("running", func(t *testing.T) {
		e := newJobsEnv(t, true)
		id := e.provision(t, "", &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install"}).GetJobId()
		a := e.nextAction(t, agent)
		e.reportAction(t, agent, a, v1.ActionState_ACTION_STATE_RUNNING, nil)
		s := cancel(t, e, id, false)
		if s.GetState() != v1.JobState_JOB_STATE_CANCELLING || s.GetCancelRequested() == nil || !strings.Contains(s.GetMessage(), `action "write"`) ||
			!strings.HasSuffix(s.GetMessage(), "; reason: by anonymous: test") {
			t.Fatalf("CancelJob = %v; want CANCELLING, waiting for write", s)
		}
		if ws := e.reportAction(t, agent, a, v1.ActionState_ACTION_STATE_SUCCESS, nil); ws != string(model.StateCancelled) {
			t.Fatalf("end report answered %q; want CANCELLED", ws)
		}
		_, err := e.ag.GetAction(ctx, connect.NewRequest(&v1.GetActionRequest{AgentId: agent}))
		wantCode(t, "GetAction after the end report", err, connect.CodeNotFound)
		s = e.status(t, id)
		var got []string
		for _, r := range s.GetActions() {
			got = append(got, r.GetState())
		}
		if s.GetState() != v1.JobState_JOB_STATE_CANCELLED || strings.Join(got, " ") != "SUCCESS PENDING PENDING" {
			t.Errorf("status %v, actions %v; want CANCELLED, write SUCCESS and the rest never run", s.GetState(), got)
		}
		if want := `cancelled after action "write" of task "os" succeeded; reason: by anonymous: test`; s.GetMessage() != want {
			t.Errorf("message %q; want %q", s.GetMessage(), want)
		}
		// Cancelling again is not an error.
		if s := cancel(t, e, id, false); s.GetState() != v1.JobState_JOB_STATE_CANCELLED {
			t.Errorf("second CancelJob = %v; want CANCELLED", s)
		}
	})

	t.Run("forced", func(t *testing.T) {
		e := newJobsEnv(t, true)
		id := e.provision(t, "", &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install"}).GetJobId()
		a := e.nextAction(t, agent)
		e.reportAction(t, agent, a, v1.ActionState_ACTION_STATE_RUNNING, nil)
		s := cancel(t, e, id, true)
		if s.GetState() != v1.JobState_JOB_STATE_CANCELLED || s.GetActions()[0].GetState() != string(model.StateCancelled) {
			t.Fatalf("forced CancelJob = %v; want the job and its running action CANCELLED", s)
		}
		// The agent's late end report is acknowledged with CANCELLED.
		if ws := e.reportAction(t, agent, a, v1.ActionState_ACTION_STATE_SUCCESS, nil); ws != string(model.StateCancelled) {
			t.Errorf("late end report answered %q; want CANCELLED", ws)
		}
	})

	t.Run("ended", func(t *testing.T) {
		e := newJobsEnv(t, true)
		id := e.provision(t, "", &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install"}).GetJobId()
		a := e.nextAction(t, agent)
		e.reportAction(t, agent, a, v1.ActionState_ACTION_STATE_FAILED, nil)
		_, err := e.jobs.CancelJob(ctx, connect.NewRequest(&v1.CancelJobRequest{JobId: id}))
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "already ended (FAILED)") {
			t.Errorf("CancelJob of a FAILED job: %v; want FAILED_PRECONDITION", err)
		}
		_, err = e.jobs.CancelJob(ctx, connect.NewRequest(&v1.CancelJobRequest{JobId: "default/nope"}))
		wantCode(t, "CancelJob of an unknown job", err, connect.CodeNotFound)
	})
}

// TestJobsAuthorization: a caller of organisation a cannot provision, read,
// list or cancel organisation b's jobs — by name, MAC, instance ID or job
// ID — and is told nothing about them; a viewer reads but does not
// provision; an admin sees every organisation.
func TestJobsAuthorization(t *testing.T) {
	ctx := context.Background()
	e := newJobsEnv(t, true, "a", "b")
	const (
		operatorA = "alice/a/operator"
		viewerA   = "victor/a/viewer"
		operatorB = "bob/b/operator"
		admin     = "root//admin"
	)
	bJob := e.provision(t, operatorB, &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install", IdempotencyKey: "b-key"}).GetJobId()
	aJob := e.provision(t, operatorA, &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install"}).GetJobId()
	if !strings.HasPrefix(bJob, "b/") || !strings.HasPrefix(aJob, "a/") {
		t.Fatalf("jobs %s, %s; want each in its caller's organisation", aJob, bJob)
	}
	bName := strings.TrimPrefix(bJob, "b/")

	denied := func(code connect.Code) bool {
		return code == connect.CodePermissionDenied || code == connect.CodeNotFound
	}
	for _, tc := range []struct {
		name string
		call func() error
		// want is the code; 0 for PERMISSION_DENIED or NOT_FOUND.
		want connect.Code
	}{
		{name: "provision b's device by name in b", call: func() error {
			_, err := e.jobs.ProvisionDevice(ctx, by(operatorA, &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install", Namespace: "b"}))
			return err
		}, want: connect.CodePermissionDenied},
		{name: "provision b's device by MAC", call: func() error {
			_, err := e.jobs.ProvisionDevice(ctx, by(operatorA, &v1.ProvisionDeviceRequest{DeviceId: macOf(2), Template: "install"}))
			return err
		}, want: connect.CodeNotFound},
		{name: "provision b's device by instance ID", call: func() error {
			_, err := e.jobs.ProvisionDevice(ctx, by(operatorA, &v1.ProvisionDeviceRequest{DeviceId: "i-b-1", Template: "install"}))
			return err
		}, want: connect.CodeNotFound},
		{name: "provision with b's idempotency key in b", call: func() error {
			_, err := e.jobs.ProvisionDevice(ctx, by(operatorA, &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install",
				Namespace: "b", IdempotencyKey: "b-key"}))
			return err
		}, want: connect.CodePermissionDenied},
		{name: "get b's job", call: func() error {
			_, err := e.jobs.GetJobStatus(ctx, by(operatorA, &v1.GetJobStatusRequest{JobId: bJob}))
			return err
		}, want: connect.CodePermissionDenied},
		{name: "get b's job by its name in a", call: func() error {
			_, err := e.jobs.GetJobStatus(ctx, by(operatorA, &v1.GetJobStatusRequest{JobId: "a/" + bName}))
			return err
		}, want: connect.CodeNotFound},
		{name: "cancel b's job", call: func() error {
			_, err := e.jobs.CancelJob(ctx, by(operatorA, &v1.CancelJobRequest{JobId: bJob}))
			return err
		}, want: connect.CodePermissionDenied},
		{name: "list b's namespace", call: func() error {
			_, err := e.jobs.ListJobs(ctx, by(operatorA, &v1.ListJobsRequest{Namespace: "b"}))
			return err
		}, want: connect.CodePermissionDenied},
		{name: "list b's device by MAC", call: func() error {
			_, err := e.jobs.ListJobs(ctx, by(operatorA, &v1.ListJobsRequest{DeviceId: macOf(2)}))
			return err
		}, want: connect.CodeNotFound},
		{name: "viewer provisions in its own organisation", call: func() error {
			_, err := e.jobs.ProvisionDevice(ctx, by(viewerA, &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install"}))
			return err
		}, want: connect.CodePermissionDenied},
		{name: "viewer cancels in its own organisation", call: func() error {
			_, err := e.jobs.CancelJob(ctx, by(viewerA, &v1.CancelJobRequest{JobId: aJob}))
			return err
		}, want: connect.CodePermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			code := connect.CodeOf(err)
			if err == nil || (tc.want != 0 && code != tc.want) || !denied(code) {
				t.Fatalf("err = %v (%v); want %v", err, code, tc.want)
			}
			// Nothing of b's leaks into the answer: b's Hardware, or its
			// job when the caller did not name it.
			if strings.Contains(err.Error(), "b/node1") || strings.Contains(err.Error(), bName) && !strings.Contains(tc.name, "job") {
				t.Errorf("the refusal %q names b's objects", err)
			}
		})
	}
	// Refused calls changed nothing of b's.
	if s := e.status(t, bJob); s.GetState() == v1.JobState_JOB_STATE_CANCELLED || s.GetState() == v1.JobState_JOB_STATE_CANCELLING {
		t.Errorf("b's job is %v after a's cancel", s.GetState())
	}
	if n := len(e.workflows(t, "b")); n != 1 {
		t.Errorf("b has %d workflows; want 1", n)
	}

	list := func(who string, req *v1.ListJobsRequest) []string {
		t.Helper()
		r, err := e.jobs.ListJobs(ctx, by(who, req))
		if err != nil {
			t.Fatalf("ListJobs as %s: %v", who, err)
		}
		var ids []string
		for _, j := range r.Msg.GetJobs() {
			ids = append(ids, j.GetJobId())
		}
		return ids
	}
	if got := list(operatorA, &v1.ListJobsRequest{}); len(got) != 1 || got[0] != aJob {
		t.Errorf("a's list = %v; want only %s", got, aJob)
	}
	if got := list(viewerA, &v1.ListJobsRequest{DeviceId: "node1"}); len(got) != 1 || got[0] != aJob {
		t.Errorf("a's viewer's list of node1 = %v; want only %s", got, aJob)
	}
	if got := list(admin, &v1.ListJobsRequest{}); len(got) != 2 {
		t.Errorf("admin's list = %v; want both organisations' jobs", got)
	}
	if _, err := e.jobs.GetJobStatus(ctx, by(viewerA, &v1.GetJobStatusRequest{JobId: aJob})); err != nil {
		t.Errorf("viewer reads its organisation's job: %v", err)
	}
	if _, err := e.jobs.CancelJob(ctx, by(operatorA, &v1.CancelJobRequest{JobId: aJob})); err != nil {
		t.Errorf("operator cancels its organisation's job: %v", err)
	}
}
