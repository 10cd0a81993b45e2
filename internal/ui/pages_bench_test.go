package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
)

// BenchmarkJobs10k measures the jobs page over 10,000 workflows (one per
// machine of a 10,000-machine fleet), as a browser asks for it: read
// from the view, sorted newest first, one page rendered.
func BenchmarkJobs10k(b *testing.B) {
	e := newEnv(b)
	var objs []model.Object
	states := []model.State{model.StateFailed, model.StateRunning, model.StateSuccess, model.StateSuccess, model.StateSuccess}
	for i := range 10000 {
		name := fmt.Sprintf("node%05d", i)
		if i < 10 {
			objs = append(objs, hardware("default", name, fmt.Sprintf("52:54:00:00:00:%02x", i), fmt.Sprintf("10.0.0.%d", i+1), nil))
		}
		objs = append(objs, workflow("default", name+"-wf", name, states[i%len(states)], "step failed"))
	}
	if _, err := e.st.Apply(context.Background(), objs); err != nil {
		b.Fatal(err)
	}
	br := e.browser(b)
	br.login("admin-token")
	waitPage(b, br, "/ui/jobs", "10000 jobs")
	for _, path := range []string{"/ui/jobs", "/ui/jobs?page=150", "/ui/jobs?state=FAILED", "/ui/jobs?device=52:54:00:00:00:05"} {
		b.Run(path, func(b *testing.B) {
			for b.Loop() {
				if resp, _ := br.get(path); resp.StatusCode != http.StatusOK {
					b.Fatalf("GET %s = %d", path, resp.StatusCode)
				}
			}
		})
	}
}
