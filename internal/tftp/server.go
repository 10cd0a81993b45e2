package tftp

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/lograte"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/machinelog"
)

// Defaults for the zero values of Config.
const (
	// DefaultTimeout is the first retransmission timeout. Each timeout
	// without progress doubles it, up to MaxBackoff.
	DefaultTimeout = time.Second
	// MaxBackoff caps the doubled retransmission timeout (unless the
	// client asked for a longer one with the timeout option).
	MaxBackoff = 8 * time.Second
	// DefaultRetries is how many times a packet or window is sent again
	// without progress before the transfer is abandoned: with the defaults
	// a silent client is given up on after 1+2+4+8+8+8 = 31 s.
	DefaultRetries = 5
	// DefaultMaxBlockSize is the largest block size granted. 1468 bytes of
	// data plus the 4-byte TFTP, 8-byte UDP and 20-byte IPv4 headers make
	// a 1500-byte packet: one Ethernet frame, no IP fragments (PXE ROMs
	// handle fragments badly, and one lost fragment loses the block).
	// Over IPv6 (40-byte header) the default grants 20 bytes less, 1448.
	DefaultMaxBlockSize = 1468
	// DefaultMaxWindowSize is the largest RFC 7440 window granted. 64
	// blocks of 1468 bytes are ~92 KiB in flight, which fits the default
	// Linux socket receive buffer (212,992 bytes) of a client.
	DefaultMaxWindowSize = 64
	// DefaultMaxTransfers bounds concurrent transfers. Each holds a
	// read-ahead buffer of at most ~190 KiB with the defaults (~66 KiB
	// for iPXE's lockstep blocks), so the bound is also a memory bound
	// (~190 MiB). At 512, a boot storm of 1,000 machines (bench/storm)
	// had its RRQs beyond the 512th dropped and asked again a second
	// later, 1,987 retransmissions; 1024 takes such a storm at once.
	DefaultMaxTransfers = 1024
)

// ipv6HeaderExtra is how much bigger an IPv6 header is than an IPv4 one.
const ipv6HeaderExtra = 20

// Config configures a Server. Only FS is required.
type Config struct {
	// FS holds the files served, read-only. Names are resolved with
	// fs.FS semantics: confinement is the FS's job (os.Root.FS refuses
	// symlinks that leave the root), and requests that are not clean
	// relative paths are refused before FS is asked. Open errors other
	// than fs.ErrNotExist are answered with an access violation.
	FS fs.FS
	// Logger receives one line per transfer and per refused or malformed
	// request. If nil, uses slog.Default().
	Logger *slog.Logger
	// Events receives one machinelog.Event per request (Service
	// machinelog.ServiceTFTP, Outcome one of the Outcome* constants). If
	// nil, uses machinelog.Discard.
	Events machinelog.Sink
	// ListenPacket opens the socket of one transfer (RFC 1350 section 4:
	// each transfer has its own port). The server closes it. If nil, uses
	// a UDP socket on port 0 of the local address the request came to.
	ListenPacket func(ctx context.Context) (net.PacketConn, error)
	// Timeout is the first retransmission timeout; each timeout without
	// progress doubles it, up to MaxBackoff. A client's timeout option
	// (RFC 2349) replaces it for that transfer. If 0, uses DefaultTimeout.
	Timeout time.Duration
	// Retries is how many times a packet or window is sent again without
	// progress before the transfer is abandoned. If 0, uses
	// DefaultRetries.
	Retries int
	// MaxBlockSize is the largest blksize (RFC 2348) granted, 8..65464.
	// If 0, uses DefaultMaxBlockSize (1448 for IPv6 clients).
	MaxBlockSize int
	// MaxWindowSize is the largest windowsize (RFC 7440) granted,
	// 1..65535. If 0, uses DefaultMaxWindowSize.
	MaxWindowSize int
	// MaxTransfers bounds concurrent transfers; requests beyond it are
	// dropped (the client asks again) and recorded as refused. If 0, uses
	// DefaultMaxTransfers.
	MaxTransfers int
	// RefusalBurst and RefusalEvery limit how many refused and not-found
	// requests of one source address become an Event and a log line: up
	// to RefusalBurst at once, then one per RefusalEvery. The others are
	// only counted (anvil_tftp_transfers_total and
	// anvil_tftp_refusals_suppressed_total) and reported in one Event of
	// outcome OutcomeSuppressed once the source earns a token again (at
	// its next request, at a sweep of every source every 10 s that a
	// request triggers, or when Serve returns). If 0, uses
	// DefaultRefusalBurst and DefaultRefusalEvery; a negative RefusalBurst
	// records every refusal.
	RefusalBurst int
	RefusalEvery time.Duration
	// Clock stamps Events and drives the refusal limiter. If nil,
	// clock.Real. Retransmission timeouts are socket read deadlines, which
	// the kernel's poller measures on the wall clock, so they do not
	// follow it.
	Clock clock.Clock
}

// Server is a read-only TFTP server. Create it with New; it is safe for
// concurrent use, and Serve may run on several sockets at once (the
// transfer bound is shared).
type Server struct {
	fs           fs.FS
	log          *slog.Logger
	events       machinelog.Sink
	listen       func(ctx context.Context) (net.PacketConn, error)
	timeout      time.Duration
	retries      int
	maxBlock     int
	maxBlock6    int
	maxWindow    int
	slots        chan struct{}
	malformedLog *lograte.Limiter // one malformed-packet log line a second
	now          func() time.Time
	refusals     *refusalLimiter // nil: every refusal is recorded

	mu sync.Mutex
	// active maps a client's address to its newest transfer, to drop
	// retransmitted requests while the first reply is on its way.
	active map[netip.AddrPort]*transfer
}

// New returns a Server for cfg, or an error if cfg is invalid.
func New(cfg Config) (*Server, error) {
	if cfg.FS == nil {
		return nil, errors.New("tftp: no FS to serve")
	}
	s := &Server{
		fs:        cfg.FS,
		log:       cfg.Logger,
		events:    cfg.Events,
		listen:    cfg.ListenPacket,
		timeout:   cfg.Timeout,
		retries:   cfg.Retries,
		maxBlock:  cfg.MaxBlockSize,
		maxBlock6: cfg.MaxBlockSize,
		maxWindow: cfg.MaxWindowSize,
		active:    make(map[netip.AddrPort]*transfer),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.events == nil {
		s.events = machinelog.Discard
	}
	s.now = clock.Or(cfg.Clock).Now
	s.malformedLog = lograte.New(lograte.DefaultEvery, s.now)
	switch {
	case cfg.RefusalEvery < 0:
		return nil, fmt.Errorf("tftp: negative RefusalEvery %v", cfg.RefusalEvery)
	case cfg.RefusalBurst >= 0:
		burst, every := cfg.RefusalBurst, cfg.RefusalEvery
		if burst == 0 {
			burst = DefaultRefusalBurst
		}
		if every == 0 {
			every = DefaultRefusalEvery
		}
		s.refusals = newRefusalLimiter(burst, every)
	}
	switch {
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("tftp: negative Timeout %v", cfg.Timeout)
	case cfg.Timeout == 0:
		s.timeout = DefaultTimeout
	}
	switch {
	case cfg.Retries < 0:
		return nil, fmt.Errorf("tftp: negative Retries %d", cfg.Retries)
	case cfg.Retries == 0:
		s.retries = DefaultRetries
	}
	switch {
	case cfg.MaxBlockSize == 0:
		s.maxBlock, s.maxBlock6 = DefaultMaxBlockSize, DefaultMaxBlockSize-ipv6HeaderExtra
	case cfg.MaxBlockSize < minBlksize || cfg.MaxBlockSize > maxBlksize:
		return nil, fmt.Errorf("tftp: MaxBlockSize %d is outside %d..%d", cfg.MaxBlockSize, minBlksize, maxBlksize)
	}
	switch {
	case cfg.MaxWindowSize == 0:
		s.maxWindow = DefaultMaxWindowSize
	case cfg.MaxWindowSize < minWindowsize || cfg.MaxWindowSize > maxWindowsize:
		return nil, fmt.Errorf("tftp: MaxWindowSize %d is outside %d..%d", cfg.MaxWindowSize, minWindowsize, maxWindowsize)
	}
	n := cfg.MaxTransfers
	switch {
	case n < 0:
		return nil, fmt.Errorf("tftp: negative MaxTransfers %d", n)
	case n == 0:
		n = DefaultMaxTransfers
	}
	s.slots = make(chan struct{}, n)
	return s, nil
}

// aLongTimeAgo is a read deadline that unblocks a read at once.
var aLongTimeAgo = time.Unix(1, 0)

// Serve answers requests arriving on conn until ctx ends, then stops the
// transfers in progress (each client gets an ERROR), waits for them and
// returns nil. One bad packet is logged, counted and skipped; only a read
// error on conn ends Serve early, and is returned.
//
// Serve uses conn's read deadline to stop; conn stays open and belongs to
// the caller. When conn is a UDP socket bound to an unspecified address,
// Serve asks for each request's destination address so the transfer
// socket uses the address the client sent to.
func (s *Server) Serve(ctx context.Context, conn net.PacketConn) error {
	var wg sync.WaitGroup
	defer s.flushSuppressed() // after the transfers: their refusals count too
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(aLongTimeAgo) })
	defer stop()

	read := newRequestReader(conn)
	buf := make([]byte, 64<<10)
	for {
		n, src, local, err := read(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("tftp: read request: %w", err)
		}
		s.handle(ctx, &wg, conn, buf[:n], src, local)
	}
}

// newRequestReader returns a function reading one packet from conn, with
// its source and the local address it was sent to (invalid if unknown).
func newRequestReader(conn net.PacketConn) func([]byte) (int, netip.AddrPort, netip.Addr, error) {
	local := netip.Addr{}
	if ua, ok := conn.LocalAddr().(*net.UDPAddr); ok {
		if a, ok := netip.AddrFromSlice(ua.IP); ok {
			local = a.Unmap()
		}
	}
	plain := func(b []byte) (int, netip.AddrPort, netip.Addr, error) {
		n, addr, err := conn.ReadFrom(b)
		return n, addrPortOf(addr), local, err
	}
	uc, ok := conn.(*net.UDPConn)
	if !ok || !local.IsUnspecified() {
		return plain
	}
	if local.Is4() {
		p := ipv4.NewPacketConn(uc)
		if p.SetControlMessage(ipv4.FlagDst, true) != nil {
			return plain
		}
		return func(b []byte) (int, netip.AddrPort, netip.Addr, error) {
			n, cm, addr, err := p.ReadFrom(b)
			dst := netip.Addr{}
			if cm != nil {
				dst, _ = netip.AddrFromSlice(cm.Dst)
			}
			return n, addrPortOf(addr), dst.Unmap(), err
		}
	}
	p := ipv6.NewPacketConn(uc)
	if p.SetControlMessage(ipv6.FlagDst, true) != nil {
		return plain
	}
	return func(b []byte) (int, netip.AddrPort, netip.Addr, error) {
		n, cm, addr, err := p.ReadFrom(b)
		dst := netip.Addr{}
		if cm != nil {
			dst, _ = netip.AddrFromSlice(cm.Dst)
		}
		return n, addrPortOf(addr), dst.Unmap(), err
	}
}

func addrPortOf(a net.Addr) netip.AddrPort {
	if ua, ok := a.(*net.UDPAddr); ok {
		ap := ua.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	if a == nil {
		return netip.AddrPort{}
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// handle answers one packet from the server port: it refuses what it can
// refuse at once and starts a transfer for the rest.
func (s *Server) handle(ctx context.Context, wg *sync.WaitGroup, conn net.PacketConn, pkt []byte, src netip.AddrPort, local netip.Addr) {
	if !src.IsValid() || src.Port() == 0 {
		s.malformed(src, pkt, "no usable source address")
		return
	}
	req, err := parseRequest(pkt)
	if err != nil {
		if len(pkt) >= 2 {
			switch op := uint16(pkt[0])<<8 | uint16(pkt[1]); op {
			case opDATA, opACK, opERROR, opOACK:
				// A stray from some transfer (tftp-hpa ACKs an ERROR
				// sent from this port, for one): counted, not a warning.
				malformedTotal.Inc()
				s.log.Debug("tftp: stray packet on the server port dropped", "from", src, "opcode", op)
				return
			}
		}
		s.malformed(src, pkt, err.Error())
		return
	}
	verb := "RRQ"
	if req.op == opWRQ {
		verb = "WRQ"
	}
	ev := event{verb: verb, name: req.filename, from: src}
	if req.op == opWRQ {
		s.refuse(conn, ev, errAccess, "this server is read-only")
		return
	}
	mode := strings.ToLower(req.mode)
	if mode != modeOctet && mode != modeNetascii {
		s.refuse(conn, ev, errIllegalOp, fmt.Sprintf("unsupported mode %s", display(req.mode)))
		return
	}
	path, mac, err := resolvePath(req.filename)
	ev.mac = mac
	if err != nil {
		s.refuse(conn, ev, errAccess, err.Error())
		return
	}

	s.mu.Lock()
	if t := s.active[src]; t != nil && !t.heard.Load() {
		s.mu.Unlock()
		// The client asked again before our first reply reached it (or
		// before its first answer reached us): the transfer in progress
		// serves it.
		s.log.Debug("tftp: duplicate request dropped", "from", src, "file", req.filename)
		return
	}
	select {
	case s.slots <- struct{}{}:
	default:
		s.mu.Unlock()
		// No ERROR: a PXE ROM gives up on one, but asks again after
		// its timeout when it hears nothing.
		s.record(ev, OutcomeRefused, fmt.Sprintf("server busy (%d transfers in progress); request dropped", cap(s.slots)))
		return
	}
	t := newTransfer(s, conn, req, mode == modeNetascii, path, mac, src, local)
	s.active[src] = t
	s.mu.Unlock()
	activeTransfers.Inc()
	wg.Add(1)
	go func() {
		defer wg.Done()
		outcome, msg := t.run(ctx)
		s.mu.Lock()
		if s.active[src] == t {
			delete(s.active, src)
		}
		s.mu.Unlock()
		<-s.slots
		activeTransfers.Dec()
		s.record(t.event(), outcome, msg)
	}()
}

// refuse records a request as refused and answers it with an ERROR from
// the server port. Recording comes first so that the refusal is stamped
// (and weighed by the refusal limiter) at the time it arrived, not at
// whatever time it is after the client has already heard the answer.
func (s *Server) refuse(conn net.PacketConn, ev event, code uint16, why string) {
	s.record(ev, OutcomeRefused, "refused: "+why)
	sendError(conn, ev.from, code, why)
}

// sendError sends an ERROR packet from conn. Errors are not reported: the
// client asks again or gives up either way.
func sendError(conn net.PacketConn, to netip.AddrPort, code uint16, msg string) {
	_, _ = conn.WriteTo(appendError(nil, code, msg), net.UDPAddrFromAddrPort(to))
}

// malformed counts a packet that is not a request, and logs it if the
// malformed-packet limit (internal/lograte) lets it through.
func (s *Server) malformed(src netip.AddrPort, pkt []byte, why string) {
	malformedTotal.Inc()
	ok, skipped := s.malformedLog.Allow()
	if !ok {
		return
	}
	op := -1
	if len(pkt) >= 2 {
		op = int(pkt[0])<<8 | int(pkt[1])
	}
	s.log.Warn("tftp: malformed packet dropped (further ones within a second are only counted)",
		"from", src, "len", len(pkt), "opcode", op, "reason", why, "skipped", skipped)
}

// event is what an Event says about a request before its outcome.
type event struct {
	verb string // "RRQ" or "WRQ"
	name string // as requested
	from netip.AddrPort
	mac  macaddr.MAC
}

// record counts a request's outcome, logs it and emits its Event — unless
// it is a refusal its source has no token for (see Config.RefusalBurst):
// that one is only counted.
func (s *Server) record(ev event, outcome, detail string) {
	transfersTotal.WithLabelValues(outcome).Inc()
	now := s.now()
	if s.refusals != nil {
		if outcome == OutcomeRefused || outcome == OutcomeNotFound {
			ok, sum := s.refusals.allow(ev.from.Addr(), now)
			if sum != nil {
				s.recordSuppressed(*sum, now)
			}
			if !ok {
				suppressedTotal.Inc()
				return
			}
		}
		for _, sum := range s.refusals.due(now) {
			s.recordSuppressed(sum, now)
		}
	}
	msg := fmt.Sprintf("%s %s from %s: %s", ev.verb, display(ev.name), ev.from, detail)
	level := slog.LevelInfo
	if outcome != OutcomeServed && outcome != OutcomeNotFound && outcome != OutcomeSizeProbe {
		level = slog.LevelWarn
	}
	attrs := []any{"outcome", outcome}
	if ev.mac.IsValid() {
		attrs = append(attrs, "mac", ev.mac.String())
	}
	s.log.Log(context.Background(), level, "tftp: "+msg, attrs...)
	s.events.Record(machinelog.Event{
		Time:    now,
		Service: machinelog.ServiceTFTP,
		MAC:     ev.mac,
		IP:      ev.from.Addr(),
		Outcome: outcome,
		Message: msg,
	})
}

// recordSuppressed logs and emits the summary of a source's refusals that
// were only counted.
func (s *Server) recordSuppressed(sum suppression, now time.Time) {
	who := sum.source.String()
	if !sum.source.IsValid() {
		who = fmt.Sprintf("sources beyond the %d tracked one by one", maxLimitedSources)
	}
	msg := fmt.Sprintf("%d more refused or not-found requests from %s since %s were counted, not recorded one by one (rate limit: %d at once, then one per %s per source)",
		sum.count, who, sum.since.Format("15:04:05"), int(s.refusals.burst), s.refusals.every)
	s.log.Warn("tftp: "+msg, "outcome", OutcomeSuppressed, "suppressed", sum.count)
	s.events.Record(machinelog.Event{
		Time:    now,
		Service: machinelog.ServiceTFTP,
		IP:      sum.source,
		Outcome: OutcomeSuppressed,
		Message: msg,
	})
}

// flushSuppressed emits every summary still pending.
func (s *Server) flushSuppressed() {
	if s.refusals == nil {
		return
	}
	now := s.now()
	for _, sum := range s.refusals.flush() {
		s.recordSuppressed(sum, now)
	}
}

// display returns a file name for a message: as is when it is plain
// printable ASCII, else Go-quoted so control bytes and spaces show.
func display(name string) string {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || c == '"' {
			return strconv.Quote(name)
		}
	}
	if name == "" {
		return `""`
	}
	return name
}

// groupDigits formats n with commas between groups of three digits.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
