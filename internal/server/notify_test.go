package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/store/bolt"
	"github.com/anvilproj/anvil/internal/supervise"
	"github.com/anvilproj/anvil/internal/systemd"
)

// notifySocket listens as systemd does for a service's notifications and
// returns a function reading the next datagram.
func notifySocket(t *testing.T) (*systemd.Notifier, func() string) {
	t.Helper()
	name := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	n, err := systemd.NewNotifier(name)
	if err != nil {
		t.Fatal(err)
	}
	return n, func() string {
		t.Helper()
		buf := make([]byte, 4096)
		conn.SetReadDeadline(time.Now().Add(time.Minute)) // a bound on failure, not a measurement
		k, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("notify socket: %v", err)
		}
		return string(buf[:k])
	}
}

// TestNotifyLifecycle: READY=1 comes once every port answers and /readyz
// says ready, with what listens where as its status; the watchdog is
// pinged while the server runs; the certificate files are reloaded when
// asked although they look unchanged; STOPPING=1 comes when the shutdown
// starts.
func TestNotifyLifecycle(t *testing.T) {
	n, next := notifySocket(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writePair(t, certFile, keyFile, "a.example.org")
	reloader := &Reloader{}
	httpLn, httpsLn, grpcLn := listenLocal(t), listenLocal(t), listenLocal(t)
	cfg := Config{
		DataDir: t.TempDir(), Bind: "127.0.0.1", InsecureNoAuth: true,
		Listeners: Listeners{HTTP: httpLn, HTTPS: httpsLn, GRPC: grpcLn},
		TLS:       true, TLSCertFile: certFile, TLSKeyFile: keyFile,
		Logger:      slog.New(slog.NewTextHandler(newSyncBuffer(), nil)),
		DisableDHCP: true, DisableTFTP: true, DisableSyslog: true, DisableMetadata: true,
		Notify: n, WatchdogEvery: 50 * time.Millisecond, Reloader: reloader,
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()

	var statuses []string
	for {
		msg := next()
		if strings.HasPrefix(msg, "READY=1\n") {
			want := "STATUS=serving: http " + httpLn.Addr().String() + ", https " + httpsLn.Addr().String() + ", grpc " + grpcLn.Addr().String() + "\n"
			if !strings.HasSuffix(msg, want) {
				t.Errorf("ready: %q; want the listeners in %q", msg, want)
			}
			break
		}
		statuses = append(statuses, msg)
	}
	// No retry: READY=1 means ready now.
	if code, body := get(t, "http://"+httpLn.Addr().String()+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz right after READY=1: %d %q", code, body)
	}
	for _, addr := range []string{httpsLn.Addr().String(), grpcLn.Addr().String()} {
		if got := peerCert(t, addr).Subject.CommonName; got != "a.example.org" {
			t.Errorf("%s serves %q", addr, got)
		}
	}
	if len(statuses) == 0 || statuses[0] != "STATUS=opening the store\n" {
		t.Errorf("statuses before READY=1: %q; want the start's phases, from opening the store", statuses)
	}
	// Two pings; a check that did not pass in time on a machine loaded
	// by other tests says so in between (internal/systemd's tests show
	// what the watchdog sends when).
	for pings := 0; pings < 2; {
		switch msg := next(); {
		case strings.HasPrefix(msg, "WATCHDOG=1\n"):
			pings++
		case !strings.HasPrefix(msg, "STATUS=not alive: "):
			t.Fatalf("after READY=1: %q; want watchdog pings", msg)
		}
	}

	// ReloadTLS reads the new files at once, not at the next of the
	// source's looks once a second (a rewrite that keeps the files'
	// stamps is seen only so: tlsconf's TestFileSourceForcedReload).
	writePair(t, certFile, keyFile, "b.example.org")
	if what, err := reloader.ReloadTLS(); err != nil || what != "certificate files reloaded" {
		t.Fatalf("ReloadTLS = %q, %v", what, err)
	}
	if got := peerCert(t, httpsLn.Addr().String()).Subject.CommonName; got != "b.example.org" {
		t.Errorf("after ReloadTLS the HTTPS port serves %q; want b.example.org", got)
	}

	cancel()
	for {
		msg := next()
		if strings.HasPrefix(msg, "WATCHDOG=1\n") || strings.HasPrefix(msg, "STATUS=not alive: ") {
			continue
		}
		if msg != "STOPPING=1\nSTATUS=shutting down\n" {
			t.Errorf("at shutdown: %q; want STOPPING=1", msg)
		}
		break
	}
	stopped = true
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

// TestAlive: the watchdog's check fails while a stage is down and when
// the store does not answer in time.
func TestAlive(t *testing.T) {
	st, err := bolt.Open(t.TempDir()+"/anvil.db", bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var sup supervise.Supervisor
	if err := alive(t.Context(), &sup, st); err == nil || err.Error() != "not started" {
		t.Errorf("alive before the supervisor runs = %v; want not started", err)
	}
	sup.Stage("s", supervise.Component{Name: "c", Run: func(ctx context.Context) error { <-ctx.Done(); return nil }})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- sup.Run(ctx) }()
	<-sup.Serving()
	if err := alive(t.Context(), &sup, st); err != nil {
		t.Errorf("alive while serving = %v", err)
	}
	expired, cancelExpired := context.WithCancel(t.Context())
	cancelExpired()
	if err := alive(expired, &sup, st); err == nil {
		t.Error("alive with its deadline passed = nil")
	}
	cancel()
	<-done
	if err := alive(t.Context(), &sup, st); err == nil {
		t.Error("alive after the stop = nil")
	}
}
