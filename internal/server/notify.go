package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/supervise"
	"github.com/anvilproj/anvil/internal/systemd"
	"github.com/anvilproj/anvil/internal/tlsconf"
)

// What Run tells a service manager (Config.Notify), and what a reload can
// change in a running server (Config.Reloader).

// notifyComponent is the last stage's component. Once every stage is up
// (every listener bound and served, the store open) it lets reloads
// through (Reloader.Serving) and tells systemd READY=1; then it pings the
// watchdog while the server is alive, and says STOPPING=1 when the
// shutdown starts (this stage stops first). Nil when there is no one to
// tell.
func notifyComponent(cfg Config, sup *supervise.Supervisor, st store.Store, status string) []supervise.Component {
	if cfg.Notify == nil && cfg.Reloader == nil {
		return nil
	}
	return []supervise.Component{{Name: "systemd notify", Run: func(ctx context.Context) error {
		select {
		case <-sup.Serving():
		case <-ctx.Done():
			return nil
		}
		cfg.Reloader.serve()
		if cfg.Notify == nil {
			<-ctx.Done()
			return nil
		}
		if err := cfg.Notify.Ready(status); err != nil {
			cfg.Logger.Warn("cannot tell systemd the service is ready", "err", err)
		}
		defer cfg.Notify.Stopping("shutting down")
		if cfg.WatchdogEvery <= 0 {
			<-ctx.Done()
			return nil
		}
		w := &systemd.Watchdog{Notifier: cfg.Notify, Every: cfg.WatchdogEvery, Status: status, Logger: cfg.Logger,
			Check: func(ctx context.Context) error { return alive(ctx, sup, st) }}
		return w.Run(ctx)
	}}}
}

// watchdogProbe is the object the liveness check reads; it need not
// exist: a "not found" is an answer.
const watchdogProbe = "anvil-watchdog-probe"

// alive is the watchdog's liveness check: every stage is up (none has
// failed or is stopping) and the store answers a read within ctx.
func alive(ctx context.Context, sup *supervise.Supervisor, st store.Store) error {
	if err := sup.Ready(); err != nil {
		return err
	}
	if _, err := st.Get(ctx, model.KindHardware, "", watchdogProbe); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("store: %w", err)
	}
	return ctx.Err() // a store that answered after the deadline is no better
}

// readyStatus is the STATUS= text once serving: what listens where.
func readyStatus(lns []namedListener, boot *bootServices) string {
	var parts []string
	for _, l := range lns {
		parts = append(parts, l.name+" "+l.ln.Addr().String())
	}
	for _, p := range boot.packets {
		parts = append(parts, p.name+" "+p.conn.LocalAddr().String())
	}
	return "serving: " + strings.Join(parts, ", ")
}

// Reloader is what a reload (SIGHUP) can reload in a running server: the
// caller makes it and passes it in Config.Reloader, Run fills it in. Its
// zero value reloads nothing. Safe for concurrent use.
type Reloader struct {
	mu      sync.Mutex
	tls     *tlsconf.FileSource // nil: TLS off, or a generated certificate
	serving chan struct{}       // closed once the server is up
}

// Serving returns a channel closed once every stage of the server is up.
// A reload asked for before then waits for it: it would tell systemd
// READY=1 before the server is.
func (r *Reloader) Serving() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.servingLocked()
}

func (r *Reloader) servingLocked() chan struct{} {
	if r.serving == nil {
		r.serving = make(chan struct{})
	}
	return r.serving
}

func (r *Reloader) serve() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	close(r.servingLocked())
}

func (r *Reloader) setTLS(src *tlsconf.FileSource) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tls = src
}

// ReloadTLS reads --tls-cert and --tls-key again, even if they look
// unchanged, and says what it did. A pair that cannot be used is the
// error; the previous one keeps serving. With a generated certificate, or
// TLS off, there is nothing to read: the generated one is renewed by the
// server itself.
func (r *Reloader) ReloadTLS() (string, error) {
	r.mu.Lock()
	src := r.tls
	r.mu.Unlock()
	if src == nil {
		return "no certificate files to reload", nil
	}
	if err := src.Reload(); err != nil {
		return "", err
	}
	return "certificate files reloaded", nil
}
