package tftp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// wire is a UDP relay between a real client and the server under test that
// records every datagram crossing it, in the order it crosses, as a capture
// on the wire would: what the server sent before the client's next ACK
// reached it is what the server sent without waiting. The server keeps its
// real sockets and send path (segmentation offload, sendmmsg), which a
// wrapper around its transfer socket would replace.
//
// The client sends its request to Port. The relay forwards it from a
// socket of its own (so the server sees the relay as the client), and
// gives each server port that answers (each transfer's own port, RFC 1350
// section 4) a client-facing port of its own, so the client sees one
// transfer port per transfer as it would without the relay.
type wire struct {
	t      *testing.T
	front  *net.UDPConn   // the client's requests arrive here
	back   *net.UDPConn   // talks to the server
	server netip.AddrPort // the server's request port

	mu      sync.Mutex
	client  netip.AddrPort                  // the client, once it asked
	mirrors map[netip.AddrPort]*net.UDPConn // server port → client-facing socket
	log     []wirePacket
	wg      sync.WaitGroup
}

// wirePacket is one datagram as the relay saw it.
type wirePacket struct {
	fromServer bool
	op         uint16
	block      uint16            // DATA and ACK
	size       int               // DATA payload bytes
	options    map[string]string // OACK
}

func (p wirePacket) String() string {
	dir := "client→server"
	if p.fromServer {
		dir = "server→client"
	}
	switch p.op {
	case opDATA:
		return fmt.Sprintf("%s DATA %d (%d bytes)", dir, p.block, p.size)
	case opACK:
		return fmt.Sprintf("%s ACK %d", dir, p.block)
	case opOACK:
		return fmt.Sprintf("%s OACK %v", dir, p.options)
	}
	return fmt.Sprintf("%s opcode %d", dir, p.op)
}

// newWire starts a relay to the server at server; the test's cleanup
// stops it.
func newWire(t *testing.T, server netip.AddrPort) *wire {
	t.Helper()
	w := &wire{t: t, server: server, mirrors: map[netip.AddrPort]*net.UDPConn{},
		front: listenLoopback(t), back: listenLoopback(t)}
	w.wg.Add(2)
	go w.relayFront()
	go w.relayBack()
	t.Cleanup(func() {
		w.front.Close()
		w.back.Close()
		w.mu.Lock()
		for _, c := range w.mirrors {
			c.Close()
		}
		w.mu.Unlock()
		w.wg.Wait()
	})
	return w
}

func listenLoopback(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Port is where the client sends its request.
func (w *wire) Port() string {
	return strconv.Itoa(w.front.LocalAddr().(*net.UDPAddr).Port)
}

// record notes a datagram before it is forwarded, so that the log's order
// is the order of cause and effect.
func (w *wire) record(fromServer bool, p []byte) {
	wp := wirePacket{fromServer: fromServer}
	if len(p) >= 2 {
		wp.op = binary.BigEndian.Uint16(p)
	}
	switch {
	case (wp.op == opDATA || wp.op == opACK) && len(p) >= 4:
		wp.block = binary.BigEndian.Uint16(p[2:])
		wp.size = len(p) - 4
	case wp.op == opOACK:
		wp.options = map[string]string{}
		// An OACK's body is a request's options: parse it as one.
		if r, err := parseRequest(append([]byte{0, byte(opRRQ), 'x', 0, 'x', 0}, p[2:]...)); err == nil {
			for _, o := range r.options {
				wp.options[strings.ToLower(o.name)] = o.value
			}
		}
	}
	w.mu.Lock()
	w.log = append(w.log, wp)
	w.mu.Unlock()
}

// relayFront forwards the client's requests to the server's request port.
func (w *wire) relayFront() {
	defer w.wg.Done()
	buf := make([]byte, 70000)
	for {
		n, from, err := w.front.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		w.mu.Lock()
		w.client = from
		w.mu.Unlock()
		w.record(false, buf[:n])
		_, _ = w.back.WriteToUDPAddrPort(buf[:n], w.server)
	}
}

// relayBack forwards what the server sends to the client, each server port
// through its own client-facing socket.
func (w *wire) relayBack() {
	defer w.wg.Done()
	buf := make([]byte, 70000)
	for {
		n, from, err := w.back.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		w.mu.Lock()
		client := w.client
		out := w.front // errors from the request port come from the request port
		if from != w.server {
			out = w.mirrors[from]
			if out == nil {
				c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
				if err != nil {
					w.mu.Unlock()
					w.t.Errorf("wire: %v", err)
					return
				}
				out, w.mirrors[from] = c, c
				w.wg.Add(1)
				go w.relayMirror(c, from)
			}
		}
		w.mu.Unlock()
		w.record(true, buf[:n])
		_, _ = out.WriteToUDPAddrPort(buf[:n], client)
	}
}

// relayMirror forwards what the client sends to one transfer's
// client-facing socket to that transfer's server port.
func (w *wire) relayMirror(c *net.UDPConn, serverPort netip.AddrPort) {
	defer w.wg.Done()
	buf := make([]byte, 70000)
	for {
		n, _, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		w.record(false, buf[:n])
		_, _ = w.back.WriteToUDPAddrPort(buf[:n], serverPort)
	}
}

// packets returns the log so far.
func (w *wire) packets() []wirePacket {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]wirePacket(nil), w.log...)
}

// checkWindows checks that the one transfer the wire carried, of a file of
// size bytes, was served as RFC 7440 says with a window of window blocks:
// the OACK granted windowsize window, and after each ACK (the OACK's ACK 0
// first) the server sent the next window blocks — fewer only at the end of
// the file — before the client's next ACK reached it, which acknowledged
// the window's last block. A retransmission fails the check too: on the
// loopback nothing is lost, so a resend means the server waited for an ACK
// the client was not going to send.
func (w *wire) checkWindows(t *testing.T, window, size int) {
	t.Helper()
	log := w.packets()
	dump := func() string {
		var b strings.Builder
		for i, p := range log {
			if i == 40 {
				fmt.Fprintf(&b, "  … %d more\n", len(log)-i)
				break
			}
			fmt.Fprintf(&b, "  %v\n", p)
		}
		return b.String()
	}
	i := 0
	// The request, then the OACK.
	for i < len(log) && !log[i].fromServer {
		i++
	}
	if i == len(log) || log[i].op != opOACK {
		t.Fatalf("the server's first packet is not an OACK; the wire carried:\n%s", dump())
	}
	oack := log[i].options
	if got := oack[optWindowsize]; got != strconv.Itoa(window) {
		t.Fatalf("OACK %v grants windowsize %q; want %d", oack, got, window)
	}
	blksize := defaultBlksize
	if v, ok := oack[optBlksize]; ok {
		blksize, _ = strconv.Atoi(v)
	}
	total := size/blksize + 1 // the last block is short, maybe empty
	i++
	acked := 0
	expectAck := func(n int) {
		t.Helper()
		if i >= len(log) || log[i].fromServer || log[i].op != opACK || log[i].block != uint16(n) {
			got := "the end of the capture"
			if i < len(log) {
				got = log[i].String()
			}
			t.Fatalf("after block %d: got %s; want the client's ACK %d (packet %d); the wire carried:\n%s", acked, got, uint16(n), i, dump())
		}
		i++
	}
	expectAck(0)
	windows := 0
	for acked < total {
		want := min(window, total-acked)
		for k := 1; k <= want; k++ {
			if i >= len(log) || !log[i].fromServer || log[i].op != opDATA || log[i].block != uint16(acked+k) {
				got := "the end of the capture"
				if i < len(log) {
					got = log[i].String()
				}
				t.Fatalf("window after ACK %d: packet %d is %s; want DATA %d, block %d of a window of %d sent without waiting (packet %d); the wire carried:\n%s",
					uint16(acked), k, got, uint16(acked+k), k, want, i, dump())
			}
			i++
		}
		acked += want
		windows++
		expectAck(acked)
	}
	for ; i < len(log); i++ {
		if log[i].fromServer {
			t.Fatalf("after the last ACK the server sent %s", log[i])
		}
	}
	t.Logf("%d blocks of %d bytes in %d windows of up to %d, each sent whole before the client's ACK", total, blksize, windows, window)
}
