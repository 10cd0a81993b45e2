package systemd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// listen opens a notify socket as systemd would, at name (a path or
// @abstract), and returns a function reading its next datagram.
func listen(t *testing.T, name string) func() string {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return func() string {
		t.Helper()
		buf := make([]byte, 4096)
		conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // a bound on failure, not a measurement
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("reading the notify socket: %v", err)
		}
		return string(buf[:n])
	}
}

func TestNotifyPathAndAbstract(t *testing.T) {
	for _, name := range []string{
		filepath.Join(t.TempDir(), "notify"),
		fmt.Sprintf("@anvil-test-%d-%d", os.Getpid(), time.Now().UnixNano()),
	} {
		t.Run(name, func(t *testing.T) {
			next := listen(t, name)
			n, err := NewNotifier(name)
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Ready("serving on 127.0.0.1:7080"); err != nil {
				t.Fatal(err)
			}
			if got, want := next(), "READY=1\nSTATUS=serving on 127.0.0.1:7080\n"; got != want {
				t.Errorf("got %q; want %q", got, want)
			}
			if err := n.Reloading("reloading"); err != nil {
				t.Fatal(err)
			}
			got := next()
			lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
			if len(lines) != 3 || lines[0] != "RELOADING=1" || !strings.HasPrefix(lines[1], "MONOTONIC_USEC=") || lines[2] != "STATUS=reloading" {
				t.Fatalf("reloading: %q", got)
			}
			usec, err := strconv.ParseInt(strings.TrimPrefix(lines[1], "MONOTONIC_USEC="), 10, 64)
			var ts unix.Timespec
			if err2 := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil || err2 != nil || usec <= 0 || usec > ts.Nano()/1e3 {
				t.Errorf("MONOTONIC_USEC %q is not a CLOCK_MONOTONIC reading in µs (now %d): %v", lines[1], ts.Nano()/1e3, err)
			}
			if err := n.Stopping("shutting down"); err != nil {
				t.Fatal(err)
			}
			if got, want := next(), "STOPPING=1\nSTATUS=shutting down\n"; got != want {
				t.Errorf("got %q; want %q", got, want)
			}
			if err := n.Notify("STATUS=a\nb"); err == nil {
				t.Error("a line with a newline was sent")
			}
		})
	}
}

func TestNilNotifier(t *testing.T) {
	n, err := NewNotifier("")
	if n != nil || err != nil {
		t.Fatalf("NewNotifier(\"\") = %v, %v; want nil, nil", n, err)
	}
	if err := n.Ready("x"); err != nil {
		t.Errorf("a nil notifier: %v", err)
	}
	if _, err := NewNotifier("vsock:2:1234"); err == nil || !strings.Contains(err.Error(), "NOTIFY_SOCKET") {
		t.Errorf("vsock: %v; want an error naming NOTIFY_SOCKET", err)
	}
}

func TestFromEnvUnsets(t *testing.T) {
	name := filepath.Join(t.TempDir(), "notify")
	t.Setenv(EnvNotifySocket, name)
	t.Setenv(EnvWatchdogUSec, "30000000")
	t.Setenv(EnvWatchdogPID, strconv.Itoa(os.Getpid()))
	env, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if env.Notifier == nil || env.Notifier.addr.Name != name || env.WatchdogEvery != 15*time.Second {
		t.Errorf("FromEnv = %+v; want the socket and a 15s ping", env)
	}
	for _, v := range []string{EnvNotifySocket, EnvWatchdogUSec, EnvWatchdogPID} {
		if _, ok := os.LookupEnv(v); ok {
			t.Errorf("%s is still set: the programs anvil starts would inherit it", v)
		}
	}
}

func TestWatchdogEvery(t *testing.T) {
	for _, tc := range []struct {
		usec, pid string
		want      time.Duration
		err       string
	}{
		{"", "", 0, ""},
		{"30000000", "", 15 * time.Second, ""},
		{"30000000", "42", 15 * time.Second, ""},
		{"30000000", "43", 0, ""}, // another process's watchdog
		{"1000", "", 500 * time.Microsecond, ""},
		{"0", "", 0, "WATCHDOG_USEC"},
		{"30s", "", 0, "WATCHDOG_USEC"},
		{"30000000", "x", 0, "WATCHDOG_PID"},
	} {
		got, err := WatchdogEvery(tc.usec, tc.pid, 42)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("WatchdogEvery(%q, %q) = %v, %v; want %v, an error naming %q", tc.usec, tc.pid, got, err, tc.want, tc.err)
		}
	}
}

// TestWatchdogStopsWhenNotAlive: pings follow passing checks only; a
// failing check sends its reason as the status instead, once, and a
// passing one resumes the pings with the service's status.
func TestWatchdogStopsWhenNotAlive(t *testing.T) {
	name := filepath.Join(t.TempDir(), "notify")
	next := listen(t, name)
	n, _ := NewNotifier(name)
	var calls atomic.Int32
	// Checks that answer at once never time out, however loaded the
	// machine running the test.
	w := &Watchdog{Notifier: n, Every: 5 * time.Millisecond, Timeout: time.Hour, Status: "serving", Logger: slog.New(slog.DiscardHandler),
		Check: func(context.Context) error {
			switch calls.Add(1) {
			case 2, 3:
				return errors.New("store: read timed out")
			}
			return nil
		}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	// The datagrams come in the order the checks ran: had a failing check
	// pinged, its WATCHDOG=1 would be among them.
	for i, want := range []string{
		"WATCHDOG=1\n",
		"STATUS=not alive: store: read timed out\n",
		"WATCHDOG=1\nSTATUS=serving\n",
		"WATCHDOG=1\n",
	} {
		if got := next(); got != want {
			t.Fatalf("datagram %d: %q; want %q", i, got, want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestWatchdogWedgedCheck: a check that does not answer (a store stuck
// in a lock) stops the pings as a failing one does; no second check is
// piled on it while it hangs, and its late answer resumes them.
func TestWatchdogWedgedCheck(t *testing.T) {
	name := filepath.Join(t.TempDir(), "notify")
	next := listen(t, name)
	n, _ := NewNotifier(name)
	var calls atomic.Int32
	wedged := make(chan struct{})
	w := &Watchdog{Notifier: n, Every: 5 * time.Millisecond, Status: "serving", Logger: slog.New(slog.DiscardHandler),
		Check: func(context.Context) error {
			if calls.Add(1) == 1 {
				<-wedged // ignores its context, as a wedged lock would
			}
			return nil
		}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	if got, want := next(), "STATUS=not alive: "+errHung.Error()+"\n"; got != want {
		t.Fatalf("first datagram %q; want %q", got, want)
	}
	close(wedged)
	if got, want := next(), "WATCHDOG=1\nSTATUS=serving\n"; got != want {
		t.Fatalf("after the check answered: %q; want %q", got, want)
	}
	if c := calls.Load(); c != 1 {
		t.Errorf("%d checks until the wedged one answered; want 1: none started while it hung", c)
	}
	if got := next(); got != "WATCHDOG=1\n" {
		t.Errorf("then: %q; want pings", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

func TestJournalStream(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	other, err := os.Create(filepath.Join(t.TempDir(), "other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ours := fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	for _, tc := range []struct {
		env  string
		f    *os.File
		want bool
	}{
		{ours, f, true},
		{ours, other, false}, // inherited by a child whose stderr is elsewhere
		{"", f, false},
		{fmt.Sprintf("%d:%d", st.Dev, st.Ino+1), f, false},
		{ours + ":1", f, false},
		{"x:y", f, false},
	} {
		if got := matchesJournalStream(tc.env, tc.f); got != tc.want {
			t.Errorf("JOURNAL_STREAM=%q on %s: %v; want %v", tc.env, tc.f.Name(), got, tc.want)
		}
	}
	t.Setenv(EnvJournalStream, ours)
	if !IsJournalStream(f) {
		t.Error("IsJournalStream is false with JOURNAL_STREAM naming the file")
	}
}

func TestJournalHandler(t *testing.T) {
	var buf bytes.Buffer
	text := func(w io.Writer, o *slog.HandlerOptions) slog.Handler { return slog.NewTextHandler(w, o) }
	l := slog.New(NewJournalHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}, text)).With("component", "dhcp")
	l.Debug("offer", "mac", "52:54:00:00:00:01")
	l.Info("listening", "addr", "0.0.0.0:67")
	l.Warn("slow")
	l.WithGroup("g").Error("failed", "err", "boom")
	l.Log(t.Context(), slog.LevelInfo+2, "between")
	want := `<7>level=DEBUG msg=offer component=dhcp mac=52:54:00:00:00:01
<6>level=INFO msg=listening component=dhcp addr=0.0.0.0:67
<4>level=WARN msg=slow component=dhcp
<3>level=ERROR msg=failed component=dhcp g.err=boom
<6>level=INFO+2 msg=between component=dhcp
`
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
}
