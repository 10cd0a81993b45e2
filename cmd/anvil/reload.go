package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/anvilproj/anvil/internal/cmdbase"
	"github.com/anvilproj/anvil/internal/config"
	"github.com/anvilproj/anvil/internal/server"
	"github.com/anvilproj/anvil/internal/systemd"
)

// What `anvil serve` does on SIGHUP (systemd's ExecReload): re-read the
// TLS certificate files and the config file, apply what can change while
// it runs, and name what needs a restart. A reload never stops the
// server: a config file that does not parse is logged, with its line, and
// the running configuration stays.

// liveSettings are the keys a reload applies without a restart, each with
// how. Everything else is wired into listeners, stores and engines at
// start, and only logged as changed.
var liveSettings = map[string]func(value []string) error{
	cmdbase.FlagLogLevel: func(v []string) error { return cmdbase.SetLogLevel(v[0]) },
}

// reloader reloads a running `anvil serve`.
type reloader struct {
	cmdLine config.CommandLine // what the command line gave, to read the file again under it
	running *config.Config     // the configuration in effect
	server  *server.Reloader
	notify  *systemd.Notifier
	log     *slog.Logger
}

// watch reloads on each SIGHUP until ctx ends, once the server is up (a
// signal before then waits: READY=1 after it would come too early). It
// catches SIGHUP from now on, so that the signal's default, ending the
// process, never applies. The function returned stops it.
func (r *reloader) watch(ctx context.Context) func() {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-r.server.Serving():
		case <-ctx.Done():
			return
		}
		for {
			select {
			case <-hup:
				r.reload()
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		cancel()
		<-done
	}
}

// reload does one reload, between RELOADING=1 and READY=1.
func (r *reloader) reload() {
	r.log.Info("reloading (SIGHUP)")
	r.notify.Reloading("reloading the config file and the TLS certificate")
	var failed []string
	if err := r.reloadConfig(); err != nil {
		r.log.Error("config not reloaded; the running configuration stays", "file", r.running.File, "err", err)
		failed = append(failed, "config: "+err.Error())
	}
	if what, err := r.server.ReloadTLS(); err != nil {
		r.log.Error("TLS certificate not reloaded", "err", err)
		failed = append(failed, "TLS: "+err.Error())
	} else {
		r.log.Info("TLS reload: " + what)
	}
	status := "serving; reloaded at " + time.Now().UTC().Format(time.RFC3339)
	if len(failed) > 0 {
		status = "serving; the reload at " + time.Now().UTC().Format(time.RFC3339) + " failed: " + strings.Join(failed, "; ")
	}
	r.notify.Ready(status)
}

// reloadConfig reads the config file and the environment again, under
// the same command line, and applies or names what changed.
func (r *reloader) reloadConfig() error {
	fresh, _, err := newRootCmd().Find([]string{"serve"})
	if err != nil {
		return err
	}
	fresh.InheritedFlags() // merges the root's --log-level and --log-format into fresh.Flags()
	if err := r.cmdLine.Apply(fresh.Flags()); err != nil {
		return err
	}
	o, err := serveOptions(fresh)
	if err != nil {
		return err
	}
	next, err := config.Load(o)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range r.running.Changed(next) {
		name, value := s.Flag.Name, config.Redacted
		if !config.IsSecret(s.Flag) {
			value = s.Flag.Value.String()
		}
		apply, live := liveSettings[name]
		if !live {
			r.log.Warn("setting changed, takes effect at restart", "key", name, "value", value, "source", s.Source.String())
			continue
		}
		if err := apply(s.Strings()); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := r.running.Adopt(s); err != nil {
			errs = append(errs, err)
			continue
		}
		r.log.Info("setting changed, applied", "key", name, "value", value, "source", s.Source.String())
	}
	return errors.Join(errs...)
}
