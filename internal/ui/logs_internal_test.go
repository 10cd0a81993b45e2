package ui

import (
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/logstore"
)

// TestLogFeedSkipped: lines past what a stream's subscription holds (its
// reader fell behind) reach the page as a row saying how many were
// skipped and to reload, after the lines that were kept.
func TestLogFeedSkipped(t *testing.T) {
	ls, err := logstore.Open(logstore.Config{Dir: t.TempDir(), FollowLines: 2, SyncInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	pages, err := parsePages()
	if err != nil {
		t.Fatal(err)
	}
	u := &UI{cfg: Config{Records: ls}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), pages: pages}
	feed := u.followLogs(logstore.Selection{WorkflowID: "acme/w1"})
	defer feed.close()
	var lines []logstore.Line
	for i := range 5 {
		lines = append(lines, logstore.Line{WorkflowID: "acme/w1", TaskName: "os", ActionName: "write",
			Time: time.Unix(int64(i), 0), Stream: "stderr", Line: fmt.Sprintf("line %d", i)})
	}
	// One Append, with nobody taking meanwhile: the reader is behind.
	if err := ls.Append(lines...); err != nil {
		t.Fatal(err)
	}
	<-feed.ready()
	w := httptest.NewRecorder()
	if err := feed.next(w); err != nil {
		t.Fatal(err)
	}
	ev := w.Body.String()
	if !strings.HasPrefix(ev, "event: log\n") {
		t.Fatalf("event %q; want a log event", ev)
	}
	i0, i1, skip := strings.Index(ev, "line 0"), strings.Index(ev, "line 1"), strings.Index(ev, "3 lines skipped")
	if i0 < 0 || i1 < i0 || skip < i1 || strings.Contains(ev, "line 2") {
		t.Fatalf("event %q; want lines 0 and 1, then 3 lines skipped", ev)
	}
	if !strings.Contains(ev, "os/write stderr") || !strings.Contains(ev, "Reload") {
		t.Errorf("event %q; want the action tagged stderr and the advice to reload", ev)
	}
}
