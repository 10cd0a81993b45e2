// Package syslog receives syslog messages over UDP (RFC 5426) from the
// machines Anvil boots — the boot environment, the installed OS's first
// boot, a BMC, a switch — and hands each one on as a machinelog.Event, so a
// machine's syslog lines sit in its record next to what DHCP, TFTP and HTTP
// did for it.
//
// It parses RFC 5424 and RFC 3164 (BSD: busybox syslogd, glibc's and musl's
// syslog(3), docker's syslog driver, rsyslog's forward formats) with
// github.com/leodido/go-syslog, choosing by the VERSION that follows the PRI
// ("<PRI>1 " is RFC 5424). A datagram that is neither, such as a kernel
// netconsole line, is still kept, as text.
//
// It owns the read loop of a packet connection it is given. It must not
// import any other package of this module but machinelog: who the sender
// is, and where its lines go, is the Sink's business.
package syslog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/anvilproj/anvil/internal/machinelog"
)

// Port is the syslog UDP port (RFC 5426 section 3.3).
const Port = 514

// DefaultMaxMessageSize is the longest message kept whole when
// Config.MaxMessageSize is 0: rsyslog's default, four times the 2048 octets
// RFC 5424 section 6.1 asks every receiver to accept.
const DefaultMaxMessageSize = 8192

// maxDatagram is the largest UDP payload (65,535 less the UDP header rounds
// up to this for the buffer); reading into a buffer this size tells an
// oversized message's real length.
const maxDatagram = 64 * 1024

// logEvery rate-limits the log lines about bad datagrams.
const logEvery = 10 * time.Second

var messages = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "anvil_syslog_messages_total",
	Help: "Syslog datagrams received, by outcome: received, unparsed (no valid PRI; kept as text), oversized (kept truncated) or empty (dropped).",
}, []string{"outcome"})

func init() {
	for _, o := range []string{OutcomeReceived, OutcomeUnparsed, OutcomeOversized, outcomeEmpty} {
		messages.WithLabelValues(o)
	}
}

// Config configures a Server.
type Config struct {
	// Events receives one Event per datagram (Service "syslog", IP the
	// sender, Outcome one of the Outcome constants). Required. Record is
	// called on the read loop, so it must not block.
	Events machinelog.Sink
	// Logger receives rate-limited lines about bad datagrams. If nil, uses
	// slog.Default().
	Logger *slog.Logger
	// MaxMessageSize is the longest message kept whole, in bytes; a longer
	// one is kept truncated with Outcome "oversized". If 0, uses
	// DefaultMaxMessageSize. At most 65535.
	MaxMessageSize int
}

// Server is a syslog receiver. It is safe for concurrent use: Serve may run
// on several connections at once (say, IPv4 and IPv6).
type Server struct {
	cfg Config
	log *slog.Logger

	mu         sync.Mutex // guards the rate limit below
	nextLog    time.Time
	suppressed int
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Events == nil {
		return nil, errors.New("syslog: no event sink")
	}
	switch {
	case cfg.MaxMessageSize == 0:
		cfg.MaxMessageSize = DefaultMaxMessageSize
	case cfg.MaxMessageSize < 0 || cfg.MaxMessageSize > maxDatagram-1:
		return nil, fmt.Errorf("syslog: max message size %d: want 1 to %d", cfg.MaxMessageSize, maxDatagram-1)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Server{cfg: cfg, log: cfg.Logger}, nil
}

// Serve reads datagrams from conn and records an Event for each until ctx
// ends, then returns nil; or returns the read error that ended it. A bad
// datagram never ends it: it is counted, logged (at most once per ten
// seconds) and recorded or skipped. Serve does not close conn; the caller
// does, after Serve returns.
func (s *Server) Serve(ctx context.Context, conn net.PacketConn) error {
	// A read deadline in the past wakes the blocked read when ctx ends.
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	p := newParser(s.cfg.MaxMessageSize)
	buf := make([]byte, maxDatagram)
	for {
		n, addr, err := conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("syslog: read: %w", err)
		}
		s.handle(p, buf[:n], addr) // n may be 0: an empty datagram
	}
}

// handle parses one datagram and records it.
func (s *Server) handle(p *parser, b []byte, from net.Addr) {
	outcome, text := p.parse(b)
	messages.WithLabelValues(outcome).Inc()
	ip := sourceIP(from)
	switch outcome {
	case outcomeEmpty:
		s.logBad(slog.LevelWarn, "syslog: empty datagram skipped", ip, len(b))
		return
	case OutcomeOversized:
		s.logBad(slog.LevelWarn, "syslog: oversized message truncated", ip, len(b))
	case OutcomeUnparsed:
		// Normal for netconsole; worth a look when a sender is misconfigured.
		s.logBad(slog.LevelDebug, "syslog: datagram without a valid PRI kept as text", ip, len(b))
	}
	s.cfg.Events.Record(machinelog.Event{
		Service: machinelog.ServiceSyslog,
		IP:      ip,
		Outcome: outcome,
		Message: text,
	})
}

// logBad logs a bad datagram, at most once per logEvery, saying how many
// were not logged since.
func (s *Server) logBad(level slog.Level, msg string, from netip.Addr, size int) {
	if !s.log.Enabled(context.Background(), level) {
		return
	}
	now := time.Now()
	s.mu.Lock()
	if now.Before(s.nextLog) {
		s.suppressed++
		s.mu.Unlock()
		return
	}
	suppressed := s.suppressed
	s.suppressed = 0
	s.nextLog = now.Add(logEvery)
	s.mu.Unlock()
	s.log.Log(context.Background(), level, msg, "from", from, "bytes", size, "max", s.cfg.MaxMessageSize, "not_logged_since", suppressed)
}

// sourceIP is the sender's address, IPv4 unmapped; zero if addr has none.
func sourceIP(addr net.Addr) netip.Addr {
	if u, ok := addr.(*net.UDPAddr); ok {
		ip, _ := netip.AddrFromSlice(u.IP)
		return ip.Unmap()
	}
	if addr == nil {
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}
