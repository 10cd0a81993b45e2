// Package replicas tests Kubernetes mode with several `anvil serve`
// processes on one API server: the leader is killed with SIGKILL in the
// middle of a fleet of simulated agents, and nothing an agent was told is
// lost or done twice. It needs kube-apiserver and etcd (`make kube`); under
// CI=true their absence fails the test.
package replicas

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/deploy/crds"
	"github.com/anvilproj/anvil/deploy/crds/crdstest"
	"github.com/anvilproj/anvil/internal/agentsim"
	"github.com/anvilproj/anvil/internal/benchproc"
	"github.com/anvilproj/anvil/internal/kubetest"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/testtool"
)

const (
	replicas = 3
	// before are the machines whose workflows exist from the start;
	// after, those created once the leader is dead, which only a new
	// leader's engine can render.
	before, after = 60, 15
	actions       = 5
	// actionTime makes a workflow last several seconds, so that the
	// first batch is still running when the Lease changes hands.
	actionTime = time.Second
	// leaseDuration is the replicas' --lease-duration.
	leaseDuration = "3s"

	tinkPath  = "/apis/tinkerbell.org/v1alpha1/namespaces/default/"
	leasePath = "/apis/coordination.k8s.io/v1/namespaces/default/leases/anvil-leader"
)

// TestLeaderKilledMidFleet runs three replicas against one API server and
// a fleet of simulated agents spread over them, each agent failing over
// to the next replica when its own is gone. Once a third of the first
// batch's actions have been acknowledged, the replica holding the leader Lease is killed
// with SIGKILL; then more machines get workflows, which only a new
// leader renders. At the end: another replica holds the Lease; every
// agent finished; every workflow is SUCCESS with each action SUCCESS
// after one attempt, and its history shows one run of each; no action was
// handed out twice (an agent received each once), so none that had been
// acknowledged before the kill was lost and run again.
func TestLeaderKilledMidFleet(t *testing.T) {
	c := kubetest.Start(t)
	defs, err := crds.All()
	if err != nil {
		t.Fatal(err)
	}
	crdstest.Install(t, c, defs)
	kubeconfig := c.WriteKubeconfig(t, t.TempDir())
	bin := buildAnvil(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	servers := make([]*benchproc.Server, replicas)
	for i := range servers {
		s, err := benchproc.Start(ctx, benchproc.Options{Binary: bin, LogLevel: "info",
			Args: []string{"--store", "kubernetes", "--kubeconfig", kubeconfig, "--lease-duration", leaseDuration},
			Env:  []string{fmt.Sprintf("POD_NAME=replica-%d", i)}})
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
		servers[i] = s
		t.Cleanup(func() {
			s.Kill()
			if b, err := os.ReadFile(s.LogPath); err == nil && bytes.Contains(b, []byte("WARNING: DATA RACE")) {
				t.Errorf("replica %d: the race detector reported a data race (log %s)", i, s.LogPath)
			}
			if t.Failed() {
				t.Logf("replica %d's log (%s) ends:\n%s", i, s.LogPath, s.LogTail())
			}
			s.Cleanup(false)
		})
	}
	var first lease
	testtool.WaitFor(t, "a replica to hold the Lease", func() bool {
		first = readLease(t, c)
		return first.Holder != ""
	})
	leaderIdx := replicaOf(t, first.Holder)
	t.Logf("replica %d leads (%s)", leaderIdx, first.Holder)

	createTemplate(t, c)
	for i := range before {
		createMachine(t, c, i)
	}
	waitRendered(t, c, before)

	// The agents: agent i starts on replica i%3 and fails over in turn.
	// The agents of one replica share one failover client, as a set of
	// machines behind one address would.
	rec := newLedger(before * actions / replicas)
	clients := make([]*agentsim.Failover, replicas)
	for i := range clients {
		var hosts []string
		for k := range replicas {
			hosts = append(hosts, servers[(i+k)%replicas].GRPCAddr)
		}
		clients[i] = agentsim.NewFailover(benchproc.NewH2CClient().Transport, hosts...)
	}
	var wg sync.WaitGroup
	results := make([]agentResult, before+after)
	runAgent := func(i int) {
		cl := anvilv1connect.NewAgentServiceClient(&http.Client{Transport: clients[i%replicas]},
			"http://replica.invalid", connect.WithGRPC())
		wg.Go(func() {
			results[i].res, results[i].err = agentsim.Run(ctx, agentsim.Config{
				Client: recorder{cl, rec}, AgentID: mac(i), ActionTime: actionTime, Wait: 5 * time.Second,
				Observe: func(op string, _ time.Duration, err error) {
					if err != nil && connect.CodeOf(err) != connect.CodeNotFound {
						rec.failed(op)
					}
				},
			})
		})
	}
	for i := range before {
		runAgent(i)
	}

	// Kill the leader mid-fleet.
	testtool.Receive(t, rec.reached, "a third of the first batch's actions acknowledged")
	ackedBefore := rec.killed()
	lastSeen := readLease(t, c) // renewed at least this late
	servers[leaderIdx].Kill()
	t.Logf("killed replica %d (the leader) with SIGKILL after %d acknowledged actions", leaderIdx, len(ackedBefore))
	if len(ackedBefore) >= before*actions {
		t.Fatalf("every action was acknowledged before the kill: the fleet was not mid-way")
	}

	// Machines that only a new leader's engine can render.
	for i := before; i < before+after; i++ {
		createMachine(t, c, i)
	}
	for i := before; i < before+after; i++ {
		runAgent(i)
	}

	var next lease
	testtool.WaitFor(t, "another replica to take the Lease", func() bool {
		next = readLease(t, c)
		return next.Holder != "" && next.Holder != first.Holder
	})
	if n := replicaOf(t, next.Holder); n == leaderIdx {
		t.Fatalf("the Lease went to %s, the killed replica's name", next.Holder)
	}
	if next.Transitions <= first.Transitions {
		t.Errorf("leaseTransitions %d after the takeover, %d before: want it higher", next.Transitions, first.Transitions)
	}
	// The Lease's own times (the replicas' clocks: this machine's): no
	// replica took it before the killed leader's term had ended — its
	// fence closes a renew deadline (2/3 of the lease duration) after the
	// start of its last renewal — so no two replicas ever wrote as
	// leaders at once. (client-go waits a whole lease duration from when
	// a candidate last saw the Lease change; that is measured on the
	// candidate's monotonic clock, and a fresh-clone CI run saw the wall
	// times written in the Lease come out 2.84 s apart for a 3 s lease,
	// so the test holds the property that matters, not that one.)
	d, _ := time.ParseDuration(leaseDuration)
	if renewDeadline := d * 2 / 3; next.Acquired.Before(lastSeen.Renewed.Add(renewDeadline)) {
		t.Errorf("the Lease was taken at %s, less than the renew deadline %s after a renewal at %s: the old leader's term may not have ended",
			next.Acquired, renewDeadline, lastSeen.Renewed)
	}
	t.Logf("replica %d took over (%s), %s after the last renewal seen before the kill", replicaOf(t, next.Holder), next.Holder,
		next.Acquired.Sub(lastSeen.Renewed).Round(time.Millisecond))

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	testtool.Receive(t, done, "every agent to finish")

	for i, r := range results {
		if r.err != nil || r.res.WorkflowState != string(model.StateSuccess) || r.res.Actions != actions {
			t.Errorf("agent %s: %d actions, workflow %q, err %v; want %d actions and SUCCESS",
				mac(i), r.res.Actions, r.res.WorkflowState, r.err, actions)
		}
	}
	if h := clients[leaderIdx].Host(); h == servers[leaderIdx].GRPCAddr {
		t.Errorf("the killed replica's agents still talk to it (%s): they never failed over", h)
	}
	for i, s := range servers {
		if i != leaderIdx {
			t.Logf("replica %d: anvil_workflow_stale_handout_total %s (hand-outs held back: its cache was behind)",
				i, metric(t, s.HTTPAddr, "anvil_workflow_stale_handout_total"))
		}
	}
	rec.mu.Lock()
	t.Logf("calls that failed (and were retried): %v", rec.failures)
	if len(rec.failures) == 0 {
		t.Errorf("no agent call failed: the kill cut off none, so it tested nothing")
	}
	rec.mu.Unlock()

	// What each agent was handed, against what it was acknowledged.
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, v := range rec.violations {
		t.Error(v)
	}
	if got := len(rec.handouts); got != (before+after)*actions {
		t.Errorf("%d distinct actions handed out, want %d", got, (before+after)*actions)
	}
	for k, n := range rec.handouts {
		if n != 1 {
			t.Errorf("%s handed out %d times, want once", k, n)
		}
	}

	// What the cluster recorded.
	wfs := listWorkflows(t, c)
	if len(wfs) != before+after {
		t.Fatalf("%d workflows in the cluster, want %d", len(wfs), before+after)
	}
	for _, w := range wfs {
		checkWorkflow(t, w, ackedBefore)
	}
}

type agentResult struct {
	res agentsim.Result
	err error
}

// checkWorkflow: w ended SUCCESS, each action SUCCESS after one attempt;
// its history has one start of the workflow and of each action, and one
// end of each; and each action acknowledged before the kill is there.
func checkWorkflow(t *testing.T, w *model.Workflow, ackedBefore map[string]bool) {
	t.Helper()
	id := w.Namespace + "/" + w.Name
	st := &w.Status
	if st.State != model.StateSuccess {
		t.Errorf("%s: state %s, want SUCCESS", id, st.State)
		return
	}
	if st.HistoryDropped != 0 {
		t.Errorf("%s: %d history entries dropped; the checks below need them all", id, st.HistoryDropped)
	}
	seen := map[string]bool{}
	for _, task := range st.Tasks {
		if len(task.Actions) != actions {
			t.Errorf("%s: %d actions, want %d", id, len(task.Actions), actions)
		}
		for _, a := range task.Actions {
			k := actionKey(id, task.Name, a.Name)
			seen[k] = true
			if a.State != model.StateSuccess || a.Attempt != 1 {
				t.Errorf("%s: %s attempt %d, want SUCCESS at attempt 1", k, a.State, a.Attempt)
			}
		}
	}
	for k := range ackedBefore {
		if strings.HasPrefix(k, id+"/") && !seen[k] {
			t.Errorf("%s: acknowledged SUCCESS before the kill, missing from the workflow", k)
		}
	}
	runs := map[string]int{}
	for _, h := range st.History {
		switch h.Type {
		case "workflow":
			runs["workflow "+string(h.State)]++
		case "action":
			runs[h.Task+"/"+h.Action+" "+string(h.State)]++
		}
	}
	for k, n := range runs {
		if n != 1 {
			t.Errorf("%s: history has %q %d times, want once (a run repeated)", id, k, n)
		}
	}
	want := []string{"workflow RUNNING", "workflow SUCCESS"}
	for a := range actions {
		want = append(want, fmt.Sprintf("install/step-%d RUNNING", a), fmt.Sprintf("install/step-%d SUCCESS", a))
	}
	for _, k := range want {
		if runs[k] == 0 {
			t.Errorf("%s: history has no %q (%v)", id, k, runs)
		}
	}
}

// ---------------------------------------------------------------------------
// What the agents were told

// ledger records, across all agents, each action handed out by GetAction
// and each SUCCESS report acknowledged.
type ledger struct {
	mu         sync.Mutex
	handouts   map[string]int
	acked      map[string]bool
	violations []string
	failures   map[string]int // calls that failed, by operation
	// reached is closed once threshold SUCCESS reports were acknowledged.
	reached   chan struct{}
	threshold int
}

func newLedger(threshold int) *ledger {
	return &ledger{handouts: map[string]int{}, acked: map[string]bool{}, failures: map[string]int{}, reached: make(chan struct{}), threshold: threshold}
}

func (l *ledger) handedOut(k string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.handouts[k]++
	if l.acked[k] {
		l.violations = append(l.violations, fmt.Sprintf("%s handed out again after its SUCCESS was acknowledged", k))
	}
}

func (l *ledger) succeeded(k string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked[k] = true
	if len(l.acked) == l.threshold {
		close(l.reached)
	}
}

func (l *ledger) failed(op string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failures[op]++
}

// killed returns the SUCCESS reports acknowledged so far.
func (l *ledger) killed() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]bool, len(l.acked))
	for k := range l.acked {
		out[k] = true
	}
	return out
}

func actionKey(workflow, task, action string) string { return workflow + "/" + task + "/" + action }

// recorder is an agent's client that tells the ledger what the agent got.
type recorder struct {
	anvilv1connect.AgentServiceClient
	l *ledger
}

func (r recorder) GetAction(ctx context.Context, req *connect.Request[v1.GetActionRequest]) (*connect.Response[v1.GetActionResponse], error) {
	resp, err := r.AgentServiceClient.GetAction(ctx, req)
	if err == nil {
		m := resp.Msg
		r.l.handedOut(actionKey(m.GetWorkflowId(), m.GetTaskName(), m.GetName()))
	}
	return resp, err
}

func (r recorder) ReportActionStatus(ctx context.Context, req *connect.Request[v1.ReportActionStatusRequest]) (*connect.Response[v1.ReportActionStatusResponse], error) {
	resp, err := r.AgentServiceClient.ReportActionStatus(ctx, req)
	if err == nil && req.Msg.GetActionState() == v1.ActionState_ACTION_STATE_SUCCESS {
		// The task's name is not in the report; this template has one.
		r.l.succeeded(actionKey(req.Msg.GetWorkflowId(), "install", req.Msg.GetActionName()))
	}
	return resp, err
}

// ---------------------------------------------------------------------------
// The cluster

// buildAnvil builds cmd/anvil into the test's temporary directory, with
// the race detector when the test has it: the replicas are where the
// concurrency under test is.
func buildAnvil(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "anvil")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./cmd/anvil")...)
	cmd.Dir = testtool.ModuleRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/anvil: %v\n%s", err, out)
	}
	return bin
}

type lease struct {
	Holder      string    `json:"holderIdentity"`
	Transitions int       `json:"leaseTransitions"`
	Acquired    time.Time `json:"acquireTime"`
	Renewed     time.Time `json:"renewTime"`
}

// readLease reads the leader Lease; empty before the first election.
func readLease(t *testing.T, c *kubetest.Cluster) lease {
	t.Helper()
	code, b := c.Do(t, http.MethodGet, leasePath, nil, "application/json")
	if code == http.StatusNotFound {
		return lease{}
	}
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", leasePath, code, b)
	}
	var l struct {
		Spec lease `json:"spec"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	return l.Spec
}

// replicaOf returns which replica a Lease holder is (its POD_NAME).
func replicaOf(t *testing.T, holder string) int {
	t.Helper()
	for i := range replicas {
		if strings.HasPrefix(holder, fmt.Sprintf("replica-%d-", i)) {
			return i
		}
	}
	t.Fatalf("Lease holder %q is none of the replicas", holder)
	return -1
}

// metric reads one unlabelled metric from a replica's /metrics.
func metric(t *testing.T, httpAddr, name string) string {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in the replica's /metrics", name)
	return ""
}

func mac(i int) string { return fmt.Sprintf("02:00:00:00:%02x:%02x", byte(i>>8), byte(i)) }

func createTemplate(t *testing.T, c *kubetest.Cluster) {
	t.Helper()
	var acts strings.Builder
	for a := range actions {
		fmt.Fprintf(&acts, "      - {name: step-%d, image: quay.io/tinkerbell/actions/cexec:v1.0.0, timeout: 60}\n", a)
	}
	c.JSON(t, http.MethodPost, tinkPath+"templates", map[string]any{
		"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Template",
		"metadata": map[string]any{"name": "fleet", "namespace": "default"},
		"spec": map[string]any{"data": "version: \"0.1\"\nname: fleet\nglobal_timeout: 600\ntasks:\n" +
			"  - name: install\n    worker: \"{{.device_1}}\"\n    actions:\n" + acts.String()},
	}, http.StatusCreated)
}

// createMachine creates machine i's Hardware and Workflow as kubectl would.
func createMachine(t *testing.T, c *kubetest.Cluster, i int) {
	t.Helper()
	name := fmt.Sprintf("node-%03d", i)
	c.JSON(t, http.MethodPost, tinkPath+"hardware", map[string]any{
		"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware",
		"metadata": map[string]any{"name": name, "namespace": "default"},
		"spec": map[string]any{
			"interfaces": []any{map[string]any{
				"dhcp": map[string]any{"mac": mac(i), "hostname": name,
					"ip": map[string]any{"address": fmt.Sprintf("10.9.%d.%d", i/250, i%250+2), "netmask": "255.255.0.0"}},
				"netboot": map[string]any{"allowPXE": true, "allowWorkflow": true},
			}},
			"metadata": map[string]any{"instance": map[string]any{"hostname": name, "id": mac(i)}},
		},
	}, http.StatusCreated)
	c.JSON(t, http.MethodPost, tinkPath+"workflows", map[string]any{
		"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Workflow",
		"metadata": map[string]any{"name": name, "namespace": "default"},
		"spec": map[string]any{"templateRef": "fleet", "hardwareRef": name,
			"hardwareMap": map[string]any{"device_1": mac(i)}},
	}, http.StatusCreated)
}

// listWorkflows reads every Workflow from the API server.
func listWorkflows(t *testing.T, c *kubetest.Cluster) []*model.Workflow {
	t.Helper()
	code, b := c.Do(t, http.MethodGet, tinkPath+"workflows", nil, "application/json")
	if code != http.StatusOK {
		t.Fatalf("list workflows: %d %s", code, b)
	}
	var l struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	var out []*model.Workflow
	for _, it := range l.Items {
		obj, err := model.Decode(model.KindWorkflow, it)
		if err != nil {
			t.Fatalf("workflow %.200s: %v", it, err)
		}
		out = append(out, obj.(*model.Workflow))
	}
	return out
}

// waitRendered waits until the leader's engine has rendered n workflows.
func waitRendered(t *testing.T, c *kubetest.Cluster, n int) {
	t.Helper()
	testtool.WaitFor(t, fmt.Sprintf("%d workflows rendered", n), func() bool {
		k := 0
		for _, w := range listWorkflows(t, c) {
			if len(w.Status.Tasks) > 0 {
				k++
			}
		}
		return k == n
	})
}
