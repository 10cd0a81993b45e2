package tftp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/testtool"
)

// eventLog collects a server's Events.
type eventLog struct {
	mu     sync.Mutex
	events []machinelog.Event
	added  chan struct{}
}

func newEventLog() *eventLog { return &eventLog{added: make(chan struct{}, 1)} }

func (l *eventLog) Record(e machinelog.Event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
	select {
	case l.added <- struct{}{}:
	default:
	}
}

// wait returns the first n events, failing the test if they do not come
// within 10 s.
func (l *eventLog) wait(t *testing.T, n int) []machinelog.Event {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		l.mu.Lock()
		if len(l.events) >= n {
			evs := append([]machinelog.Event(nil), l.events[:n]...)
			l.mu.Unlock()
			return evs
		}
		got := len(l.events)
		l.mu.Unlock()
		select {
		case <-l.added:
		case <-deadline:
			t.Fatalf("got %d events within 10 s; want %d", got, n)
		}
	}
}

// find returns the first event from index from on whose message
// contains substr, failing the test if none comes within 10 s.
func (l *eventLog) find(t *testing.T, from int, substr string) machinelog.Event {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		l.mu.Lock()
		for _, e := range l.events[min(from, len(l.events)):] {
			if strings.Contains(e.Message, substr) {
				l.mu.Unlock()
				return e
			}
		}
		l.mu.Unlock()
		select {
		case <-l.added:
		case <-deadline:
			t.Fatalf("no event about %q within 10 s", substr)
		}
	}
}

// count returns how many events there are now.
func (l *eventLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}

// testServer is a Server serving on 127.0.0.1 for one test.
type testServer struct {
	addr   netip.AddrPort
	events *eventLog
	cancel context.CancelFunc
	done   chan error
}

// startServer starts a Server for cfg (Logger and Events filled in) on a
// random 127.0.0.1 port; the test's cleanup stops it.
func startServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	return startServerOn(t, cfg, "127.0.0.1:0")
}

func startServerOn(t *testing.T, cfg Config, addr string) *testServer {
	t.Helper()
	ts := &testServer{events: newEventLog(), done: make(chan error, 1)}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	cfg.Events = ts.events
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	network, host := "udp4", netip.MustParseAddr("127.0.0.1")
	if ap, err := netip.ParseAddrPort(addr); err == nil && ap.Addr().Is6() {
		network, host = "udp6", netip.IPv6Loopback()
	}
	conn, err := net.ListenPacket(network, addr)
	if err != nil {
		// A container may switch IPv6 off; scripts/check-lab.sh switches
		// it back on in CI.
		testtool.Need(t, "a %s loopback (%v)", network, err)
	}
	ts.addr = netip.AddrPortFrom(host, uint16(conn.LocalAddr().(*net.UDPAddr).Port))
	ctx, cancel := context.WithCancel(context.Background())
	ts.cancel = cancel
	go func() { ts.done <- s.Serve(ctx, conn) }()
	t.Cleanup(func() {
		ts.stop(t)
		conn.Close()
	})
	return ts
}

// stop ends Serve and checks it returns nil within 5 s. It may be called
// more than once.
func (ts *testServer) stop(t *testing.T) {
	t.Helper()
	ts.cancel()
	select {
	case err, ok := <-ts.done:
		if ok && err != nil {
			t.Errorf("Serve = %v; want nil", err)
		}
		if ok {
			close(ts.done)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("Serve did not return within 5 s of its context's end")
	}
}

// testWriter sends a logger's lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// seqFS is an fs.FS of in-memory files that are not io.ReaderAt, to
// exercise the sequential read path (fstest.MapFS files are ReaderAt).
type seqFS map[string][]byte

func (m seqFS) Open(name string) (fs.File, error) {
	b, ok := m[name]
	if !ok || !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &seqFile{name: name, data: b}, nil
}

type seqFile struct {
	name string
	data []byte
	off  int
}

func (f *seqFile) Stat() (fs.FileInfo, error) { return seqInfo{f}, nil }
func (f *seqFile) Close() error               { return nil }
func (f *seqFile) Read(p []byte) (int, error) {
	if f.off >= len(f.data) {
		return 0, io.EOF
	}
	n := copy(p, f.data[f.off:])
	f.off += n
	return n, nil
}

type seqInfo struct{ f *seqFile }

func (i seqInfo) Name() string       { return i.f.name }
func (i seqInfo) Size() int64        { return int64(len(i.f.data)) }
func (i seqInfo) Mode() fs.FileMode  { return 0o444 }
func (i seqInfo) ModTime() time.Time { return time.Time{} }
func (i seqInfo) IsDir() bool        { return false }
func (i seqInfo) Sys() any           { return nil }

// client is a scriptable TFTP client for tests, over a real UDP socket.
type client struct {
	t    *testing.T
	conn *net.UDPConn
	srv  netip.AddrPort // the server port
	peer netip.AddrPort // the transfer port, once heard from
	buf  []byte
}

func newClient(t *testing.T, srv netip.AddrPort) *client {
	t.Helper()
	network, local := "udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}
	if srv.Addr().Is6() {
		network, local = "udp6", &net.UDPAddr{IP: net.IPv6loopback}
	}
	conn, err := net.ListenUDP(network, local)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &client{t: t, conn: conn, srv: srv, buf: make([]byte, 70000)}
}

func (c *client) sendTo(to netip.AddrPort, p []byte) {
	c.t.Helper()
	if _, err := c.conn.WriteToUDPAddrPort(p, to); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// queued returns a packet that has already arrived, without waiting
// (testtool.Queued): after an event the server records only once it is
// done with a request, it shows that nothing was sent for that request.
// The packet is valid until the next recv.
func (c *client) queued() ([]byte, bool) {
	c.t.Helper()
	n, ok := testtool.Queued(c.t, c.conn, c.buf)
	return c.buf[:n], ok
}

// recv returns the next packet and its source, or an error after
// timeout. The packet is valid until the next recv.
func (c *client) recv(timeout time.Duration) ([]byte, netip.AddrPort, error) {
	buf := c.buf
	if err := c.conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return nil, netip.AddrPort{}, err
	}
	n, from, err := c.conn.ReadFromUDPAddrPort(buf)
	return buf[:n], from, err
}

func rrq(name, mode string, opts ...string) []byte {
	r := request{op: opRRQ, filename: name, mode: mode}
	for i := 0; i+1 < len(opts); i += 2 {
		r.options = append(r.options, option{opts[i], opts[i+1]})
	}
	return appendRequest(nil, r)
}

func ack(block uint16) []byte {
	b := binary.BigEndian.AppendUint16(nil, opACK)
	return binary.BigEndian.AppendUint16(b, block)
}

// getOpts scripts a client's misbehaviour.
type getOpts struct {
	mode    string   // default "octet"
	options []string // name, value, name, value…
	// drop reports whether the n-th arrival (from 1) of DATA block (an
	// absolute number) is lost.
	drop func(block uint64, n int) bool
	// loseAck reports whether the n-th ACK for block is lost.
	loseAck func(block uint64, n int) bool
	// extraAcks sends every ACK this many more times.
	extraAcks int
	// declineOACK answers an OACK with ERROR 8.
	declineOACK bool
	// stopAfter stops answering once this block has arrived (0: never).
	stopAfter uint64
	// timeout is the client's retransmission timeout; default 2 s.
	timeout time.Duration
	// requested: the RRQ was sent already (get only receives).
	requested bool
}

// getResult is what a get saw.
type getResult struct {
	data      []byte
	oack      map[string]string // nil without an OACK
	errCode   int               // -1 without an ERROR
	errMsg    string
	packets   int // DATA packets received
	dups      int // DATA packets for blocks already received
	acksSent  int
	firstFrom netip.AddrPort // source of the first reply
}

// get fetches name as an RFC 7440 receiver would: it acknowledges the
// last block of each window (or each block without windowsize), and on
// a gap acknowledges the last block received in order, once.
func (c *client) get(name string, o getOpts) getResult {
	c.t.Helper()
	if o.mode == "" {
		o.mode = modeOctet
	}
	if o.timeout == 0 {
		o.timeout = 2 * time.Second
	}
	res := getResult{errCode: -1}
	blksize, window := defaultBlksize, 1
	var have, lastAcked uint64 // blocks received in order; last block acknowledged
	arrivals := map[uint64]int{}
	ackCount := map[uint64]int{}
	gapAcked := false
	var last []byte // last packet sent, for retransmission
	send := func(p []byte) {
		last = p
		to := c.peer
		if !to.IsValid() {
			to = c.srv
		}
		c.sendTo(to, p)
	}
	sendAck := func(block uint64) {
		lastAcked = block
		ackCount[block]++
		if o.loseAck != nil && o.loseAck(block, ackCount[block]) {
			last = ack(uint16(block))
			return
		}
		res.acksSent++
		for i := 0; i < o.extraAcks; i++ {
			send(ack(uint16(block)))
		}
		send(ack(uint16(block)))
	}
	if o.requested {
		last = rrq(name, o.mode, o.options...)
	} else {
		send(rrq(name, o.mode, o.options...))
	}
	tries := 0
	for {
		p, from, err := c.recv(o.timeout)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				tries++
				if tries > 5 {
					c.t.Fatalf("get %q: no answer after %d tries", name, tries)
				}
				if last != nil {
					send(last)
				}
				continue
			}
			c.t.Fatalf("get %q: %v", name, err)
		}
		tries = 0
		if !res.firstFrom.IsValid() {
			res.firstFrom = from
		}
		if !c.peer.IsValid() && from != c.srv {
			c.peer = from
		}
		if c.peer.IsValid() && from != c.peer {
			// Another transfer's port (RFC 1350 section 4).
			c.sendTo(from, appendError(nil, errUnknownTID, "unknown transfer ID"))
			continue
		}
		if len(p) < 4 {
			c.t.Fatalf("get %q: short packet %x", name, p)
		}
		switch op := binary.BigEndian.Uint16(p); op {
		case opERROR:
			code, msg := parseError(p[2:])
			res.errCode, res.errMsg = int(code), msg
			return res
		case opOACK:
			res.oack = map[string]string{}
			r, err := parseRequest(append([]byte{0, byte(opRRQ), 'x', 0, 'x', 0}, p[2:]...))
			if err != nil {
				c.t.Fatalf("get %q: bad OACK %q", name, p)
			}
			for _, o := range r.options {
				res.oack[o.name] = o.value
			}
			if o.declineOACK {
				send(appendError(nil, errOptionRefused, "no thanks"))
				return res
			}
			if v, ok := res.oack[optBlksize]; ok {
				fmt.Sscan(v, &blksize)
			}
			if v, ok := res.oack[optWindowsize]; ok {
				fmt.Sscan(v, &window)
			}
			if have == 0 {
				sendAck(0)
			}
		case opDATA:
			res.packets++
			block := binary.BigEndian.Uint16(p[2:])
			data := p[4:]
			d := block - uint16(have+1)
			switch {
			case d >= 0x8000: // behind: a duplicate
				res.dups++
				// Our ACK of it was lost: say it again (the server
				// ignores duplicate ACKs, so this cannot snowball).
				if block == uint16(lastAcked) && lastAcked == have {
					sendAck(have)
				}
				continue
			case d > 0: // ahead: we missed have+1
				if !gapAcked {
					gapAcked = true
					sendAck(have)
				}
				continue
			}
			abs := have + 1
			arrivals[abs]++
			if o.drop != nil && o.drop(abs, arrivals[abs]) {
				continue
			}
			have = abs
			gapAcked = false
			res.data = append(res.data, data...)
			if o.stopAfter != 0 && have >= o.stopAfter {
				return res
			}
			if len(data) < blksize {
				sendAck(have)
				return res
			}
			if have-lastAcked >= uint64(window) {
				sendAck(have)
			}
		default:
			c.t.Fatalf("get %q: unexpected opcode %d", name, op)
		}
	}
}

// counterValue returns a counter's value.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// gaugeValue returns a gauge's value.
func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// waitCounter waits until c reaches want, failing the test if it does
// not within 10 s.
func waitCounter(t *testing.T, c prometheus.Counter, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for counterValue(t, c) < want {
		if time.Now().After(deadline) {
			t.Fatalf("counter at %v after 10 s; want %v", counterValue(t, c), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// pattern returns n bytes of a pattern in which every block of every
// size differs from its neighbours.
func pattern(n int) []byte {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func mustWriteFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
