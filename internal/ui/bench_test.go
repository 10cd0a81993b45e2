package ui_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
)

// benchFleet is the fleet the page benchmarks serve: 10,000 machines in
// 10 racks, one in five with a workflow (failed, running or done).
func benchFleet(b *testing.B) *browser {
	e := newEnv(b)
	var objs []model.Object
	states := []model.State{model.StateFailed, model.StateRunning, model.StateSuccess, model.StateSuccess, model.StateSuccess}
	for i := range 10000 {
		name := fmt.Sprintf("node%05d", i)
		objs = append(objs, hardware("default", name, fmt.Sprintf("52:54:%02x:%02x:%02x:01", i>>16, (i>>8)&0xff, i&0xff),
			fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&0xff, i&0xff), map[string]string{"rack": fmt.Sprint(i % 10)}))
		if i%5 == 0 {
			objs = append(objs, workflow("default", name+"-wf", name, states[(i/5)%len(states)], "step failed"))
		}
	}
	if _, err := e.st.Apply(context.Background(), objs); err != nil {
		b.Fatal(err)
	}
	br := e.browser(b)
	br.login("admin-token")
	waitPage(b, br, "/ui/", "10000 machines by state")
	return br
}

// BenchmarkPages10k measures each page over 10,000 machines, as a
// browser asks for it (HTTP, session check, render).
func BenchmarkPages10k(b *testing.B) {
	br := benchFleet(b)
	for _, path := range []string{"/ui/", "/ui/hardware", "/ui/hardware?page=150", "/ui/hardware?labels=rack%3D3&state=FAILED",
		"/ui/hardware?mac=52:54:00:13:88:01", "/ui/hardware/default/node05000"} {
		b.Run(path, func(b *testing.B) {
			for b.Loop() {
				if resp, _ := br.get(path); resp.StatusCode != http.StatusOK {
					b.Fatalf("GET %s = %d", path, resp.StatusCode)
				}
			}
		})
	}
}

// BenchmarkWorkflowEvent measures a workflow change's way to an open
// event stream: the store's write, its watch, the view, the rendering
// of the fragment and the SSE write, as one op.
func BenchmarkWorkflowEvent(b *testing.B) {
	e := newEnv(b)
	e.setupAcme(b)
	e.create(b, workflow("acme", "w1", "n1", model.StateRunning, ""))
	br := e.browser(b)
	br.login("admin-token")
	waitPage(b, br, "/ui/workflows/acme/w1", "RUNNING")
	req, err := http.NewRequest(http.MethodGet, br.base+"/ui/workflows/acme/w1/events", nil)
	if err != nil {
		b.Fatal(err)
	}
	resp, err := br.c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	next := func() {
		for sc.Scan() {
			if sc.Text() == "" {
				return
			}
		}
		b.Fatalf("event stream ended: %v", sc.Err())
	}
	next() // the first, current state
	for i := 0; b.Loop(); i++ {
		obj, err := e.st.Get(context.Background(), model.KindWorkflow, "acme", "w1")
		if err != nil {
			b.Fatal(err)
		}
		wf := obj.(*model.Workflow)
		wf.Status.Tasks[0].Actions[0].Message = fmt.Sprint("step ", i)
		if _, err := e.st.Update(context.Background(), wf); err != nil {
			b.Fatal(err)
		}
		next()
	}
}
