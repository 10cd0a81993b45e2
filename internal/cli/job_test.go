package cli

import (
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
)

// TestJobCommands: provision by MAC with parameters and a key, a retry
// that answers the same job, status, list, cancel (job and workflow), and
// workflow watch's exit code for a cancelled workflow.
func TestJobCommands(t *testing.T) {
	srv := startServer(t)
	mustRun(t, srv, "apply", "-f", filepath.Join(examples, "hardware.yaml"), "-f", filepath.Join(examples, "template.yaml"))

	out := mustRun(t, srv, "job", "provision", "3C-EC-EF-12-34-07", "-t", "debian-raw", "--param", "image=http://img/x.raw",
		"-p", "note=a=b", "--idempotency-key", "order-4711")
	m := regexp.MustCompile(`job (default/rack1-node07-[0-9a-f]+) ACCEPTED`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "follow it: anvil job status "+m[1]) {
		t.Fatalf("job provision printed:\n%s\nwant the new job ACCEPTED and how to follow it", out)
	}
	id := m[1]
	name := strings.TrimPrefix(id, "default/")

	// A retry answers the same job.
	again := mustRun(t, srv, "job", "provision", "rack1-node07", "-t", "debian-raw", "-p", "image=http://img/x.raw",
		"-p", "note=a=b", "--idempotency-key", "order-4711")
	if !strings.Contains(again, "job "+id+" ") || !strings.Contains(again, "earlier call with this idempotency_key") {
		t.Errorf("retry printed:\n%s\nwant job %s again", again, id)
	}
	if _, _, err := run(t, srv, "job", "provision", "rack1-node07", "-t", "debian-raw", "--idempotency-key", "order-4711"); err == nil ||
		!strings.Contains(err.Error(), "with other arguments") {
		t.Errorf("same key, other parameters: %v; want a refusal", err)
	}

	status := mustRun(t, srv, "job", "status", name)
	for _, want := range []string{"Job:", id, "Device:", "default/rack1-node07", "Template:", "debian-raw",
		"Idempotency key:", "order-4711", "device_1=3c:ec:ef:12:34:07 image=http://img/x.raw note=a=b"} {
		if !strings.Contains(status, want) {
			t.Errorf("job status lacks %q:\n%s", want, status)
		}
	}
	var js v1.JobStatus
	if err := protojson.Unmarshal([]byte(mustRun(t, srv, "job", "status", id, "-o", "json")), &js); err != nil {
		t.Fatalf("job status -o json: %v", err)
	}
	if js.GetJobId() != id || js.GetTemplate() != "debian-raw" {
		t.Errorf("job status -o json = %v", &js)
	}

	list := mustRun(t, srv, "job", "list", "--device", "3c:ec:ef:12:34:07")
	if !strings.Contains(list, "JOB") || !strings.Contains(list, id) {
		t.Errorf("job list:\n%s\nwant a table with %s", list, id)
	}
	if _, _, err := run(t, srv, "job", "list", "--state", "bogus"); err == nil || !strings.Contains(err.Error(), "want one of accepted, pending") {
		t.Errorf("job list --state bogus: %v; want the states", err)
	}

	if out := mustRun(t, srv, "job", "cancel", name, "--reason", "wrong image"); !strings.Contains(out, "job "+id+" CANCELLED") ||
		!strings.Contains(out, "wrong image") {
		t.Errorf("job cancel printed:\n%s\nwant CANCELLED with the reason", out)
	}
	if got := mustRun(t, srv, "job", "list", "--state", "cancelled"); !strings.Contains(got, id) {
		t.Errorf("job list --state cancelled:\n%s\nwant %s", got, id)
	}
	var exit *ExitError
	if _, _, err := run(t, srv, "workflow", "watch", name); !errors.As(err, &exit) || exit.Code != ExitWorkflowCancelled {
		t.Errorf("workflow watch of a cancelled workflow: %v; want exit code %d", err, ExitWorkflowCancelled)
	}

	// workflow cancel: the same for a workflow made another way.
	mustRun(t, srv, "reprovision", "rack1-node07", "-t", "debian-raw", "--name", "again")
	if out := mustRun(t, srv, "workflow", "cancel", "again"); !strings.Contains(out, "job default/again CANCELLED") {
		t.Errorf("workflow cancel printed:\n%s", out)
	}
	if w := getObject[model.Workflow](t, srv, "workflow", "again"); w.Status.State != model.StateCancelled {
		t.Errorf("workflow again is %q; want CANCELLED", w.Status.State)
	}
	if _, _, err := run(t, srv, "job", "cancel", "nope"); err == nil || !strings.Contains(err.Error(), "job default/nope not found") {
		t.Errorf("job cancel nope: %v; want not found", err)
	}
}
