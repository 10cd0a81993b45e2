package tftp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/anvilproj/anvil/internal/macaddr"
)

// readAhead is the least a transfer reads from its file at a time, so a
// small window does not cost one read per block.
const readAhead = 64 << 10

// transfer is one RRQ being served, from its own socket.
type transfer struct {
	s        *Server
	main     net.PacketConn // the server port: errors before conn exists
	req      request
	netascii bool
	path     string // in s.fs
	mac      macaddr.MAC
	peer     netip.AddrPort
	local    netip.Addr // the address the request came to; invalid if unknown
	start    time.Time
	heard    atomic.Bool // the client has answered on conn

	// Negotiated (RFC 2347-2349, 7440).
	blksize int
	window  int
	timeout time.Duration
	oack    []option

	// The stream served: the file's bytes or their netascii translation.
	size int64       // stream length; -1 until a netascii stream's end is read
	ra   io.ReaderAt // random access to the stream, or nil
	r    io.Reader   // sequential access when ra is nil
	buf  []byte      // read-ahead cache: the stream from cOff
	cOff int64       // stream offset of buf[0]
	cLen int         // valid bytes in buf
	base uint64      // highest block acknowledged (absolute: it does not wrap)

	conn      net.PacketConn
	snd       sender
	read      func([]byte) (int, netip.AddrPort, error)
	raw       *rawReader // reads conn when connected (Linux), else nil
	rbuf      []byte
	connected bool // conn is connect(2)ed: the kernel drops strangers' packets

	// For the record.
	maxSent uint64 // highest block sent
	sent    int64  // DATA payload bytes sent, retransmissions included
	resent  int64  // DATA and OACK packets sent again
}

func newTransfer(s *Server, main net.PacketConn, req request, netascii bool, path string, mac macaddr.MAC, peer netip.AddrPort, local netip.Addr) *transfer {
	return &transfer{
		s: s, main: main, req: req, netascii: netascii, path: path, mac: mac,
		peer: peer, local: local, start: time.Now(),
		blksize: defaultBlksize, window: 1, timeout: s.timeout, size: -1,
	}
}

// event describes the transfer's request for Server.record.
func (t *transfer) event() event {
	return event{verb: "RRQ", name: t.req.filename, from: t.peer, mac: t.mac}
}

// run serves the transfer and returns its outcome and the Event's detail.
func (t *transfer) run(ctx context.Context) (outcome, detail string) {
	f, outcome, detail := t.open()
	if f == nil {
		return outcome, detail
	}
	defer f.Close()

	conn, err := t.s.listenFor(ctx, t.local)
	if err != nil {
		sendError(t.main, t.peer, errUndefined, "server error")
		return OutcomeError, fmt.Sprintf("cannot open a transfer socket: %v", err)
	}
	defer conn.Close()
	t.conn = conn
	t.snd, t.connected = newSender(conn, t.peer)
	t.read = readerFor(conn)
	if t.connected {
		t.raw = newRawReader(conn)
	}
	t.rbuf = make([]byte, 1024)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(aLongTimeAgo) })
	defer stop()

	outcome, detail = t.serve(ctx)
	if outcome == OutcomeError && ctx.Err() != nil {
		_ = t.snd.write(appendError(nil, errUndefined, "server shutting down"))
	}
	return outcome, detail
}

// open opens the file, negotiates the options and sets up the stream. On
// failure it answers the client from the server port and returns a nil
// file with the outcome.
func (t *transfer) open() (fs.File, string, string) {
	f, err := t.s.fs.Open(t.path)
	if errors.Is(err, fs.ErrNotExist) {
		sendError(t.main, t.peer, errNotFound, "file not found")
		return nil, OutcomeNotFound, "file not found"
	}
	if err != nil {
		// Permission, a symlink leaving an os.Root, a loop: the name is
		// valid but leads nowhere we serve.
		sendError(t.main, t.peer, errAccess, "access violation")
		return nil, OutcomeRefused, fmt.Sprintf("refused: %v", stripPathError(err))
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		sendError(t.main, t.peer, errUndefined, "server error")
		return nil, OutcomeError, fmt.Sprintf("stat: %v", stripPathError(err))
	}
	if !st.Mode().IsRegular() {
		f.Close()
		sendError(t.main, t.peer, errAccess, "not a regular file")
		return nil, OutcomeRefused, fmt.Sprintf("refused: not a regular file (%v)", st.Mode().Type())
	}
	switch {
	case !t.netascii:
		t.size = st.Size()
		t.ra, _ = f.(io.ReaderAt)
		t.r = f
	case t.wantsTsize():
		// tsize is the length on the wire: translate once to count.
		n, err := t.countNetascii()
		if err != nil {
			f.Close()
			sendError(t.main, t.peer, errUndefined, "server error")
			return nil, OutcomeError, fmt.Sprintf("read: %v", stripPathError(err))
		}
		t.size = n
		t.r = newNetasciiReader(f)
	default:
		t.r = newNetasciiReader(f)
	}
	t.negotiate()
	n := max(t.window, (readAhead+t.blksize-1)/t.blksize)
	t.buf = make([]byte, (t.window+n)*t.blksize)
	return f, "", ""
}

// stripPathError drops the *fs.PathError wrapper, whose path repeats the
// file name (and, for os.Root, the root's directory).
func stripPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}

func (t *transfer) wantsTsize() bool {
	for _, o := range t.req.options {
		if strings.EqualFold(o.name, optTsize) {
			return true
		}
	}
	return false
}

func (t *transfer) countNetascii() (int64, error) {
	f, err := t.s.fs.Open(t.path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return netasciiLen(f)
}

// negotiate applies the request's options (RFC 2347): it sets the
// transfer's parameters and the OACK to send, holding only the options
// accepted, in the order asked, each once. Unknown options and invalid
// values are ignored.
func (t *transfer) negotiate() {
	maxBlock := t.s.maxBlock
	if t.peer.Addr().Is6() {
		maxBlock = t.s.maxBlock6
	}
	seen := make(map[string]bool, len(t.req.options))
	for _, o := range t.req.options {
		name := strings.ToLower(o.name)
		once := func() bool { // the first of a repeated option wins
			if seen[name] {
				return false
			}
			seen[name] = true
			return true
		}
		switch name {
		case optBlksize:
			v, ok := parseDecimal(o.value, maxBlksize)
			if !ok || v < minBlksize || !once() {
				continue
			}
			t.blksize = min(v, maxBlock)
			t.oack = append(t.oack, option{optBlksize, strconv.Itoa(t.blksize)})
		case optWindowsize:
			v, ok := parseDecimal(o.value, maxWindowsize)
			if !ok || v < minWindowsize || !once() {
				continue
			}
			t.window = min(v, t.s.maxWindow)
			t.oack = append(t.oack, option{optWindowsize, strconv.Itoa(t.window)})
		case optTimeout:
			// The server may not change the value (RFC 2349): take it or
			// leave it.
			v, ok := parseDecimal(o.value, maxTimeout)
			if !ok || v < minTimeout || v > maxTimeout || !once() {
				continue
			}
			t.timeout = time.Duration(v) * time.Second
			t.oack = append(t.oack, option{optTimeout, strconv.Itoa(v)})
		case optTsize:
			// In an RRQ the client sends 0 and the server answers the
			// size; a netascii size is only known if it was counted.
			// An empty file's size is not acknowledged: curl takes
			// "tsize 0" in an OACK for an illegal operation, and the
			// single empty block says it all.
			if t.size <= 0 || !once() {
				continue
			}
			t.oack = append(t.oack, option{optTsize, strconv.FormatInt(t.size, 10)})
		}
	}
}

// serve runs the protocol: the OACK exchange, then the blocks.
func (t *transfer) serve(ctx context.Context) (outcome, detail string) {
	if len(t.oack) > 0 {
		if outcome, detail := t.negotiateOACK(ctx); outcome != "" {
			return outcome, detail
		}
	}
	return t.sendFile(ctx)
}

// negotiateOACK sends the OACK until the client acknowledges it with
// block 0. It returns an empty outcome on success.
func (t *transfer) negotiateOACK(ctx context.Context) (outcome, detail string) {
	pkt := appendOACK(nil, t.oack)
	to := t.timeout
	for try := 0; ; try++ {
		if try > 0 {
			t.resent++
			retransmitsTotal.Inc()
		}
		if err := t.snd.write(pkt); err != nil {
			return OutcomeError, fmt.Sprintf("sending the OACK: %v", err)
		}
		deadline := time.Now().Add(to)
		for {
			p, err := t.recv(ctx, deadline)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				return t.failed(ctx, err)
			}
			switch op, block := packetHead(p); op {
			case opACK:
				if block == 0 {
					return "", ""
				}
			case opERROR:
				code, msg := parseError(p[2:])
				if size, ok := oackTsize(t.oack); ok {
					return OutcomeSizeProbe, fmt.Sprintf("the client read the size (%s bytes) and ended this request, as PXE firmware does before the transfer (error %d %q)",
						size, code, msg)
				}
				return OutcomeRefused, fmt.Sprintf("the client declined the option reply (%s) with error %d (%s) %q",
					formatOptions(t.oack), code, errorCodeName(code), msg)
			}
		}
		if try >= t.s.retries {
			return OutcomeTimeout, fmt.Sprintf("no answer to the option reply (%s) after %d retries", formatOptions(t.oack), t.s.retries)
		}
		to = t.backoff(to)
	}
}

// sendFile sends the blocks, a window at a time (RFC 7440; a window of 1
// is RFC 1350's lock-step), until the client acknowledges the last one.
//
// The client acknowledges the last block of each window. An ACK for an
// earlier block of the window means it missed the next one: sending
// resumes from there. An ACK for the block already acknowledged (or any
// other) is stale and ignored — answering duplicates would be the
// Sorcerer's Apprentice bug (RFC 1123 section 4.2.3.1). A timeout sends
// the whole window again, with the timeout doubled.
func (t *transfer) sendFile(ctx context.Context) (outcome, detail string) {
	next := uint64(1) // next block to send
	to := t.timeout
	tries := 0
	for {
		hi := t.base + uint64(t.window)
		if last, ok := t.lastBlock(); ok {
			hi = min(hi, last)
		}
		if next <= hi {
			n, err := t.sendBlocks(next, int(hi-next+1))
			if err != nil {
				return t.failed(ctx, err)
			}
			next += uint64(n)
			t.prefetch(next)
		}
		deadline := time.Now().Add(to)
	wait:
		for {
			p, err := t.recv(ctx, deadline)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				tries++
				if tries > t.s.retries {
					return OutcomeTimeout, fmt.Sprintf("no answer after %d retries; gave up after %s of %s bytes were acknowledged",
						t.s.retries, groupDigits(t.acked()), t.sizeText())
				}
				to = t.backoff(to)
				next = t.base + 1
				break wait
			}
			if err != nil {
				return t.failed(ctx, err)
			}
			switch op, block := packetHead(p); op {
			case opACK:
				// Map the 16-bit block number into (base, next): the
				// window is far smaller than 65536 blocks.
				d := uint64(block - uint16(t.base))
				if d == 0 || d > next-1-t.base {
					continue // stale or duplicate
				}
				t.base += d
				tries, to = 0, t.timeout
				if last, ok := t.lastBlock(); ok && t.base >= last {
					return OutcomeServed, t.servedText()
				}
				if t.base < next-1 {
					next = t.base + 1 // the client missed block base+1
				}
				break wait
			case opERROR:
				code, msg := parseError(p[2:])
				return OutcomeError, fmt.Sprintf("the client sent error %d (%s) %q after %s of %s bytes",
					code, errorCodeName(code), msg, groupDigits(t.acked()), t.sizeText())
			}
		}
	}
}

// sendBlocks sends up to n blocks from first and returns how many it
// sent: fewer at the end of the file.
func (t *transfer) sendBlocks(first uint64, n int) (int, error) {
	data, n, err := t.blocks(first, n)
	if err != nil {
		return 0, err
	}
	if err := t.snd.writeData(first, data, n, t.blksize); err != nil {
		return 0, err
	}
	last := first + uint64(n) - 1
	if first <= t.maxSent {
		again := int64(min(last, t.maxSent) - first + 1)
		t.resent += again
		retransmitsTotal.Add(float64(again))
	}
	t.maxSent = max(t.maxSent, last)
	t.sent += int64(len(data))
	bytesTotal.Add(float64(len(data)))
	return n, nil
}

// prefetch reads the window from block next into the cache if it is not
// there, while the client works through the window just sent, so the
// read is not between its ACK and the next window. A read error is left
// for blocks to report.
func (t *transfer) prefetch(next uint64) {
	bs := int64(t.blksize)
	end := (int64(next-1) + int64(t.window)) * bs
	if t.size >= 0 {
		end = min(end, t.size)
	}
	if end > t.cOff+int64(t.cLen) && (t.size < 0 || t.cOff+int64(t.cLen) < t.size) {
		_ = t.fill()
	}
}

// lastBlock returns the number of the last block (shorter than blksize,
// possibly empty) if the stream's length is known.
func (t *transfer) lastBlock() (uint64, bool) {
	if t.size < 0 {
		return 0, false
	}
	return uint64(t.size)/uint64(t.blksize) + 1, true
}

// blocks returns the payloads of up to n blocks from first, back to back
// (each blksize long but the last block of the file), and how many blocks
// that is: fewer than n at the end of the file.
func (t *transfer) blocks(first uint64, n int) ([]byte, int, error) {
	bs := int64(t.blksize)
	off := int64(first-1) * bs
	end := off + int64(n)*bs
	if t.size >= 0 {
		end = min(end, t.size)
	}
	if off < t.cOff || end > t.cOff+int64(t.cLen) {
		if err := t.fill(); err != nil {
			return nil, 0, err
		}
	}
	if t.size >= 0 {
		end = min(end, t.size)
		last, _ := t.lastBlock()
		n = int(min(uint64(n), last-first+1))
	}
	if end > t.cOff+int64(t.cLen) {
		return nil, 0, fmt.Errorf("read %s: the file shrank while it was being sent", t.path)
	}
	return t.buf[off-t.cOff : end-t.cOff], n, nil
}

// fill refills the cache from the first unacknowledged block (the
// earliest the transfer may send again) on, as far as it holds or the
// stream goes. The cache holds more than a window, so it then covers
// every block the window may send.
func (t *transfer) fill() error {
	start := int64(t.base) * int64(t.blksize)
	limit := int64(len(t.buf))
	if t.size >= 0 {
		limit = min(limit, t.size-start)
	}
	if t.ra != nil {
		m, err := t.ra.ReadAt(t.buf[:limit], start)
		t.cOff, t.cLen = start, m
		if err != nil && !(errors.Is(err, io.EOF) && int64(m) == limit) {
			return fmt.Errorf("read %s: %w", t.path, stripPathError(err))
		}
		return nil
	}
	// Sequential: keep what is cached from start on, read the rest.
	if start > t.cOff+int64(t.cLen) || start < t.cOff {
		return fmt.Errorf("read %s: cannot seek back to %d in a stream at %d", t.path, start, t.cOff+int64(t.cLen))
	}
	keep := copy(t.buf, t.buf[start-t.cOff:t.cLen])
	t.cOff = start
	m, err := io.ReadFull(t.r, t.buf[keep:limit])
	t.cLen = keep + m
	switch {
	case err == nil:
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		if t.size < 0 {
			t.size = t.cOff + int64(t.cLen)
		}
	default:
		return fmt.Errorf("read %s: %w", t.path, stripPathError(err))
	}
	return nil
}

// recv returns the next packet from the client, waiting until deadline
// (then the error wraps os.ErrDeadlineExceeded) or ctx's end.
func (t *transfer) recv(ctx context.Context, deadline time.Time) ([]byte, error) {
	if err := t.conn.SetReadDeadline(deadline); err != nil {
		return nil, err
	}
	// After the deadline is set, so a cancellation racing with it is seen
	// here or wins the deadline (see run's AfterFunc).
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for t.raw != nil {
		n, err := t.raw.recv(t.rbuf)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		t.heard.Store(true)
		if n >= headerLen {
			return t.rbuf[:n], nil
		}
	}
	for {
		n, from, err := t.read(t.rbuf)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		if !t.connected && from != t.peer {
			// Another transfer's client, or a spoof (RFC 1350 section 4).
			_, _ = t.conn.WriteTo(appendError(nil, errUnknownTID, "unknown transfer ID"), net.UDPAddrFromAddrPort(from))
			continue
		}
		t.heard.Store(true)
		if n < headerLen {
			continue
		}
		return t.rbuf[:n], nil
	}
}

// failed turns a socket error or ctx's end into an outcome.
func (t *transfer) failed(ctx context.Context, err error) (outcome, detail string) {
	if ctx.Err() != nil {
		return OutcomeError, fmt.Sprintf("server shutting down after %s of %s bytes", groupDigits(t.acked()), t.sizeText())
	}
	return OutcomeError, fmt.Sprintf("%v after %s of %s bytes", err, groupDigits(t.acked()), t.sizeText())
}

// backoff returns the next retransmission timeout after to.
func (t *transfer) backoff(to time.Duration) time.Duration {
	return min(2*to, max(MaxBackoff, t.timeout))
}

// acked returns how many bytes of the stream the client acknowledged.
func (t *transfer) acked() int64 {
	n := int64(t.base) * int64(t.blksize)
	if t.size >= 0 {
		n = min(n, t.size)
	}
	return n
}

func (t *transfer) sizeText() string {
	if t.size < 0 {
		return "?"
	}
	return groupDigits(t.size)
}

// servedText is the detail of a served transfer, e.g. "sent 1,012,345
// bytes in 0.05 s (blksize 1468, windowsize 16)".
func (t *transfer) servedText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sent %s bytes in %.2f s (", groupDigits(t.size), time.Since(t.start).Seconds())
	if t.netascii {
		b.WriteString("netascii, ")
	}
	fmt.Fprintf(&b, "blksize %d, windowsize %d)", t.blksize, t.window)
	if t.resent > 0 {
		fmt.Fprintf(&b, "; %d packets sent again", t.resent)
	}
	return b.String()
}

// packetHead returns a packet's opcode and its second 16-bit field (the
// block number of DATA and ACK, the code of ERROR). p has at least
// headerLen bytes.
func packetHead(p []byte) (op, block uint16) {
	return binary.BigEndian.Uint16(p), binary.BigEndian.Uint16(p[2:])
}

func formatOptions(opts []option) string {
	parts := make([]string, len(opts))
	for i, o := range opts {
		parts[i] = o.name + " " + o.value
	}
	return strings.Join(parts, ", ")
}

// listenFor opens a transfer socket for a request that came to local.
func (s *Server) listenFor(ctx context.Context, local netip.Addr) (net.PacketConn, error) {
	if s.listen != nil {
		return s.listen(ctx)
	}
	network, addr := "udp", ":0"
	if local.IsValid() && !local.IsUnspecified() {
		network = "udp4"
		if local.Is6() {
			network = "udp6"
		}
		addr = netip.AddrPortFrom(local, 0).String()
	}
	var lc net.ListenConfig
	return lc.ListenPacket(ctx, network, addr)
}

// readerFor returns conn's read, without allocating when conn is a
// *net.UDPConn.
func readerFor(conn net.PacketConn) func([]byte) (int, netip.AddrPort, error) {
	if uc, ok := conn.(interface {
		ReadFromUDPAddrPort([]byte) (int, netip.AddrPort, error)
	}); ok {
		return func(b []byte) (int, netip.AddrPort, error) {
			n, ap, err := uc.ReadFromUDPAddrPort(b)
			return n, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), err
		}
	}
	return func(b []byte) (int, netip.AddrPort, error) {
		n, a, err := conn.ReadFrom(b)
		return n, addrPortOf(a), err
	}
}

// oackTsize returns the tsize value of an option acknowledgement, if any.
func oackTsize(oack []option) (string, bool) {
	for _, o := range oack {
		if o.name == optTsize {
			return o.value, true
		}
	}
	return "", false
}
