package ui

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// sseKeepAlive is how often an idle event stream sends a comment, so a
// proxy between the browser and the server does not cut it as idle.
const sseKeepAlive = 25 * time.Second

// eventStream is one open Server-Sent Events answer: the one place that
// writes its header, its events and its keep-alive comments, and that
// decides when it ends (the browser goes away, or the server stops:
// Stop). The workflow, machine record and power streams share it.
type eventStream struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	tick   *time.Ticker
	ctx    context.Context
	cancel context.CancelFunc
}

// openEvents answers r with an event stream. Close it when done.
func (u *UI) openEvents(w http.ResponseWriter, r *http.Request) *eventStream {
	ctx, cancel := context.WithCancel(r.Context())
	es := &eventStream{w: w, rc: http.NewResponseController(w), tick: time.NewTicker(sseKeepAlive), ctx: ctx, cancel: cancel}
	// The server's Stop ends every stream, so a graceful shutdown does
	// not wait for open browser tabs.
	go func() {
		select {
		case <-u.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	return es
}

// close releases the stream's ticker and watcher.
func (es *eventStream) close() {
	es.tick.Stop()
	es.cancel()
}

// done is closed when the stream must end.
func (es *eventStream) done() <-chan struct{} { return es.ctx.Done() }

// keepAlive ticks when a keep-alive comment is due: call ping.
func (es *eventStream) keepAlive() <-chan time.Time { return es.tick.C }

// ping sends a keep-alive comment.
func (es *eventStream) ping() error {
	fmt.Fprint(es.w, ": keep-alive\n\n")
	return es.flush()
}

// send writes one event and flushes it to the browser.
func (es *eventStream) send(event, data string) error {
	writeEvent(es.w, event, data)
	return es.flush()
}

// flush sends what was written; an error means the browser is gone.
func (es *eventStream) flush() error { return es.rc.Flush() }

// writeEvent writes one SSE event; each line of data is a "data:" field
// (the browser joins them with newlines).
func writeEvent(w http.ResponseWriter, event, data string) {
	var b strings.Builder
	b.WriteString("event: " + event + "\n")
	for line := range strings.SplitSeq(data, "\n") {
		b.WriteString("data: " + strings.TrimSuffix(line, "\r") + "\n")
	}
	b.WriteString("\n")
	_, _ = w.Write([]byte(b.String()))
}
