package ui_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/logstore"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/testtool"
	"github.com/anvilproj/anvil/internal/ui"
)

// eventStream opens path's event stream as b and returns its events (the
// text of each, "event: …\ndata: …\n") and the function that closes it.
func eventStream(t testing.TB, b *browser, path string) (<-chan string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.base+path, nil)
	resp, err := b.c.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		cancel()
		resp.Body.Close()
		t.Fatalf("GET %s = %d %q; want 200 text/event-stream", path, resp.StatusCode, ct)
	}
	events := make(chan string, 100)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		var ev strings.Builder
		for sc.Scan() {
			switch {
			case sc.Text() == "":
				if ev.Len() > 0 {
					events <- ev.String()
				}
				ev.Reset()
			case strings.HasPrefix(sc.Text(), ":"): // keep-alive
			default:
				ev.WriteString(sc.Text() + "\n")
			}
		}
	}()
	closed := false
	stop := func() {
		if !closed {
			closed = true
			cancel()
			resp.Body.Close()
		}
	}
	t.Cleanup(stop)
	return events, stop
}

// nextEvent returns the next event of type name, skipping others.
func nextEvent(t testing.TB, events <-chan string, name, what string) string {
	t.Helper()
	for {
		ev := testtool.Receive(t, events, what)
		if ev == "" {
			t.Fatalf("the stream ended waiting for %s", what)
		}
		if strings.HasPrefix(ev, "event: "+name+"\n") {
			return ev
		}
	}
}

func appendLog(t testing.TB, ls *logstore.Store, lines ...logstore.Line) {
	t.Helper()
	if err := ls.Append(lines...); err != nil {
		t.Fatalf("Append: %v", err)
	}
}

var logT0 = time.Date(2026, 11, 28, 9, 30, 0, 0, time.UTC)

func agentLine(wf, action, text string, i int) logstore.Line {
	return logstore.Line{WorkflowID: wf, AgentID: "52:54:00:0a:00:01", TaskName: "os", ActionName: action,
		Time: logT0.Add(time.Duration(i) * time.Second), Stream: "stdout", Line: text}
}

// TestWorkflowLogLive: the workflow page shows its agent's lines by
// task/action, escaped; its one event stream then carries each line
// appended after it opened, as a "log" event, within the test's bound.
func TestWorkflowLogLive(t *testing.T) {
	e := newEnv(t)
	e.setupAcme(t)
	e.create(t, workflow("acme", "w1", "n1", model.StateRunning, ""))
	appendLog(t, e.logs,
		agentLine("acme/w1", "write", "writing /etc/hostname", 0),
		agentLine("acme/w1", "write", "<script>alert(1)</script>", 1),
		agentLine("acme/other", "write", "another workflow's line", 2))
	b := e.browser(t)
	b.login("viewer-token")
	waitPage(t, b, "/ui/workflows/acme/w1", "RUNNING")
	_, page := b.get("/ui/workflows/acme/w1")
	for _, want := range []string{`<td>os/write</td><td class="line">writing /etc/hostname</td>`,
		`&lt;script&gt;alert(1)&lt;/script&gt;`, `id="log-lines" data-keep="1000">`} {
		if !strings.Contains(page, want) {
			t.Errorf("workflow page lacks %s", want)
		}
	}
	for _, bad := range []string{"<script>alert", "another workflow's line"} {
		if strings.Contains(page, bad) {
			t.Errorf("workflow page holds %q", bad)
		}
	}
	if strings.Count(page, "data-events=") != 1 {
		t.Errorf("workflow page names %d event streams; want one", strings.Count(page, "data-events="))
	}

	events, _ := eventStream(t, b, "/ui/workflows/acme/w1/events")
	if ev := testtool.Receive(t, events, "the first event"); !strings.HasPrefix(ev, "event: actions\n") {
		t.Fatalf("first event %q; want the progress", ev)
	}
	reset := nextEvent(t, events, "logs", "the log's tail")
	if !strings.Contains(reset, "writing /etc/hostname") || strings.Contains(reset, "<script>") {
		t.Errorf("logs event %q; want the tail, escaped", reset)
	}
	appendLog(t, e.logs, agentLine("acme/other", "write", "not this one", 3),
		agentLine("acme/w1", "write", `wrote 6 bytes to "/etc/hostname" <b>`, 4))
	ev := nextEvent(t, events, "log", "the appended line")
	if !strings.Contains(ev, `wrote 6 bytes to &#34;/etc/hostname&#34; &lt;b&gt;`) {
		t.Errorf("log event %q; want the new line, escaped", ev)
	}
	if strings.Contains(ev, "not this one") || strings.Contains(ev, "writing /etc/hostname") {
		t.Errorf("log event %q holds another workflow's line or an old one", ev)
	}
}

// TestHardwareRecordLive: a machine's page follows its record (DHCP and
// the rest) and its agent's lines on its own stream; another machine's
// lines do not come, another organisation's machine has no stream.
func TestHardwareRecordLive(t *testing.T) {
	e := newEnv(t)
	e.setupAcme(t)
	e.create(t, hardware("globex", "g1", "52:54:00:0b:00:01", "10.0.2.1", nil))
	appendLog(t, e.logs, logstore.Line{HardwareID: "acme/n1", Time: logT0, Stream: "dhcp", Line: "DISCOVER from 52:54:00:0a:00:01: OFFER 10.0.1.11"})
	b := e.browser(t)
	b.login("viewer-token")
	waitPage(t, b, "/ui/hardware/acme/n1", "OFFER 10.0.1.11")
	_, page := b.get("/ui/hardware/acme/n1")
	if !strings.Contains(page, `data-events="/ui/hardware/acme/n1/events"`) {
		t.Errorf("machine page does not name its event stream")
	}
	if resp, _ := b.get("/ui/hardware/globex/g1/events"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("events of another organisation's machine = %d; want 404", resp.StatusCode)
	}

	events, _ := eventStream(t, b, "/ui/hardware/acme/n1/events")
	if ev := nextEvent(t, events, "logs", "the record's tail"); !strings.Contains(ev, "OFFER 10.0.1.11") {
		t.Errorf("logs event %q; want the record's tail", ev)
	}
	appendLog(t, e.logs, logstore.Line{HardwareID: "acme/n2", Time: logT0, Stream: "dhcp", Line: "someone else"},
		logstore.Line{HardwareID: "acme/n1", Time: logT0.Add(time.Second), Stream: "tftp", Line: "RRQ ipxe.efi: sent 1,024 bytes"})
	ev := nextEvent(t, events, "log", "the appended record line")
	if !strings.Contains(ev, "<td>tftp</td><td class=\"line\">RRQ ipxe.efi") || strings.Contains(ev, "someone else") {
		t.Errorf("log event %q; want n1's tftp line only", ev)
	}
	// Its agent's lines (agent ID: its first MAC) are part of its record.
	appendLog(t, e.logs, agentLine("acme/w9", "write", "agent says hi", 2))
	if ev := nextEvent(t, events, "log", "the agent's line"); !strings.Contains(ev, "<td>os/write</td><td class=\"line\">agent says hi") {
		t.Errorf("log event %q; want the agent's line tagged os/write", ev)
	}
}

// TestLogStreamsReleased: closed streams give their subscriptions back
// and end their goroutines; past the store's bound a page is told its
// log is not live instead of being refused.
func TestLogStreamsReleased(t *testing.T) {
	var ls *logstore.Store
	e := newEnvWith(t, false, func(c *ui.Config) {
		var err error
		ls, err = logstore.Open(logstore.Config{Dir: filepath.Join(t.TempDir(), "logs"), MaxFollowers: 3,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ls.Close() })
		c.Records = ls
	})
	e.setupAcme(t)
	e.create(t, workflow("acme", "w1", "n1", model.StateRunning, ""))
	appendLog(t, ls, agentLine("acme/w1", "write", "first", 0))
	b := e.browser(t)
	b.login("viewer-token")
	waitPage(t, b, "/ui/workflows/acme/w1", "RUNNING")
	// Let the client's idle connections settle before counting.
	b.get("/ui/workflows/acme/w1")
	before := runtime.NumGoroutine()

	for round := range 3 {
		var stops []func()
		var streams []<-chan string
		for i := range 3 {
			path := "/ui/workflows/acme/w1/events"
			if i == 0 {
				path = "/ui/hardware/acme/n1/events"
			}
			events, stop := eventStream(t, b, path)
			nextEvent(t, events, "logs", "a stream's start")
			stops, streams = append(stops, stop), append(streams, events)
		}
		// A fourth page is told why its log is not live.
		events, stop := eventStream(t, b, "/ui/workflows/acme/w1/events")
		if ev := nextEvent(t, events, "logs", "the fourth stream's start"); !strings.Contains(ev, "too many pages") {
			t.Errorf("round %d: fourth stream's logs event %q; want the note that it is not live", round, ev)
		}
		stop()
		line := fmt.Sprintf("round %d", round)
		appendLog(t, ls, agentLine("acme/w1", "write", line, round+1))
		for _, events := range streams {
			if ev := nextEvent(t, events, "log", "the round's line"); !strings.Contains(ev, line) {
				t.Errorf("round %d: log event %q; want %q", round, ev, line)
			}
		}
		for _, stop := range stops {
			stop()
		}
		// The next round opens three again: only possible if these
		// three gave their subscriptions back.
		testtool.WaitFor(t, "the closed streams' subscriptions to be released", func() bool {
			sub, _, err := ls.Follow(logstore.Selection{WorkflowID: "acme/w1"}, 1)
			if err != nil {
				return false
			}
			sub.Close()
			return true
		})
	}
	testtool.WaitFor(t, "the streams' goroutines to end", func() bool {
		return runtime.NumGoroutine() <= before
	})
}

// BenchmarkLogEvent measures a log line's way to an open page: the log
// store's Append, the Subscription's poke, the stream's Take, the
// rendering of the row and the SSE write, as one op.
func BenchmarkLogEvent(b *testing.B) {
	e := newEnv(b)
	e.setupAcme(b)
	e.create(b, workflow("acme", "w1", "n1", model.StateRunning, ""))
	br := e.browser(b)
	br.login("admin-token")
	waitPage(b, br, "/ui/workflows/acme/w1", "RUNNING")
	events, _ := eventStream(b, br, "/ui/workflows/acme/w1/events")
	nextEvent(b, events, "actions", "the first event")
	for i := 0; b.Loop(); i++ {
		appendLog(b, e.logs, agentLine("acme/w1", "write", fmt.Sprint("step ", i), i))
		nextEvent(b, events, "log", "the line's event")
	}
}
