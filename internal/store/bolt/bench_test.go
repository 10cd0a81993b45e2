package bolt

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/model"
)

// benchWorkflow returns a workflow of about 3 KB of JSON, like the fleet's.
func benchWorkflow(name string) *model.Workflow {
	w := &model.Workflow{ObjectMeta: model.ObjectMeta{Namespace: "fleet", Name: name,
		Labels: map[string]string{"rack": "r12", "site": "ams1"}}}
	w.Spec.TemplateRef = "ubuntu-2404"
	w.Spec.HardwareRef = "hw-" + name
	w.Spec.HardwareMap = map[string]string{"device_1": "02:00:00:00:00:01"}
	w.Status.State = model.StateRunning
	var actions []model.Action
	for i := range 8 {
		actions = append(actions, model.Action{
			Name: fmt.Sprintf("action-%d", i), Image: "quay.io/tinkerbell/actions/image2disk:v1.0.0",
			Timeout: 600, State: model.StatePending,
			Environment: map[string]string{"DEST_DISK": "/dev/nvme0n1", "IMG_URL": "http://10.1.1.1:8080/ubuntu.raw.gz", "COMPRESSED": "true"},
			Message:     strings.Repeat("x", 40),
		})
	}
	w.Status.Tasks = []model.Task{{Name: "os-installation", AgentID: "02:00:00:00:00:01", Actions: actions}}
	return w
}

func reportWrites(b *testing.B, start time.Time) {
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "writes/s")
}

// BenchmarkCreateParallel: many concurrent callers (64 per GOMAXPROCS)
// creating ~3 KB workflows; group commit turns them into few fsyncs.
func BenchmarkCreateParallel(b *testing.B) {
	s := openTest(b, "", Options{})
	var n atomic.Int64
	b.SetParallelism(512)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Create(b.Context(), benchWorkflow(fmt.Sprintf("wf-%d", n.Add(1)))); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportWrites(b, start)
}

// BenchmarkUpdateParallel: concurrent callers each updating their own
// workflow with its current resourceVersion, as agents' reports do.
func BenchmarkUpdateParallel(b *testing.B) {
	s := openTest(b, "", Options{})
	const par = 512
	b.SetParallelism(par)
	// One object per caller goroutine, created before timing.
	objs := make([]model.Object, par*runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i := range objs {
		wg.Go(func() {
			o, err := s.Create(b.Context(), benchWorkflow(fmt.Sprintf("wf-%d", i)))
			if err != nil {
				b.Error(err)
			}
			objs[i] = o
		})
	}
	wg.Wait()
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		obj := objs[n.Add(1)-1]
		var err error
		i := 0
		for pb.Next() {
			w := obj.(*model.Workflow)
			i++
			w.Status.Tasks[0].Actions[i%8].State = model.StateRunning
			w.Status.Tasks[0].Actions[i%8].Message = fmt.Sprintf("progress %d", i)
			if obj, err = s.Update(b.Context(), w); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportWrites(b, start)
}
