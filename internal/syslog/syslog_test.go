package syslog

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/testtool"
)

// collect is a Sink that hands events to the test.
type collect chan machinelog.Event

func (c collect) Record(e machinelog.Event) { c <- e }

func (c collect) next(t *testing.T) machinelog.Event {
	t.Helper()
	select {
	case e := <-c:
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5 s")
		return machinelog.Event{}
	}
}

// serve runs a Server on a loopback port and returns its address and the
// events it records. Serve's result is checked at cleanup.
func serve(t *testing.T, cfg Config) (*net.UDPAddr, collect) {
	t.Helper()
	events := make(collect, 100)
	cfg.Events = events
	cfg.Logger = slog.New(slog.DiscardHandler)
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, conn) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve after cancel = %v; want nil", err)
		}
		conn.Close()
	})
	return conn.LocalAddr().(*net.UDPAddr), events
}

func send(t *testing.T, to *net.UDPAddr, datagrams ...string) {
	t.Helper()
	c, err := net.DialUDP("udp", nil, to)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, d := range datagrams {
		if _, err := c.Write([]byte(d)); err != nil {
			t.Fatal(err)
		}
	}
}

func counter(t *testing.T, outcome string) float64 {
	t.Helper()
	var m dto.Metric
	if err := messages.WithLabelValues(outcome).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestServeBadDatagramsDoNotStopIt: garbage, an empty datagram and an
// oversized one are counted; the first and last are kept, the empty one
// skipped; the next message still arrives.
func TestServeBadDatagramsDoNotStopIt(t *testing.T) {
	addr, events := serve(t, Config{MaxMessageSize: 100})
	before := map[string]float64{}
	for _, o := range []string{OutcomeReceived, OutcomeUnparsed, OutcomeOversized, outcomeEmpty} {
		before[o] = counter(t, o)
	}
	send(t, addr, "\xff\x00garbage", "", "<13>"+strings.Repeat("x", 200), "<14>Jan  1 00:00:12 udhcpc[123]: lease obtained")
	want := []struct{ outcome, prefix string }{
		{OutcomeUnparsed, "\ufffd" + `\x00garbage`},
		{OutcomeOversized, "notice xxxx"},
		{OutcomeReceived, "info udhcpc[123]: lease obtained"},
	}
	for _, w := range want {
		e := events.next(t)
		if e.Outcome != w.outcome || !strings.HasPrefix(e.Message, w.prefix) || e.Service != machinelog.ServiceSyslog ||
			e.IP != netip.MustParseAddr("127.0.0.1") || e.MAC.IsValid() {
			t.Errorf("event = %+v; want service syslog, IP 127.0.0.1, outcome %s, message starting %q", e, w.outcome, w.prefix)
		}
	}
	for o, n := range map[string]float64{OutcomeReceived: 1, OutcomeUnparsed: 1, OutcomeOversized: 1, outcomeEmpty: 1} {
		if got := counter(t, o) - before[o]; got != n {
			t.Errorf("anvil_syslog_messages_total{outcome=%q} grew by %v; want %v", o, got, n)
		}
	}
}

func TestServeEndsOnReadError(t *testing.T) {
	s, err := New(Config{Events: machinelog.Discard})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), conn) }()
	conn.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Serve on a closed conn = %v; want an error wrapping net.ErrClosed", err)
	}
}

func TestServeCancelledBeforeStart(t *testing.T) {
	s, err := New(Config{Events: machinelog.Discard})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Serve(ctx, conn); err != nil {
		t.Errorf("Serve with a cancelled ctx = %v; want nil", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{name: "no sink", cfg: Config{}},
		{name: "negative size", cfg: Config{Events: machinelog.Discard, MaxMessageSize: -1}},
		{name: "larger than UDP", cfg: Config{Events: machinelog.Discard, MaxMessageSize: 70000}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); err == nil {
				t.Errorf("New(%+v) succeeded; want error", tc.cfg)
			}
		})
	}
}

// TestLoggerEndToEnd sends with a real client, util-linux logger(1), in
// both of its formats.
func TestLoggerEndToEnd(t *testing.T) {
	logger := testtool.RequireBinary(t, "logger", "bsdutils")
	addr, events := serve(t, Config{})
	file := filepath.Join(t.TempDir(), "lines")
	if err := os.WriteFile(file, []byte("first line\nsecond line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const h, pid = `[^ :]+`, `[0-9]+`
	tests := []struct {
		name string
		args []string
		want []string // regexps, one per datagram
	}{
		{
			name: "rfc5424",
			args: []string{"--rfc5424", "-t", "anvil-e2e", "-p", "daemon.err", "hello 5424"},
			want: []string{`^err ` + h + ` anvil-e2e: hello 5424$`},
		},
		{
			name: "rfc5424 with pid, msgid and structured data",
			args: []string{"--rfc5424", "-i", "-t", "anvil-e2e", "--msgid", "ACT", "--sd-id", "x@1", "--sd-param", `a="b"`, "with sd"},
			want: []string{`^notice ` + h + ` anvil-e2e\[` + pid + `\]: with sd$`},
		},
		{
			name: "rfc5424 without time and host",
			args: []string{"--rfc5424=notime,nohost", "-t", "anvil-e2e", "-p", "local7.debug", "bare"},
			want: []string{`^debug anvil-e2e: bare$`},
		},
		{
			name: "rfc3164",
			args: []string{"--rfc3164", "-t", "anvil-e2e", "-p", "user.info", "hello 3164"},
			want: []string{`^info ` + h + ` anvil-e2e: hello 3164$`},
		},
		{
			name: "rfc3164 kernel facility, emergency",
			args: []string{"--rfc3164", "-t", "kernel", "-p", "kern.emerg", "Kernel panic - not syncing"},
			want: []string{`^emerg ` + h + ` kernel: Kernel panic - not syncing$`},
		},
		{
			name: "a file, one datagram per line",
			args: []string{"--rfc3164", "-t", "anvil-e2e", "-f", file},
			want: []string{`^notice ` + h + ` anvil-e2e: first line$`, `^notice ` + h + ` anvil-e2e: second line$`},
		},
		{
			name: "longer than MaxMessageSize",
			args: []string{"--rfc5424", "-t", "anvil-e2e", "--size", "20000", strings.Repeat("z", 10000)},
			want: []string{`^notice ` + h + ` anvil-e2e: z+ \[truncated: [0-9]+ bytes, first 8192 kept\]$`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--server", "127.0.0.1", "--port", strconv.Itoa(addr.Port), "--udp"}, tc.args...)
			if out, err := exec.Command(logger, args...).CombinedOutput(); err != nil {
				t.Fatalf("logger %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			for _, w := range tc.want {
				e := events.next(t)
				if !regexp.MustCompile(w).MatchString(e.Message) || e.IP != netip.MustParseAddr("127.0.0.1") {
					t.Errorf("event from logger = %q from %v; want a match for %s from 127.0.0.1", e.Message, e.IP, w)
				}
			}
		})
	}
}
