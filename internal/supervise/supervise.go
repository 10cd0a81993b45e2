// Package supervise runs the long-lived components of a program (listeners,
// engines, reconcilers, watchers) as one unit: started in the order they
// were added, each after the ones before it are ready, and stopped in the
// reverse order, stage by stage, when the program's context ends or the
// first component fails.
//
// It owns the lifecycle only: what a component does, and what it needs
// opened before it runs (sockets, stores), is its caller's. It knows
// nothing of the components it runs.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// DefaultStopTimeout bounds the stop of a component whose StopTimeout is 0.
const DefaultStopTimeout = 30 * time.Second

// ErrStopped is the cause in the Error of a component whose Run returned
// nil before it was asked to stop: a long-lived component that ends on its
// own has stopped doing its job, whatever it says.
var ErrStopped = errors.New("stopped unexpectedly")

// ErrStopTimeout is the cause in the Error of a component that did not
// return within its StopTimeout of being asked to stop.
var ErrStopTimeout = errors.New("did not stop")

// Component is one long-lived part of a program.
type Component struct {
	// Name names the component in errors and log lines ("workflow
	// engine", "http listener 127.0.0.1:7080"). Required.
	Name string
	// Run does the component's work until ctx ends, then stops and returns
	// nil (context.Canceled counts as nil then), or what went wrong
	// stopping. Returning before ctx ends is a failure, which stops the
	// supervisor: the error returned, or ErrStopped when nil. A panic in
	// Run is a failure too (a *PanicError). Required.
	Run func(ctx context.Context) error
	// Ready, if not nil, blocks until the component is ready for the
	// components added after it, and returns nil; or returns an error
	// when ctx ends first (the supervisor is stopping). The supervisor
	// calls it once, after starting Run, and starts the next component
	// only when it has returned. If nil, a component is ready as soon as
	// its Run has been called.
	Ready func(ctx context.Context) error
	// StopTimeout bounds how long the supervisor waits for Run to return
	// once asked to stop. After it, the component is abandoned (its
	// goroutine keeps running: the program should exit soon) with
	// ErrStopTimeout, and the earlier stages are stopped anyway. If 0,
	// uses DefaultStopTimeout.
	StopTimeout time.Duration
}

// Error is how Supervisor.Run reports what went wrong with one component.
type Error struct {
	Component string // the component's Name
	Err       error  // what it returned, ErrStopped, ErrStopTimeout or a *PanicError
}

func (e *Error) Error() string { return e.Component + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// PanicError is the cause in the Error of a component whose Run panicked.
// The supervisor recovers the panic so that the other components still
// stop in order (a store is closed cleanly), and returns it with the stack:
// it is not swallowed, Run's caller gets it as an error. A panic in a
// goroutine that Run started is beyond its reach and crashes the program,
// as any Go panic does.
type PanicError struct {
	Value any    // what was passed to panic
	Stack []byte // the panicking goroutine's stack, from runtime/debug.Stack
}

func (p *PanicError) Error() string { return fmt.Sprintf("panic: %v\n\n%s", p.Value, p.Stack) }

// Supervisor runs components, stage by stage. Add the stages with Stage,
// then call Run once. Its zero value is ready to use; Ready may be called
// from any goroutine, Stage and Run only from one.
type Supervisor struct {
	// Logger receives a line when shutdown starts, one per stage stopped
	// and one per component that fails, does not stop cleanly or overruns
	// its stop. If nil, uses slog.Default().
	Logger *slog.Logger

	stages []stage
	log    *slog.Logger

	mu       sync.Mutex
	state    state
	starting string // the component being started, for Ready
	cause    *Error // the first failure; it ends the start and the run
	failed   chan struct{}
	serving  chan struct{} // closed when the state becomes serving
	errs     []error       // every failure, the cause first, in the order seen
}

type stage struct {
	name  string
	comps []*running
}

// running is a component and what its goroutine reports.
type running struct {
	Component
	cancel   context.CancelFunc
	entered  chan struct{} // closed when Run is about to be called
	done     chan struct{} // closed when Run has returned; err is then set
	err      error
	early    bool // returned before it was asked to stop: a failure
	stopping bool // asked to stop: a return is no longer a failure
}

type state int

const (
	notStarted state = iota
	starting
	serving
	stopping
	stopped
)

// Stage adds a stage of components. Stages start in the order added and
// stop in the reverse order; within a stage, components start in the order
// given (each once the one before it is ready) and are asked to stop
// together, each then waited for up to its StopTimeout. A stage's name is
// for the log. Stage panics if called after Run, or with a component
// lacking a Name or a Run: those are mistakes in the program's wiring.
func (s *Supervisor) Stage(name string, cs ...Component) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != notStarted {
		panic("supervise: Stage called after Run")
	}
	st := stage{name: name}
	for _, c := range cs {
		if c.Name == "" || c.Run == nil {
			panic(fmt.Sprintf("supervise: a component of stage %q lacks a Name or a Run", name))
		}
		if c.StopTimeout <= 0 {
			c.StopTimeout = DefaultStopTimeout
		}
		st.comps = append(st.comps, &running{Component: c, entered: make(chan struct{}), done: make(chan struct{})})
	}
	s.stages = append(s.stages, st)
}

// Run starts every component and waits until ctx ends or one fails, then
// stops the stages in reverse order and returns: nil after a clean stop on
// ctx's end; otherwise an error joining *Error values, the failure that
// ended the run first, then any component that failed or overran its stop.
// A failure during the start stops what had started. Run may be called only
// once.
func (s *Supervisor) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.state != notStarted {
		s.mu.Unlock()
		return errors.New("supervise: Run called twice")
	}
	s.state = starting
	s.failed = make(chan struct{})
	s.mu.Unlock()
	s.log = s.Logger
	if s.log == nil {
		s.log = slog.Default()
	}

	// Starting ends early, and a ready wait is cut short, when ctx ends
	// or a component fails.
	startCtx, cancelStart := context.WithCancel(ctx)
	defer cancelStart()
	go func() {
		select {
		case <-s.failed:
			cancelStart()
		case <-startCtx.Done():
		}
	}()
	s.start(ctx, startCtx)

	s.mu.Lock()
	if s.cause == nil && ctx.Err() == nil {
		s.state = serving
		close(s.servingLocked())
	}
	s.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-s.failed:
	}

	s.mu.Lock()
	s.state = stopping
	cause := s.cause
	s.mu.Unlock()
	if cause != nil {
		s.log.Info("shutting down", "because", cause.Component)
	} else {
		s.log.Info("shutting down")
	}
	for i := len(s.stages) - 1; i >= 0; i-- {
		s.stop(s.stages[i])
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.state = stopped
	return errors.Join(s.errs...)
}

// start starts the components in order until all run or startCtx ends.
// Their contexts derive from ctx without its cancellation: each is ended
// by its own stop, in order.
func (s *Supervisor) start(ctx, startCtx context.Context) {
	base := context.WithoutCancel(ctx)
	for _, st := range s.stages {
		for _, c := range st.comps {
			if startCtx.Err() != nil {
				return
			}
			s.mu.Lock()
			s.starting = c.Name
			s.mu.Unlock()
			var cctx context.Context
			cctx, c.cancel = context.WithCancel(base)
			go s.run(cctx, c)
			<-c.entered // so Runs are called in order, ready or not
			if c.Ready == nil {
				continue
			}
			// A component that ends while its readiness is awaited
			// fails the start (through s.failed) and so ends the wait.
			if err := c.Ready(startCtx); err != nil && startCtx.Err() == nil {
				s.fail(c, fmt.Errorf("not ready: %w", err))
				return
			}
		}
	}
}

// run runs c's Run in this goroutine and reports how it ended.
func (s *Supervisor) run(ctx context.Context, c *running) {
	var err error
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
		s.mu.Lock()
		asked := c.stopping
		s.mu.Unlock()
		switch {
		case !asked && err == nil:
			err = ErrStopped
		case asked && errors.Is(err, context.Canceled):
			err = nil
		}
		c.err, c.early = err, !asked
		close(c.done)
		if !asked {
			s.fail(c, err)
		}
	}()
	close(c.entered)
	err = c.Run(ctx)
}

// fail records that c failed with err; the first failure ends the run.
func (s *Supervisor) fail(c *running, err error) {
	e := &Error{Component: c.Name, Err: err}
	s.mu.Lock()
	s.errs = append(s.errs, e)
	first := s.cause == nil
	if first {
		s.cause = e
		if s.state < stopping {
			s.state = stopping
		}
		close(s.failed)
	}
	s.mu.Unlock()
	s.log.Error("component failed", "component", c.Name, "err", err)
}

// stop asks every started component of st to stop, then waits for each
// until its StopTimeout has passed since.
func (s *Supervisor) stop(st stage) {
	var started []*running
	s.mu.Lock()
	for _, c := range st.comps {
		if c.cancel != nil {
			c.stopping = true
			started = append(started, c)
		}
	}
	s.mu.Unlock()
	if len(started) == 0 {
		return
	}
	for _, c := range started {
		c.cancel()
	}
	asked := time.Now()
	defer s.log.Info("stopped", "stage", st.name)
	for _, c := range started {
		// Each bound counts from the stop, not from the end of the wait
		// for the component before it.
		timer := time.NewTimer(c.StopTimeout - time.Since(asked))
		select {
		case <-c.done:
			timer.Stop()
			// A return before the stop was recorded as a failure then.
			if c.err != nil && !c.early {
				s.mu.Lock()
				s.errs = append(s.errs, &Error{Component: c.Name, Err: c.err})
				s.mu.Unlock()
				s.log.Error("component did not stop cleanly", "component", c.Name, "err", c.err)
			}
		case <-timer.C:
			s.mu.Lock()
			s.errs = append(s.errs, &Error{Component: c.Name, Err: fmt.Errorf("%w within %v", ErrStopTimeout, c.StopTimeout)})
			s.mu.Unlock()
			s.log.Error("component did not stop in time; abandoned", "component", c.Name, "stop_timeout", c.StopTimeout.String())
		}
	}
}

// Serving returns a channel closed once every component has been started
// and is ready, when Ready first answers nil; never closed if the start
// fails or is cut short. It may be called before Run: a component of the
// last stage can wait on it (to tell a service manager the program is
// up) without Ready's answer racing its own start.
func (s *Supervisor) Serving() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.servingLocked()
}

func (s *Supervisor) servingLocked() chan struct{} {
	if s.serving == nil {
		s.serving = make(chan struct{})
	}
	return s.serving
}

// Ready reports whether every component has been started and is ready and
// none has failed or been asked to stop: nil if so, else an error saying
// what the program is doing instead. For a readiness probe (/readyz).
func (s *Supervisor) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case notStarted:
		return errors.New("not started")
	case starting:
		return fmt.Errorf("starting %s", s.starting)
	case serving:
		return nil
	case stopping:
		return errors.New("shutting down")
	}
	return errors.New("stopped")
}
