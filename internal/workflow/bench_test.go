package workflow

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store/bolt"
)

const benchTemplate = `version: "0.1"
name: bench
global_timeout: 3600
tasks:
  - name: install
    worker: "{{.device_1}}"
    actions:
%s`

// BenchmarkAgentLoop runs b.N agents in parallel against the controller and a
// bolt store, each through a 5-action workflow: GetAction, report RUNNING,
// report SUCCESS per action. One op is one agent's whole workflow (5
// GetAction + 10 reports). Run the fleet figure with -benchtime=10000x.
func BenchmarkAgentLoop(b *testing.B) {
	ctx := context.Background()
	st, err := bolt.Open(filepath.Join(b.TempDir(), "anvil.db"), bolt.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	var acts strings.Builder
	for i := range 5 {
		fmt.Fprintf(&acts, "      - {name: a%d, image: img, timeout: 600}\n", i)
	}
	data := fmt.Sprintf(benchTemplate, acts.String())
	tmpl := &model.Template{ObjectMeta: model.ObjectMeta{Name: "bench", Namespace: "default"},
		Spec: model.TemplateSpec{Data: &data}}
	if _, err := st.Create(ctx, tmpl); err != nil {
		b.Fatal(err)
	}
	n := b.N
	agent := func(i int) string { return fmt.Sprintf("agent-%06d", i) }
	const batch = 500
	for lo := 0; lo < n; lo += batch {
		var objs []model.Object
		for i := lo; i < min(lo+batch, n); i++ {
			// A worker must be an agent of the workflow's namespace.
			objs = append(objs, &model.Hardware{
				ObjectMeta: model.ObjectMeta{Name: fmt.Sprintf("hw-%06d", i), Namespace: "default"},
				Spec:       model.HardwareSpec{AgentID: agent(i)},
			})
			objs = append(objs, &model.Workflow{
				ObjectMeta: model.ObjectMeta{Name: fmt.Sprintf("wf-%06d", i), Namespace: "default"},
				Spec:       model.WorkflowSpec{TemplateRef: "bench", HardwareMap: map[string]string{"device_1": agent(i)}},
			})
		}
		if _, err := st.Apply(ctx, objs); err != nil {
			b.Fatal(err)
		}
	}
	eng := New(Config{Store: st, Logger: benchLogger()})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(rctx) }()
	defer func() { cancel(); <-done }()
	// Wait until every workflow is rendered (the controller's work, not the
	// agents').
	for i := range n {
		for {
			o, err := st.Get(ctx, model.KindWorkflow, "default", fmt.Sprintf("wf-%06d", i))
			if err != nil {
				b.Fatal(err)
			}
			if o.(*model.Workflow).Status.State != "" {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}

	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := agent(i)
			for range 5 {
				na, err := eng.GetAction(ctx, id, 30*time.Second)
				if err != nil {
					errs <- fmt.Errorf("%s GetAction: %w", id, err)
					return
				}
				for _, s := range []model.State{model.StateRunning, model.StateSuccess} {
					if _, err := eng.ReportActionStatus(ctx, ActionReport{WorkflowID: na.WorkflowID, AgentID: id,
						TaskID: na.TaskID, ActionID: na.ActionID, ActionName: na.Name, State: s}); err != nil {
						errs <- fmt.Errorf("%s report %s %s: %w", id, na.Name, s, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(n*10)/elapsed.Seconds(), "reports/s")
	b.ReportMetric(float64(n*5)/elapsed.Seconds(), "getactions/s")
}

func benchLogger() *slog.Logger {
	if os.Getenv("ANVIL_BENCH_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, nil))
}
