package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
)

const (
	// maxQueuedLines bounds the lines waiting for the server while it is
	// unreachable; beyond it the oldest are dropped and counted.
	maxQueuedLines = 20000
	// linesPerCall is how many lines one StreamLogs call carries.
	linesPerCall = 500
	// gatherDelay lets a burst of lines go out in one call.
	gatherDelay = 50 * time.Millisecond
)

// logShipper streams output lines to the server in the background. Lines
// leave the queue only once the server has accepted them, so a server
// restart loses none (a call that failed half-way may send some twice).
type logShipper struct {
	servers *servers
	agentID string
	console *console
	bo      backoff
	now     func() time.Time

	mu      sync.Mutex
	queue   []*v1.LogLine
	dropped int
	busy    bool // a call is in flight
	idle    chan struct{}
	wake    chan struct{}
}

func newLogShipper(srv *servers, agentID string, con *console, bo backoff, now func() time.Time) *logShipper {
	return &logShipper{servers: srv, agentID: agentID, console: con, bo: bo, now: now, wake: make(chan struct{}, 1)}
}

// add queues a line.
func (s *logShipper) add(l *v1.LogLine) {
	s.mu.Lock()
	if len(s.queue) >= maxQueuedLines {
		s.queue = s.queue[1:]
		s.dropped++
	}
	s.queue = append(s.queue, l)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run ships queued lines until ctx ends.
func (s *logShipper) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		t := time.NewTimer(gatherDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		for s.shipOnce(ctx) {
		}
	}
}

// shipOnce sends one batch; it reports whether more lines wait (and the
// last call succeeded).
func (s *logShipper) shipOnce(ctx context.Context) bool {
	s.mu.Lock()
	if s.dropped > 0 {
		note := &v1.LogLine{AgentId: s.agentID, Stream: "agent", Time: timestamppb.New(s.now()),
			Line: fmt.Sprintf("anvil agent: %d output lines were dropped while the server was unreachable", s.dropped)}
		s.queue = append([]*v1.LogLine{note}, s.queue...)
		s.dropped = 0
	}
	n := min(len(s.queue), linesPerCall)
	if n == 0 {
		s.setIdleLocked()
		s.mu.Unlock()
		return false
	}
	batch := append([]*v1.LogLine(nil), s.queue[:n]...)
	s.busy = true
	s.mu.Unlock()

	accepted, err := s.send(ctx, batch)

	s.mu.Lock()
	s.busy = false
	// The queue may have dropped lines from its head meanwhile; drop what
	// was accepted of this batch from what is still there.
	drop := 0
	for drop < int(accepted) && drop < len(s.queue) && s.queue[drop] == batch[drop] {
		drop++
	}
	s.queue = s.queue[drop:]
	more := len(s.queue) > 0
	if !more {
		s.setIdleLocked()
	}
	s.mu.Unlock()
	if err != nil {
		if s.bo.n == 0 || s.bo.n%20 == 0 {
			s.console.printf("anvil agent: streaming output to the server: %v (retrying)", err)
		}
		if s.bo.wait(ctx) != nil {
			return false
		}
		return true
	}
	s.bo.n = 0
	return more
}

// send ships batch to the current server (moving on as every call does),
// and returns how many lines of it the server accepted.
func (s *logShipper) send(ctx context.Context, batch []*v1.LogLine) (int64, error) {
	var accepted int64
	err := s.servers.call(ctx, logsTimeout, "streaming output", func(ctx context.Context, c anvilv1connect.AgentServiceClient) (err error) {
		accepted, err = s.sendTo(ctx, c, batch)
		return err
	})
	return accepted, err
}

// sendTo ships batch in one StreamLogs call to c.
func (s *logShipper) sendTo(ctx context.Context, c anvilv1connect.AgentServiceClient, batch []*v1.LogLine) (int64, error) {
	stream := c.StreamLogs(ctx)
	// The server corrects the lines' times by its clock's difference to
	// ours (this machine's clock is often wrong).
	stream.RequestHeader().Set(v1.SentAtHeader, s.now().UTC().Format(time.RFC3339Nano))
	for _, l := range batch {
		if err := stream.Send(l); err != nil {
			break // the real error comes from CloseAndReceive
		}
	}
	resp, err := stream.CloseAndReceive()
	if err != nil {
		return 0, err
	}
	return resp.Msg.GetLinesAccepted(), nil
}

// setIdleLocked wakes flush waiters; s.mu must be held.
func (s *logShipper) setIdleLocked() {
	if s.idle != nil && len(s.queue) == 0 && !s.busy {
		close(s.idle)
		s.idle = nil
	}
}

// flush waits until every queued line is accepted, or ctx ends.
func (s *logShipper) flush(ctx context.Context) {
	s.mu.Lock()
	if len(s.queue) == 0 && !s.busy {
		s.mu.Unlock()
		return
	}
	if s.idle == nil {
		s.idle = make(chan struct{})
	}
	idle := s.idle
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	select {
	case <-idle:
	case <-ctx.Done():
	}
}
