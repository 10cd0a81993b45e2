package systemd

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/anvilproj/anvil/internal/clock"
)

// Watchdog pings the service manager's watchdog while a liveness check
// passes. A bare ticker would prove only that one goroutine runs: a
// process whose store is wedged would keep pinging and never be
// restarted. So each ping follows a check that passed; a check that fails
// or that has not answered within Every sends a STATUS= line saying why
// instead, and systemd, getting no ping within WatchdogSec, restarts the
// service.
type Watchdog struct {
	// Notifier receives WATCHDOG=1 and the STATUS= lines. Required.
	Notifier *Notifier
	// Every is the ping interval (WatchdogEvery). Required.
	Every time.Duration
	// Check reports whether the process is alive: nil if so. Its context
	// ends after Timeout. A check that has not returned by then is a
	// failing one, and no second check is started while it hangs: its
	// answer, when it comes, is the next one. Required.
	Check func(context.Context) error
	// Timeout bounds a check; if 0, Every (the next ping is due then).
	Timeout time.Duration
	// Status is the STATUS= text sent again when a failing check passes
	// again.
	Status string
	// Clock paces the pings; if nil, clock.Real.
	Clock clock.Clock
	// Logger gets a line when the check starts failing and when it
	// passes again; if nil, slog.Default().
	Logger *slog.Logger
}

// errHung is the failure of a check that has not answered yet.
var errHung = errors.New("the liveness check has not answered")

// Run pings until ctx ends; it returns nil then.
func (w *Watchdog) Run(ctx context.Context) error {
	clk := clock.Or(w.Clock)
	log := w.Logger
	if log == nil {
		log = slog.Default()
	}
	timeout := w.Timeout
	if timeout <= 0 {
		timeout = w.Every
	}
	t := clk.NewTicker(w.Every)
	defer t.Stop()
	var pending chan error // the hung check's answer, nil when none hangs
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		if pending == nil {
			pending = make(chan error, 1)
			go func(done chan<- error) {
				cctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				done <- w.Check(cctx)
			}(pending)
		}
		var err error
		select {
		case err = <-pending:
			pending = nil
		case <-clk.After(timeout):
			err = errHung
		case <-ctx.Done():
			return nil
		}
		switch {
		case err == nil:
			if failing {
				log.Info("liveness check passes again; watchdog pings resumed")
				failing = false
				w.Notifier.Notify("WATCHDOG=1", statusLine(w.Status))
				continue
			}
			w.Notifier.Notify("WATCHDOG=1")
		case !failing:
			failing = true
			log.Error("liveness check failed; watchdog pings stopped (systemd restarts the service after WatchdogSec)", "err", err)
			w.Notifier.Status("not alive: " + err.Error())
		}
	}
}
