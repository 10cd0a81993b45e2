package supervise

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The tests run in synctest bubbles: real goroutines, but synctest.Wait
// tells when every one of them is blocked, so "b has not started yet" is
// a fact, not a guess after a sleep; and a stop timeout passes on the
// bubble's clock, at once.

// journal records what the components did, in order.
type journal struct {
	mu     sync.Mutex
	events []string
}

func (j *journal) add(e string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.events = append(j.events, e)
}

func (j *journal) get() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.events)
}

// until returns a component that records its start, runs until ctx ends
// and records its stop; it is ready once its start is recorded, so the
// supervisor starts the next one only then (without a Ready, components
// of a stage start at once, in no order a journal could see).
func (j *journal) until(name string) Component {
	started := make(chan struct{})
	return Component{Name: name,
		Run: func(ctx context.Context) error {
			j.add("start " + name)
			close(started)
			<-ctx.Done()
			j.add("stop " + name)
			return nil
		},
		Ready: func(ctx context.Context) error {
			select {
			case <-started:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// runAsync starts s.Run(ctx) and returns a channel of its result.
func runAsync(ctx context.Context, s *Supervisor) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	return errc
}

func TestOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var j journal
		s := &Supervisor{Logger: quiet()}
		s.Stage("store", j.until("store"))
		s.Stage("core", j.until("engine"), j.until("executor"))
		s.Stage("transports", j.until("http"))
		ctx, cancel := context.WithCancel(context.Background())
		errc := runAsync(ctx, s)

		synctest.Wait()
		if err := s.Ready(); err != nil {
			t.Errorf("Ready with every component running = %v; want nil", err)
		}
		want := []string{"start store", "start engine", "start executor", "start http"}
		if got := j.get(); !slices.Equal(got, want) {
			t.Errorf("started %q; want %q", got, want)
		}

		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run after ctx ended = %v; want nil", err)
		}
		got := j.get()[len(want):]
		// A stage's components are asked to stop together: either order.
		if len(got) != 4 || got[0] != "stop http" || got[3] != "stop store" ||
			!slices.Contains(got[1:3], "stop engine") || !slices.Contains(got[1:3], "stop executor") {
			t.Errorf("stopped %q; want http, then engine and executor, then store", got)
		}
		if err := s.Ready(); err == nil || err.Error() != "stopped" {
			t.Errorf("Ready after Run = %v; want stopped", err)
		}
	})
}

func TestReadinessGatesTheNextStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var j journal
		ready := make(chan struct{})
		s := &Supervisor{Logger: quiet()}
		slow := j.until("cache")
		slow.Ready = func(ctx context.Context) error {
			select {
			case <-ready:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		s.Stage("core", slow, j.until("dhcp"))
		ctx, cancel := context.WithCancel(context.Background())
		errc := runAsync(ctx, s)

		synctest.Wait() // every goroutine blocked: the cache in Ready
		if got := j.get(); !slices.Equal(got, []string{"start cache"}) {
			t.Errorf("started %q while the cache was not ready; want only the cache", got)
		}
		if err := s.Ready(); err == nil || err.Error() != "starting cache" {
			t.Errorf("Ready while the cache is not ready = %v; want starting cache", err)
		}
		close(ready)
		synctest.Wait()
		if got := j.get(); !slices.Equal(got, []string{"start cache", "start dhcp"}) {
			t.Errorf("started %q once the cache was ready; want cache, dhcp", got)
		}
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run = %v; want nil", err)
		}
	})
}

func TestFailureStopsTheRestInOrder(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		run     func(ctx context.Context, fail <-chan struct{}) error
		wantIs  error
		wantMsg string
	}{
		{
			name:    "error",
			run:     func(_ context.Context, fail <-chan struct{}) error { <-fail; return boom },
			wantIs:  boom,
			wantMsg: "engine: boom",
		},
		{
			name:    "nil before being asked to stop",
			run:     func(_ context.Context, fail <-chan struct{}) error { <-fail; return nil },
			wantIs:  ErrStopped,
			wantMsg: "engine: stopped unexpectedly",
		},
		{
			name:    "panic",
			run:     func(_ context.Context, fail <-chan struct{}) error { <-fail; panic("nil map") },
			wantMsg: "engine: panic: nil map",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var j journal
				fail := make(chan struct{})
				s := &Supervisor{Logger: quiet()}
				s.Stage("store", j.until("store"))
				s.Stage("core", Component{Name: "engine", Run: func(ctx context.Context) error { return tc.run(ctx, fail) }})
				s.Stage("transports", j.until("http"))
				errc := runAsync(context.Background(), s)
				synctest.Wait()
				if err := s.Ready(); err != nil {
					t.Fatalf("Ready before the failure = %v", err)
				}

				close(fail)
				err := <-errc
				var e *Error
				if !errors.As(err, &e) || e.Component != "engine" {
					t.Fatalf("Run = %v; want an *Error of the engine", err)
				}
				if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
					t.Errorf("Run = %v; want it to wrap %v", err, tc.wantIs)
				}
				if !strings.HasPrefix(err.Error(), tc.wantMsg) {
					t.Errorf("Run = %q; want it to begin %q", err, tc.wantMsg)
				}
				want := []string{"start store", "start http", "stop http", "stop store"}
				if got := j.get(); !slices.Equal(got, want) {
					t.Errorf("journal %q; want %q", got, want)
				}
			})
		})
	}
}

func TestPanicKeepsValueAndStack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &Supervisor{Logger: quiet()}
		s.Stage("core", Component{Name: "engine", Run: func(context.Context) error { panicInEngine(); return nil }})
		err := s.Run(context.Background())
		var p *PanicError
		if !errors.As(err, &p) {
			t.Fatalf("Run = %v; want a *PanicError", err)
		}
		if p.Value != "index out of range" || !strings.Contains(string(p.Stack), "panicInEngine") {
			t.Errorf("PanicError{Value: %v, Stack: %s}; want the value and a stack through panicInEngine", p.Value, p.Stack)
		}
	})
}

func panicInEngine() { panic("index out of range") }

func TestFailureDuringStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var j journal
		boom := errors.New("listen: address in use")
		fail := make(chan struct{})
		s := &Supervisor{Logger: quiet()}
		s.Stage("store", Component{Name: "store", Run: func(ctx context.Context) error {
			j.add("start store")
			select {
			case <-fail:
				return boom
			case <-ctx.Done():
				return nil
			}
		}})
		waiting := j.until("cache")
		waiting.Ready = func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() } // never ready
		s.Stage("core", waiting, j.until("never"))
		errc := runAsync(context.Background(), s)
		synctest.Wait()
		close(fail) // while the cache's readiness is awaited

		err := <-errc
		if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "store: ") {
			t.Errorf("Run = %v; want the store's error, named", err)
		}
		want := []string{"start store", "start cache", "stop cache"}
		if got := j.get(); !slices.Equal(got, want) {
			t.Errorf("journal %q; want %q (the one after the cache never starts)", got, want)
		}
	})
}

func TestNotReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var j journal
		s := &Supervisor{Logger: quiet()}
		c := j.until("cache")
		c.Ready = func(context.Context) error { return errors.New("store cannot watch") }
		s.Stage("core", j.until("engine"), c, j.until("never"))
		err := s.Run(context.Background())
		if err == nil || err.Error() != "cache: not ready: store cannot watch" {
			t.Errorf("Run = %v; want cache: not ready: store cannot watch", err)
		}
		if got := j.get(); len(got) != 4 || slices.Contains(got, "start never") {
			t.Errorf("journal %q; want engine and cache started and stopped, nothing else", got)
		}
	})
}

func TestStopTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var j journal
		release := make(chan struct{})
		defer close(release) // the abandoned goroutine ends with the test
		s := &Supervisor{Logger: quiet()}
		s.Stage("store", j.until("store"))
		s.Stage("core", Component{Name: "stuck", StopTimeout: 3 * time.Second, Run: func(context.Context) error {
			<-release // ignores ctx
			return nil
		}})
		ctx, cancel := context.WithCancel(context.Background())
		errc := runAsync(ctx, s)
		synctest.Wait()
		start := time.Now()
		cancel()
		err := <-errc
		if !errors.Is(err, ErrStopTimeout) || err.Error() != "stuck: did not stop within 3s" {
			t.Errorf("Run = %v; want stuck: did not stop within 3s (ErrStopTimeout)", err)
		}
		// The bubble's clock: exactly the timeout, not a measurement.
		if waited := time.Since(start); waited != 3*time.Second {
			t.Errorf("waited %v for the stuck component; want its StopTimeout, 3s", waited)
		}
		if got := j.get(); !slices.Equal(got, []string{"start store", "stop store"}) {
			t.Errorf("journal %q; want the store stopped after the stuck component was abandoned", got)
		}
	})
}

func TestStopTimeoutsRunTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		stuck := func(context.Context) error { <-release; return nil }
		s := &Supervisor{Logger: quiet()}
		s.Stage("core",
			Component{Name: "slow", StopTimeout: 5 * time.Second, Run: func(ctx context.Context) error {
				<-ctx.Done()
				time.Sleep(4 * time.Second) // a long but bounded stop, on the bubble's clock
				return nil
			}},
			Component{Name: "stuck", StopTimeout: 6 * time.Second, Run: stuck})
		ctx, cancel := context.WithCancel(context.Background())
		errc := runAsync(ctx, s)
		synctest.Wait()
		start := time.Now()
		cancel()
		if err := <-errc; !errors.Is(err, ErrStopTimeout) || !strings.HasPrefix(err.Error(), "stuck: ") {
			t.Errorf("Run = %v; want stuck: ErrStopTimeout alone", err)
		}
		// 6s from the stop, not 4s (the slow one) + 6s.
		if waited := time.Since(start); waited != 6*time.Second {
			t.Errorf("stopping the stage took %v on the bubble's clock; want the stuck one's 6s", waited)
		}
	})
}

func TestStopErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		flush := errors.New("flush: disk full")
		s := &Supervisor{Logger: quiet()}
		s.Stage("core",
			// context.Canceled after the stop is how many Runs say "stopped".
			Component{Name: "engine", Run: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
			Component{Name: "recorder", Run: func(ctx context.Context) error { <-ctx.Done(); return flush }})
		ctx, cancel := context.WithCancel(context.Background())
		errc := runAsync(ctx, s)
		synctest.Wait()
		cancel()
		err := <-errc
		if err == nil || err.Error() != "recorder: flush: disk full" {
			t.Errorf("Run = %v; want recorder: flush: disk full alone", err)
		}
	})
}

func TestContextEndedBeforeRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var j journal
		s := &Supervisor{Logger: quiet()}
		s.Stage("core", j.until("engine"))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := s.Run(ctx); err != nil {
			t.Errorf("Run = %v; want nil", err)
		}
		if got := j.get(); len(got) != 0 {
			t.Errorf("journal %q; want nothing started", got)
		}
	})
}

func TestMisuse(t *testing.T) {
	mustPanic := func(what string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", what)
			}
		}()
		f()
	}
	var s Supervisor
	mustPanic("a component without Run", func() { s.Stage("core", Component{Name: "engine"}) })
	mustPanic("a component without Name", func() { s.Stage("core", Component{Run: func(context.Context) error { return nil }}) })
	if err := s.Ready(); err == nil || err.Error() != "not started" {
		t.Errorf("Ready before Run = %v; want not started", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run of nothing = %v", err)
	}
	if err := s.Run(ctx); err == nil {
		t.Error("second Run = nil; want an error")
	}
	mustPanic("Stage after Run", func() { s.Stage("late", Component{Name: "x", Run: func(context.Context) error { return nil }}) })
}

// TestServing: a component of the last stage waiting on Serving is let go
// once every component is ready, when Ready already says so; a start that
// fails never closes it.
func TestServing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var j journal
		s := &Supervisor{Logger: quiet()}
		slow := j.until("listener")
		release := make(chan struct{})
		ready := slow.Ready
		slow.Ready = func(ctx context.Context) error { <-release; return ready(ctx) }
		s.Stage("transports", slow)
		s.Stage("notify", Component{Name: "notify", Run: func(ctx context.Context) error {
			select {
			case <-s.Serving():
				j.add("serving, ready: " + errString(s.Ready()))
			case <-ctx.Done():
			}
			<-ctx.Done()
			return nil
		}})
		ctx, cancel := context.WithCancel(context.Background())
		errc := runAsync(ctx, s)
		synctest.Wait()
		if got := j.get(); !slices.Equal(got, []string{"start listener"}) {
			t.Fatalf("journal %q before the listener is ready; want only its start", got)
		}
		close(release)
		synctest.Wait()
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		want := []string{"start listener", "serving, ready: <nil>", "stop listener"}
		if got := j.get(); !slices.Equal(got, want) {
			t.Errorf("journal %q; want %q", got, want)
		}

		failed := &Supervisor{Logger: quiet()}
		failed.Stage("store", Component{Name: "store", Run: func(ctx context.Context) error { <-ctx.Done(); return nil },
			Ready: func(context.Context) error { return errors.New("locked") }})
		if err := failed.Run(context.Background()); err == nil {
			t.Fatal("Run of a failing component: nil")
		}
		select {
		case <-failed.Serving():
			t.Error("Serving closed after a failed start")
		default:
		}
	})
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
