package agent

import (
	"context"
	"fmt"
	"io"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/actions"
)

// consoleLinesPerAction bounds the output lines of one action printed on
// the console: a serial console at 115,200 baud writes ~100 lines a second,
// and every line is in `anvil logs` anyway.
const consoleLinesPerAction = 200

// console writes the agent's lines for an operator at the machine. It is
// safe for concurrent use.
type console struct {
	mu sync.Mutex
	w  io.Writer
	// stamp, if set, prefixes each line (the boot environment puts the
	// time since boot there, as the kernel does, so the agent's lines and
	// the kernel's read as one timeline).
	stamp func() string
}

func newConsole(w io.Writer) *console {
	if w == nil {
		w = io.Discard
	}
	return &console{w: w}
}

func (c *console) printf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if c.stamp != nil {
		line = c.stamp() + line
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintln(c.w, line)
}

// actionOutput is the actions.Output of one action run: lines go to the
// server (and, bounded, the console), the last few are kept for a failure
// report, and progress goes to the server as RUNNING reports from a
// goroutine of its own, newest first, so the action never waits for it.
type actionOutput struct {
	a   *Agent
	act *v1.GetActionResponse

	mu       sync.Mutex
	ring     []string
	next     int
	printed  int
	progress *v1.Progress

	kick     chan struct{}
	stop     chan struct{}
	stopped  chan struct{}
	stopOnce sync.Once
}

var _ actions.Output = (*actionOutput)(nil)

func newActionOutput(a *Agent, act *v1.GetActionResponse) *actionOutput {
	o := &actionOutput{a: a, act: act, ring: make([]string, 0, tailLines),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	go o.sendProgress()
	return o
}

// Line implements actions.Output.
func (o *actionOutput) Line(stream, line string) {
	o.mu.Lock()
	if len(o.ring) < tailLines {
		o.ring = append(o.ring, line)
	} else {
		o.ring[o.next] = line
		o.next = (o.next + 1) % tailLines
	}
	o.printed++
	n := o.printed
	o.mu.Unlock()
	switch {
	case o.a.cfg.Verbose || n <= consoleLinesPerAction:
		o.a.console.printf("  %s: %s", o.act.GetName(), line)
	case n == consoleLinesPerAction+1:
		o.a.console.printf("  %s: … (more lines: anvil logs)", o.act.GetName())
	}
	o.a.logs.add(&v1.LogLine{
		WorkflowId: o.act.GetWorkflowId(), AgentId: o.a.cfg.AgentID, TaskName: o.act.GetTaskName(),
		ActionName: o.act.GetName(), Time: timestamppb.New(o.a.cfg.Clock.Now()), Stream: stream, Line: line,
	})
}

// Progress implements actions.Output.
func (o *actionOutput) Progress(p actions.Progress) {
	vp := &v1.Progress{Bytes: p.Bytes, TotalBytes: p.TotalBytes, BytesPerSec: p.BytesPerSec}
	if p.TotalBytes > 0 {
		vp.Percent = 100 * float64(p.Bytes) / float64(p.TotalBytes)
	}
	o.mu.Lock()
	o.progress = vp
	o.mu.Unlock()
	o.a.console.printf("  %s: %s", o.act.GetName(), formatProgress(vp))
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

// tail returns the last output lines, oldest first.
func (o *actionOutput) tail() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]string, 0, len(o.ring))
	out = append(out, o.ring[o.next:]...)
	return append(out, o.ring[:o.next]...)
}

func (o *actionOutput) lastProgress() *v1.Progress {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.progress
}

// stopProgress ends the progress sender and waits for it.
func (o *actionOutput) stopProgress() {
	o.stopOnce.Do(func() { close(o.stop) })
	<-o.stopped
}

func (o *actionOutput) sendProgress() {
	defer close(o.stopped)
	for {
		select {
		case <-o.stop:
			return
		case <-o.kick:
		}
		p := o.lastProgress()
		ctx, cancel := context.WithCancel(context.Background())
		go func() { // the report must not outlive stopProgress by more than the timeout
			select {
			case <-o.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		req := &v1.ReportActionStatusRequest{
			WorkflowId: o.act.GetWorkflowId(), AgentId: o.a.cfg.AgentID, TaskId: o.act.GetTaskId(),
			ActionId: o.act.GetActionId(), ActionName: o.act.GetName(),
			ActionState: v1.ActionState_ACTION_STATE_RUNNING, Progress: p,
		}
		err := o.a.servers.call(ctx, progressTimeout, "progress of "+o.act.GetName(), func(ctx context.Context, c anvilv1connect.AgentServiceClient) error {
			_, err := c.ReportActionStatus(ctx, connect.NewRequest(req))
			return err
		})
		cancel()
		_ = err // best effort: the end report carries the last progress too
	}
}

// formatProgress renders progress for the console: "412.0 MiB of 1.0 GiB
// (40%), 98.3 MiB/s".
func formatProgress(p *v1.Progress) string {
	s := formatBytes(p.GetBytes())
	if p.GetTotalBytes() > 0 {
		s += fmt.Sprintf(" of %s (%.0f%%)", formatBytes(p.GetTotalBytes()), p.GetPercent())
	}
	if p.GetBytesPerSec() > 0 {
		s += fmt.Sprintf(", %s/s", formatBytes(int64(p.GetBytesPerSec())))
	}
	return s
}

func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
