package dhcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/lograte"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/machinelog"
)

// Mode says which clients the server answers and with what.
type Mode string

// Modes. See docs/dhcp.md for what each client type gets in each.
const (
	// ModeReservation answers only MACs the Backend knows, with their
	// reserved address, lease options and boot information. Anvil is the
	// network's DHCP server.
	ModeReservation Mode = "reservation"
	// ModeProxy never assigns addresses: it answers only network boot
	// clients (option 60 PXEClient or HTTPClient, or a running iPXE) that
	// the Backend knows, with boot information alone, next to the
	// network's own DHCP server (PXE 2.1 proxyDHCP).
	ModeProxy Mode = "proxy"
	// ModeAutoProxy is ModeProxy that also answers unknown MACs: they get
	// iPXE and their script URL, where the HTTP side serves a generic
	// script (discovery).
	ModeAutoProxy Mode = "auto-proxy"
	// ModeOff answers nothing: Serve returns at once.
	ModeOff Mode = "off"
)

// ParseMode returns the Mode named s.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeReservation, ModeProxy, ModeAutoProxy, ModeOff:
		return m, nil
	}
	return "", fmt.Errorf("dhcp mode %q: want reservation, proxy, auto-proxy or off", s)
}

// proxy reports whether m never hands out addresses.
func (m Mode) proxy() bool { return m == ModeProxy || m == ModeAutoProxy }

// DefaultLeaseTime is the lease time of hosts whose Host.LeaseTime is 0
// and Config.DefaultLeaseTime is 0. Addresses are reservations, so a short
// lease only costs a renewal now and then, and an edited Hardware reaches
// the machine within half of it (T1).
const DefaultLeaseTime = time.Hour

// Config configures a Server. ServerIP, HTTPBase and Backend are required
// unless Mode is ModeOff.
type Config struct {
	// Mode is what the server answers. If empty, uses ModeReservation.
	Mode Mode
	// ServerIP is this server's IPv4 address on the provisioning network:
	// the server identifier (option 54) and, for TFTP boot files, the
	// next-server address (siaddr).
	ServerIP netip.Addr
	// HTTPBase is the root URL of Anvil's HTTP boot service as machines
	// reach it, without a trailing slash, e.g. "http://10.0.0.1:7080".
	// Script URLs are HTTPBase+ipxe.ScriptPath(mac); HTTP boot clients get
	// HTTPBase+ipxe.BinaryPath(binary).
	HTTPBase string
	// Backend says what the server knows about a MAC.
	Backend Backend
	// Unknown, if set, gives addresses to the MACs Backend does not know
	// in ModeReservation (discovery: anvil serve --discovery-pool). If
	// nil, those are not answered. The other modes give no addresses and
	// do not ask it.
	Unknown UnknownBackend
	// Events receives one machinelog.Event per packet with a client MAC.
	// If nil, uses machinelog.Discard (and the event text is not built).
	Events machinelog.Sink
	// Logger logs every decision at Info (ignored packets at Debug), and
	// malformed packets at Info at most once a second. If nil, uses
	// slog.Default().
	Logger *slog.Logger
	// DefaultLeaseTime is the lease time of hosts without their own. If 0,
	// uses DefaultLeaseTime.
	DefaultLeaseTime time.Duration
	// RelayPort is the port relayed replies are sent to on giaddr. If 0,
	// uses ServerPort (67); tests set it to reach a relay on a free port.
	RelayPort int
	// Workers is how many goroutines read and answer packets per
	// connection. If 0, uses 1: one reading in batches answers tens of
	// thousands of requests a second, and more contend for the socket.
	// Raise it for a Backend whose Lookup blocks (a remote store).
	Workers int
	// Clock stamps Events and drives the malformed-packet log limit (one
	// line a second; every packet is still counted). If nil,
	// clock.Real.
	Clock clock.Clock
}

// Server answers DHCPv4 and PXE requests as its Config says. It keeps no
// lease state. It is safe for concurrent use: Serve may run on several
// connections (port 67 and PXEPort) at once.
type Server struct {
	mode      Mode
	serverIP  netip.Addr
	serverID  []byte // ServerIP's 4 bytes: option 54 and siaddr
	httpBase  string
	backend   Backend
	unknown   UnknownBackend  // nil: unknown MACs get no address
	events    machinelog.Sink // nil: discard
	log       *slog.Logger
	lease     time.Duration
	relayPort uint16
	workers   int
	now       func() time.Time
	// malformedLog lets one malformed-packet line a second through: a
	// broken or hostile sender must not flood the log.
	malformedLog *lograte.Limiter
	// templates keeps answers to reserved clients in wire form
	// (template.go).
	templates templates
}

// New returns a Server for cfg, or an error naming the first bad field.
func New(cfg Config) (*Server, error) {
	s := &Server{
		mode:      cfg.Mode,
		serverIP:  cfg.ServerIP,
		httpBase:  strings.TrimSuffix(cfg.HTTPBase, "/"),
		backend:   cfg.Backend,
		unknown:   cfg.Unknown,
		events:    cfg.Events,
		log:       cfg.Logger,
		lease:     cfg.DefaultLeaseTime,
		relayPort: ServerPort,
		workers:   cfg.Workers,
		now:       clock.Or(cfg.Clock).Now,
	}
	s.malformedLog = lograte.New(lograte.DefaultEvery, s.now)
	if s.mode == "" {
		s.mode = ModeReservation
	}
	if _, err := ParseMode(string(s.mode)); err != nil {
		return nil, err
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.lease <= 0 {
		s.lease = DefaultLeaseTime
	}
	if cfg.RelayPort != 0 {
		if cfg.RelayPort < 0 || cfg.RelayPort > 65535 {
			return nil, fmt.Errorf("dhcp: relay port %d out of range", cfg.RelayPort)
		}
		s.relayPort = uint16(cfg.RelayPort)
	}
	if s.workers <= 0 {
		s.workers = 1
	}
	if s.mode == ModeOff {
		return s, nil
	}
	if !s.serverIP.Is4() {
		return nil, fmt.Errorf("dhcp: server IP %q: want an IPv4 address", cfg.ServerIP)
	}
	ip4 := s.serverIP.As4()
	s.serverID = ip4[:]
	if s.backend == nil {
		return nil, errors.New("dhcp: no backend")
	}
	u, err := url.Parse(s.httpBase)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("dhcp: HTTP base %q: want an absolute http:// URL such as http://%s:7080", cfg.HTTPBase, s.serverIP)
	}
	return s, nil
}

// Mode returns the mode the server runs in.
func (s *Server) Mode() Mode { return s.mode }

// addrPortConn is what *net.UDPConn offers beyond net.PacketConn: reads and
// writes without allocating a net.Addr per packet.
type addrPortConn interface {
	ReadFromUDPAddrPort(b []byte) (int, netip.AddrPort, error)
	WriteToUDPAddrPort(b []byte, addr netip.AddrPort) (int, error)
}

// maxPacket is the read buffer of each worker: any UDP datagram fits, so a
// large packet is parsed whole rather than truncated into a parse error.
const maxPacket = 64 << 10

// Serve answers the requests arriving on conn until ctx ends (it then
// returns nil) or reading from conn fails (it returns the error). A packet
// that cannot be parsed or answered is logged, counted and skipped.
// Requests are handled by Config.Workers goroutines, each with its own
// buffer. The port conn is bound to decides the role: PXEPort answers
// proxyDHCP REQUESTs, any other port is a DHCP server port.
//
// Serve does not close conn; when ctx ends it sets a past read deadline on
// it to stop the readers, and the caller closes it. With ModeOff, Serve
// returns nil at once.
func (s *Server) Serve(ctx context.Context, conn net.PacketConn) error {
	if s.mode == ModeOff {
		return nil
	}
	port := 0
	if ua, ok := conn.LocalAddr().(*net.UDPAddr); ok {
		port = ua.Port
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		// Wake every reader blocked in ReadFrom.
		_ = conn.SetReadDeadline(time.Unix(1, 0))
	})
	defer stop()

	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for range s.workers {
		wg.Go(func() {
			if err := s.worker(ctx, conn, port); err != nil {
				errOnce.Do(func() { firstErr = err })
				cancel()
			}
		})
	}
	wg.Wait()
	return firstErr
}

// worker reads, answers and writes packets until ctx ends (nil) or a read
// fails (the error).
func (s *Server) worker(ctx context.Context, conn net.PacketConn, port int) error {
	if uc, ok := conn.(*net.UDPConn); ok && batchIO {
		err := s.batchWorker(ctx, uc, port)
		if !errors.Is(err, errNoBatch) {
			return err
		}
		// No recvmmsg in this kernel: read one datagram at a time.
	}
	buf := make([]byte, maxPacket)
	sc := newScratch()
	fast, _ := conn.(addrPortConn)
	for {
		var (
			n    int
			from netip.AddrPort
			err  error
		)
		if fast != nil {
			n, from, err = fast.ReadFromUDPAddrPort(buf)
		} else {
			var a net.Addr
			n, a, err = conn.ReadFrom(buf)
			if ua, ok := a.(*net.UDPAddr); ok {
				from = ua.AddrPort()
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("dhcp: read: %w", err)
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		s.handle(ctx, conn, fast, sc, buf[:n], from, port)
	}
}

// handle answers one datagram.
func (s *Server) handle(ctx context.Context, conn net.PacketConn, fast addrPortConn, sc *scratch, pkt []byte, from netip.AddrPort, port int) {
	out, to, d := s.process(ctx, sc, pkt, from, port)
	if out == nil {
		return
	}
	var err error
	if fast != nil {
		_, err = fast.WriteToUDPAddrPort(out, to)
	} else {
		_, err = conn.WriteTo(out, net.UDPAddrFromAddrPort(to))
	}
	s.sent(ctx, d.MAC, d.Reply, to, err)
}

// process parses, answers, records and encodes one datagram. The reply
// bytes (nil if none) are in sc's memory, valid until its next use.
func (s *Server) process(ctx context.Context, sc *scratch, pkt []byte, from netip.AddrPort, port int) ([]byte, netip.AddrPort, *Decision) {
	var (
		key   templateKey
		learn bool
	)
	sc.looked.ok = false
	if s.mode == ModeReservation && port != PXEPort {
		var t *template
		t, key, learn = s.templated(ctx, sc, pkt)
		if t != nil {
			out := t.fill(sc, pkt)
			sc.decision = t.decision
			to := s.destinationOf(pkt[24:28], pkt[12:16], false, from, false)
			s.record(ctx, &sc.decision, from, to, t)
			return out, to, &sc.decision
		}
	}
	req, err := sc.parseInto(pkt)
	if err != nil {
		countPacket(typeMalformed, OutcomeMalformed)
		if ok, skipped := s.malformedLog.Allow(); ok && s.log.Enabled(ctx, slog.LevelInfo) {
			s.log.LogAttrs(ctx, slog.LevelInfo, "dhcp: malformed packet (further ones within a second are only counted)",
				slog.String("from", from.String()), slog.Int("bytes", len(pkt)), slog.String("outcome", OutcomeMalformed),
				slog.String("reason", err.Error()), slog.Int("skipped", skipped))
		}
		return nil, netip.AddrPort{}, nil
	}
	resp, to, d := s.reply(ctx, req, from, port, sc)
	s.record(ctx, &d, from, to, nil)
	if resp == nil {
		return nil, netip.AddrPort{}, nil
	}
	sc.out = appendPacket(sc.out[:0], resp)
	sc.decision = d
	if learn {
		s.learn(sc, key, resp, &d)
	}
	return sc.out, to, &sc.decision
}

// sent counts a reply sent, or logs why it could not be.
func (s *Server) sent(ctx context.Context, mac macaddr.MAC, reply dhcpv4.MessageType, to netip.AddrPort, err error) {
	if err != nil {
		sendErrors.Inc()
		s.log.LogAttrs(ctx, slog.LevelWarn, "dhcp: sending reply failed", slog.String("mac", mac.String()),
			slog.String("to", to.String()), slog.String("reply", msgTypeName(reply)), slog.Any("error", err))
		return
	}
	countReply(reply)
}

// record counts, logs and emits the decision d about a packet from from.
// With t, the answer came from template t, which holds d's counter and
// sentence: a reserved client costs no allocation here unless the decision
// log is enabled at Info.
func (s *Server) record(ctx context.Context, d *Decision, from, to netip.AddrPort, t *template) {
	if t != nil {
		t.packets.Inc()
	} else {
		countPacket(typeLabel(d.Type), d.Outcome)
	}
	level := slog.LevelInfo
	if d.Outcome == OutcomeIgnored || d.Outcome == OutcomeNotPXEClient {
		// Packets for other servers and from ordinary clients are the
		// normal traffic of a shared segment.
		level = slog.LevelDebug
	}
	logIt := s.log.Enabled(ctx, level)
	if !logIt && s.events == nil {
		return
	}
	var msg string
	if t != nil {
		msg = t.msg
	} else {
		msg = d.Message()
	}
	if logIt {
		attrs := []slog.Attr{
			slog.String("mac", d.MAC.String()),
			slog.String("type", msgTypeName(d.Type)),
			slog.String("outcome", d.Outcome),
			slog.String("from", from.String()),
		}
		if d.IP.IsValid() {
			attrs = append(attrs, slog.String("ip", d.IP.String()))
		}
		if d.Reason != "" {
			attrs = append(attrs, slog.String("reason", d.Reason))
		}
		if d.Reply != dhcpv4.MessageTypeNone {
			attrs = append(attrs, slog.String("to", to.String()))
		}
		s.log.LogAttrs(ctx, level, msg, attrs...)
	}
	if s.events != nil && d.MAC.IsValid() {
		s.events.Record(machinelog.Event{
			Time:    s.now(),
			Service: machinelog.ServiceDHCP,
			MAC:     d.MAC,
			IP:      d.IP,
			Outcome: d.Outcome,
			Message: msg,
		})
	}
}
