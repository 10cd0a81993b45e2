package tftp

import (
	"bytes"
	"context"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/anvilproj/anvil/internal/macaddr"
)

// fixture is the file tree most tests serve.
func fixture() fstest.MapFS {
	return fstest.MapFS{
		"empty":        {Data: nil},
		"one":          {Data: []byte("x")},
		"b511":         {Data: pattern(511)},
		"b512":         {Data: pattern(512)},
		"b513":         {Data: pattern(513)},
		"b1024":        {Data: pattern(1024)},
		"f5000":        {Data: pattern(5000)},
		"f100k":        {Data: pattern(100_000)},
		"ipxe.efi":     {Data: pattern(3000)},
		"dir/file.txt": {Data: []byte("in a directory\n")},
		"text.txt":     {Data: []byte("line one\nline two\r\nbare\rcr\n\n")},
	}
}

// hideSyscallConn wraps a PacketConn so the server cannot reach its file
// descriptor: the portable WriteTo sender and the source check are used.
type hideSyscallConn struct{ net.PacketConn }

func portableSockets(ctx context.Context) (net.PacketConn, error) {
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return hideSyscallConn{c}, nil
}

// senders runs a test with the kernel-offload sender and the portable one.
var senders = []struct {
	name   string
	listen func(context.Context) (net.PacketConn, error)
}{
	{"raw", nil},
	{"portable", portableSockets},
}

func TestGet(t *testing.T) {
	fsys := fixture()
	tests := []struct {
		name string
		file string
		opts []string
	}{
		{name: "empty", file: "empty"},
		{name: "one byte", file: "one"},
		{name: "511", file: "b511"},
		{name: "512 needs an empty last block", file: "b512"},
		{name: "513", file: "b513"},
		{name: "1024", file: "b1024"},
		{name: "5000", file: "f5000"},
		{name: "in a directory", file: "dir/file.txt"},
		{name: "blksize 1468", file: "f100k", opts: []string{"blksize", "1468"}},
		{name: "blksize 8", file: "f5000", opts: []string{"blksize", "8"}},
		{name: "windowsize 16", file: "f100k", opts: []string{"blksize", "1468", "windowsize", "16"}},
		{name: "windowsize 64 blksize 512", file: "f100k", opts: []string{"windowsize", "64"}},
		{name: "window larger than the file", file: "f5000", opts: []string{"windowsize", "64"}},
		{name: "window ends on the empty block", file: "b1024", opts: []string{"windowsize", "3"}},
		{name: "window ends on the last block", file: "b1024", opts: []string{"windowsize", "2", "blksize", "256"}},
		{name: "empty file with windowsize", file: "empty", opts: []string{"windowsize", "8"}},
		{name: "blksize beyond limit clamps", file: "f100k", opts: []string{"blksize", "65464", "windowsize", "4"}},
	}
	for _, sn := range senders {
		t.Run(sn.name, func(t *testing.T) {
			srv := startServer(t, Config{FS: fsys, ListenPacket: sn.listen})
			for i, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					c := newClient(t, srv.addr)
					res := c.get(tc.file, getOpts{options: tc.opts})
					if res.errCode >= 0 {
						t.Fatalf("get %s: ERROR %d %q", tc.file, res.errCode, res.errMsg)
					}
					if want := fsys[tc.file].Data; !bytes.Equal(res.data, want) {
						t.Fatalf("get %s: %d bytes, want %d (equal prefix: %v)", tc.file, len(res.data), len(want), bytes.HasPrefix(want, res.data))
					}
					if res.dups != 0 {
						t.Errorf("get %s: %d duplicate DATA packets; want 0", tc.file, res.dups)
					}
					ev := srv.events.wait(t, i+1)[i]
					want := "sent " + groupDigits(int64(len(fsys[tc.file].Data))) + " bytes"
					if ev.Outcome != OutcomeServed || !strings.Contains(ev.Message, want) || ev.Service != "tftp" {
						t.Errorf("event = %+v; want tftp served, message with %q", ev, want)
					}
					if ev.IP != netip.MustParseAddr("127.0.0.1") {
						t.Errorf("event IP = %v; want 127.0.0.1", ev.IP)
					}
				})
			}
		})
	}
}

func TestOptions(t *testing.T) {
	fsys := fixture()
	srv := startServer(t, Config{FS: fsys, MaxBlockSize: 1024, MaxWindowSize: 8})
	tests := []struct {
		name string
		file string
		mode string
		opts []string
		want map[string]string // nil: no OACK
	}{
		{name: "no options", file: "f5000", want: nil},
		{name: "tsize", file: "f5000", opts: []string{"tsize", "0"}, want: map[string]string{"tsize": "5000"}},
		{name: "tsize of an empty file not acknowledged", file: "empty", opts: []string{"tsize", "0"}, want: nil},
		{name: "tsize netascii counts CR and LF", file: "text.txt", mode: "netascii", opts: []string{"tsize", "0"},
			want: map[string]string{"tsize": strconv.Itoa(len(fsys["text.txt"].Data) + 6)}},
		{name: "blksize granted", file: "f5000", opts: []string{"blksize", "1000"}, want: map[string]string{"blksize": "1000"}},
		{name: "blksize clamped to MaxBlockSize", file: "f5000", opts: []string{"blksize", "1468"}, want: map[string]string{"blksize": "1024"}},
		{name: "blksize huge clamped", file: "f5000", opts: []string{"blksize", "99999999999999999999"}, want: map[string]string{"blksize": "1024"}},
		{name: "blksize below 8 ignored", file: "f5000", opts: []string{"blksize", "7"}, want: nil},
		{name: "blksize not a number ignored", file: "f5000", opts: []string{"blksize", "-512"}, want: nil},
		{name: "windowsize clamped", file: "f100k", opts: []string{"windowsize", "64"}, want: map[string]string{"windowsize": "8"}},
		{name: "windowsize 0 ignored", file: "f5000", opts: []string{"windowsize", "0"}, want: nil},
		{name: "timeout granted as asked", file: "f5000", opts: []string{"timeout", "3"}, want: map[string]string{"timeout": "3"}},
		{name: "timeout 0 ignored", file: "f5000", opts: []string{"timeout", "0"}, want: nil},
		{name: "timeout 256 ignored", file: "f5000", opts: []string{"timeout", "256"}, want: nil},
		{name: "unknown option ignored", file: "f5000", opts: []string{"multicast", "", "tsize", "0"}, want: map[string]string{"tsize": "5000"}},
		{name: "names are case-insensitive", file: "f5000", opts: []string{"BLKSIZE", "512", "TSize", "0"},
			want: map[string]string{"blksize": "512", "tsize": "5000"}},
		{name: "first of a repeated option wins", file: "f5000", opts: []string{"blksize", "600", "blksize", "700"},
			want: map[string]string{"blksize": "600"}},
		{name: "all four", file: "f100k", opts: []string{"blksize", "1024", "tsize", "0", "timeout", "2", "windowsize", "4"},
			want: map[string]string{"blksize": "1024", "tsize": "100000", "timeout": "2", "windowsize": "4"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, srv.addr)
			res := c.get(tc.file, getOpts{mode: tc.mode, options: tc.opts})
			if res.errCode >= 0 {
				t.Fatalf("ERROR %d %q", res.errCode, res.errMsg)
			}
			if (res.oack == nil) != (tc.want == nil) || len(res.oack) != len(tc.want) {
				t.Fatalf("OACK = %v; want %v", res.oack, tc.want)
			}
			for k, v := range tc.want {
				if res.oack[k] != v {
					t.Errorf("OACK %s = %q; want %q (OACK %v)", k, res.oack[k], v, res.oack)
				}
			}
			if tc.mode == "" && !bytes.Equal(res.data, fsys[tc.file].Data) {
				t.Errorf("data differs: %d bytes, want %d", len(res.data), len(fsys[tc.file].Data))
			}
		})
	}
}

// TestOACKDeclinedWithoutTsize: declining an option reply that carried no
// size is a refusal, not a probe.
func TestOACKDeclinedWithoutTsize(t *testing.T) {
	srv := startServer(t, Config{FS: fixture()})
	c := newClient(t, srv.addr)
	c.get("ipxe.efi", getOpts{options: []string{"blksize", "1468"}, declineOACK: true})
	ev := srv.events.wait(t, 1)[0]
	if ev.Outcome != OutcomeRefused || !strings.Contains(ev.Message, "declined") || !strings.Contains(ev.Message, "error 8") {
		t.Errorf("event = %+v; want refused, declined with error 8", ev)
	}
}

func TestOACKDeclined(t *testing.T) {
	srv := startServer(t, Config{FS: fixture()})
	c := newClient(t, srv.addr)
	res := c.get("ipxe.efi", getOpts{options: []string{"tsize", "0", "blksize", "1468"}, declineOACK: true})
	if res.oack["tsize"] != "3000" {
		t.Fatalf("OACK = %v; want tsize 3000", res.oack)
	}
	ev := srv.events.wait(t, 1)[0]
	// Asking for tsize and then declining is PXE firmware's size probe.
	if ev.Outcome != OutcomeSizeProbe || !strings.Contains(ev.Message, "3000 bytes") || !strings.Contains(ev.Message, "error 8") {
		t.Errorf("event = %+v; want a size probe of 3000 bytes, ended with error 8", ev)
	}
	// Nothing more comes: the event is recorded when the transfer has
	// ended and closed its socket, after anything it sent.
	if p, ok := c.queued(); ok {
		t.Errorf("after ERROR 8 the server sent %x", p)
	}
}

// TestLoss drops packets the way a network does and checks the file
// arrives whole, with the retransmissions counted.
func TestLoss(t *testing.T) {
	fsys := fixture()
	first := func(blocks ...uint64) func(uint64, int) bool {
		return func(b uint64, n int) bool {
			for _, x := range blocks {
				if b == x && n == 1 {
					return true
				}
			}
			return false
		}
	}
	tests := []struct {
		name       string
		opts       getOpts
		wantResent bool
		timeout    time.Duration // the server's; default 50 ms
	}{
		{
			// The client waits, then ACKs block 2 again: that duplicate
			// is ignored, the server's own timeout sends block 3 again.
			name:       "lost DATA, lock-step",
			opts:       getOpts{drop: first(3), timeout: 100 * time.Millisecond},
			wantResent: true,
		},
		{
			// Block 5 of a window of 8 is lost: the client ACKs 4 on
			// seeing 6, the server resumes from 5.
			name:       "lost DATA in a window",
			opts:       getOpts{options: []string{"windowsize", "8"}, drop: first(5)},
			wantResent: true,
		},
		{
			name:       "lost DATA at the start and end of windows",
			opts:       getOpts{options: []string{"windowsize", "8", "blksize", "512"}, drop: first(1, 8, 9, 196)},
			wantResent: true,
		},
		{
			name:       "last block lost",
			opts:       getOpts{options: []string{"windowsize", "4"}, drop: first(196), timeout: 100 * time.Millisecond},
			wantResent: true,
		},
		{
			// The server's timeout sends block 2 again; the client,
			// which has it, ACKs it again.
			name: "lost ACK",
			opts: getOpts{
				loseAck: func(b uint64, n int) bool { return b == 2 && n == 1 },
				timeout: 5 * time.Second, // the server's timeout fires first
			},
			wantResent: true,
		},
		{
			name: "lost ACK of a window",
			opts: getOpts{
				options: []string{"windowsize", "16"},
				loseAck: func(b uint64, n int) bool { return b == 16 && n == 1 },
				timeout: 5 * time.Second,
			},
			wantResent: true,
		},
		{
			name: "lost OACK acknowledgement",
			opts: getOpts{
				options: []string{"blksize", "1024"},
				loseAck: func(b uint64, n int) bool { return b == 0 && n == 1 },
				timeout: 5 * time.Second,
			},
			wantResent: true,
		},
		{
			// Every ACK three times: no Sorcerer's Apprentice, each
			// block is sent once. (A long timeout, so a stalled test
			// machine does not cause a retransmission.)
			name:    "duplicate ACKs",
			opts:    getOpts{extraAcks: 2},
			timeout: 5 * time.Second,
		},
		{
			name:    "duplicate ACKs with a window",
			opts:    getOpts{extraAcks: 2, options: []string{"windowsize", "4"}},
			timeout: 5 * time.Second,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 50 * time.Millisecond
			}
			srv := startServer(t, Config{FS: fsys, Timeout: timeout})
			before := counterValue(t, retransmitsTotal)
			c := newClient(t, srv.addr)
			res := c.get("f100k", tc.opts)
			if res.errCode >= 0 {
				t.Fatalf("ERROR %d %q", res.errCode, res.errMsg)
			}
			if !bytes.Equal(res.data, fsys["f100k"].Data) {
				t.Fatalf("data differs: %d bytes, want %d", len(res.data), len(fsys["f100k"].Data))
			}
			ev := srv.events.wait(t, 1)[0]
			if ev.Outcome != OutcomeServed {
				t.Fatalf("event = %+v; want served", ev)
			}
			resent := counterValue(t, retransmitsTotal) - before
			if tc.wantResent != (resent > 0) || tc.wantResent != strings.Contains(ev.Message, "sent again") {
				t.Errorf("retransmissions = %v, message %q; want some: %v", resent, ev.Message, tc.wantResent)
			}
			if !tc.wantResent && res.dups != 0 {
				t.Errorf("%d duplicate DATA packets; want 0", res.dups)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	tests := []struct {
		name string
		opts getOpts
		raw  []byte // sent instead of running a get; never answered
	}{
		{name: "client silent after block 2", opts: getOpts{stopAfter: 2}},
		{name: "client silent in a window", opts: getOpts{stopAfter: 5, options: []string{"windowsize", "4"}}},
		{name: "client never acknowledges the OACK", raw: rrq("f5000", "octet", "tsize", "0")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, Config{FS: fixture(), Timeout: 20 * time.Millisecond, Retries: 2})
			c := newClient(t, srv.addr)
			if tc.raw != nil {
				c.sendTo(srv.addr, tc.raw)
			} else {
				c.get("f5000", tc.opts)
			}
			start := time.Now()
			ev := srv.events.wait(t, 1)[0]
			if ev.Outcome != OutcomeTimeout || !strings.Contains(ev.Message, "2 retries") {
				t.Errorf("event = %+v; want timeout after 2 retries", ev)
			}
			// 20+40+80 ms of timeouts: well under a second.
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("gave up after %v; want < 2 s", d)
			}
		})
	}
}

// TestRollover sends more than 65535 blocks: block numbers wrap to 0.
func TestRollover(t *testing.T) {
	data := pattern(65536*8 + 4*8 + 3) // blocks 1..65535, 0, 1, 2, 3, 4, 5
	fsys := fstest.MapFS{"big": {Data: data}}
	tests := []struct {
		name string
		opts []string
	}{
		{name: "windowsize 1", opts: []string{"blksize", "8"}},
		{name: "windowsize 7", opts: []string{"blksize", "8", "windowsize", "7"}},
		{name: "windowsize 64", opts: []string{"blksize", "8", "windowsize", "64"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.name == "windowsize 1" {
				t.Skip("65,000 round trips")
			}
			srv := startServer(t, Config{FS: fsys})
			c := newClient(t, srv.addr)
			res := c.get("big", getOpts{options: tc.opts})
			if res.errCode >= 0 {
				t.Fatalf("ERROR %d %q", res.errCode, res.errMsg)
			}
			if !bytes.Equal(res.data, data) {
				t.Fatalf("got %d bytes, want %d (equal prefix: %v)", len(res.data), len(data), bytes.HasPrefix(data, res.data))
			}
			if ev := srv.events.wait(t, 1)[0]; ev.Outcome != OutcomeServed {
				t.Errorf("event = %+v; want served", ev)
			}
		})
	}
}

func TestNetascii(t *testing.T) {
	text := []byte("line one\nline two\r\nbare\rcr\n\nend without newline")
	want := []byte("line one\r\nline two\r\x00\r\nbare\r\x00cr\r\n\r\nend without newline")
	big := bytes.Repeat([]byte("0123456\n\r"), 2000) // pairs straddle every block boundary
	bigWant := bytes.Repeat([]byte("0123456\r\n\r\x00"), 2000)
	tests := []struct {
		name string
		fsys fs.FS
		file string
		opts []string
		want []byte
	}{
		{name: "lock-step", fsys: fstest.MapFS{"t": {Data: text}}, file: "t", want: want},
		{name: "tsize", fsys: fstest.MapFS{"t": {Data: text}}, file: "t", opts: []string{"tsize", "0"}, want: want},
		{name: "blksize 8 window 3", fsys: fstest.MapFS{"t": {Data: big}}, file: "t", opts: []string{"blksize", "8", "windowsize", "3"}, want: bigWant},
		{name: "blksize 9 tsize", fsys: fstest.MapFS{"t": {Data: big}}, file: "t", opts: []string{"blksize", "9", "tsize", "0"}, want: bigWant},
		{name: "translation ends on a block boundary", fsys: fstest.MapFS{"t": {Data: []byte("abcdef\n")}}, file: "t", opts: []string{"blksize", "8"}, want: []byte("abcdef\r\n")},
		{name: "sequential file", fsys: seqFS{"t": big}, file: "t", opts: []string{"windowsize", "5"}, want: bigWant},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, Config{FS: tc.fsys, Timeout: 50 * time.Millisecond})
			c := newClient(t, srv.addr)
			res := c.get(tc.file, getOpts{mode: "NetASCII", options: tc.opts, drop: func(b uint64, n int) bool { return b%97 == 0 && n == 1 }})
			if res.errCode >= 0 {
				t.Fatalf("ERROR %d %q", res.errCode, res.errMsg)
			}
			if !bytes.Equal(res.data, tc.want) {
				t.Fatalf("got %q\nwant %q", clip(res.data), clip(tc.want))
			}
			if v, ok := res.oack["tsize"]; ok && v != strconv.Itoa(len(tc.want)) {
				t.Errorf("tsize = %s; want %d", v, len(tc.want))
			}
			if ev := srv.events.wait(t, 1)[0]; ev.Outcome != OutcomeServed || !strings.Contains(ev.Message, "netascii") {
				t.Errorf("event = %+v; want served, netascii", ev)
			}
		})
	}
}

func clip(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}

// TestSequentialFile serves a file that is not an io.ReaderAt.
func TestSequentialFile(t *testing.T) {
	data := pattern(300_000)
	srv := startServer(t, Config{FS: seqFS{"f": data}, Timeout: 50 * time.Millisecond})
	for _, opts := range [][]string{nil, {"windowsize", "16", "blksize", "1468", "tsize", "0"}} {
		c := newClient(t, srv.addr)
		res := c.get("f", getOpts{options: opts, drop: func(b uint64, n int) bool { return b%50 == 0 && n == 1 }})
		if !bytes.Equal(res.data, data) {
			t.Fatalf("options %v: got %d bytes, want %d", opts, len(res.data), len(data))
		}
	}
}

// TestRefused checks names that try to leave the served tree, and the
// other requests refused at once.
func TestRefused(t *testing.T) {
	tests := []struct {
		name     string
		pkt      []byte
		wantCode uint16
		wantWhy  string
	}{
		{name: "parent", pkt: rrq("../etc/passwd", "octet"), wantCode: errAccess, wantWhy: "parent directory"},
		{name: "absolute", pkt: rrq("/etc/passwd", "octet"), wantCode: errAccess, wantWhy: "absolute path"},
		{name: "absolute per-MAC", pkt: rrq("/52:54:00:12:34:56/ipxe.efi", "octet"), wantCode: errAccess, wantWhy: "absolute path"},
		{name: "inner parent", pkt: rrq("a/../../x", "octet"), wantCode: errAccess, wantWhy: "parent directory"},
		{name: "parent after MAC", pkt: rrq("52:54:00:12:34:56/../../etc/passwd", "octet"), wantCode: errAccess, wantWhy: "parent directory"},
		{name: "harmless parent still refused", pkt: rrq("dir/../ipxe.efi", "octet"), wantCode: errAccess, wantWhy: "parent directory"},
		{name: "backslash parent", pkt: rrq("..\\..\\etc\\passwd", "octet"), wantCode: errAccess, wantWhy: "backslash"},
		{name: "backslash", pkt: rrq("dir\\file.txt", "octet"), wantCode: errAccess, wantWhy: "backslash"},
		{name: "dot", pkt: rrq("./ipxe.efi", "octet"), wantCode: errAccess, wantWhy: "not a clean"},
		{name: "double slash", pkt: rrq("dir//file.txt", "octet"), wantCode: errAccess, wantWhy: "not a clean"},
		{name: "trailing slash", pkt: rrq("dir/", "octet"), wantCode: errAccess, wantWhy: "not a clean"},
		{name: "control character", pkt: rrq("ipxe.efi\x01", "octet"), wantCode: errAccess, wantWhy: "control character"},
		{name: "DEL", pkt: rrq("ipxe\x7f.efi", "octet"), wantCode: errAccess, wantWhy: "control character"},
		// A NUL ends the name: what follows is read as the mode, which
		// is refused, not served.
		{name: "NUL", pkt: []byte("\x00\x01ipxe.efi\x00/../../etc/passwd\x00octet\x00"), wantCode: errIllegalOp, wantWhy: "unsupported mode"},
		{name: "mail mode", pkt: rrq("ipxe.efi", "mail"), wantCode: errIllegalOp, wantWhy: "unsupported mode"},
		{name: "WRQ", pkt: append([]byte{0, 2}, rrq("ipxe.efi", "octet")[2:]...), wantCode: errAccess, wantWhy: "read-only"},
		{name: "directory", pkt: rrq("dir", "octet"), wantCode: errAccess, wantWhy: "not a regular file"},
	}
	srv := startServer(t, Config{FS: fixture()})
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := counterValue(t, transfersTotal.WithLabelValues(OutcomeRefused))
			c := newClient(t, srv.addr)
			c.sendTo(srv.addr, tc.pkt)
			p, _, err := c.recv(2 * time.Second)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			if op, code := packetHead(p); op != opERROR || code != tc.wantCode {
				t.Fatalf("answer %q; want ERROR %d", p, tc.wantCode)
			}
			ev := srv.events.wait(t, i+1)[i]
			if ev.Outcome != OutcomeRefused || !strings.Contains(ev.Message, tc.wantWhy) {
				t.Errorf("event = %+v; want refused, %q", ev, tc.wantWhy)
			}
			if d := counterValue(t, transfersTotal.WithLabelValues(OutcomeRefused)) - before; d != 1 {
				t.Errorf("refused count went up by %v; want 1", d)
			}
		})
	}
}

func TestNotFound(t *testing.T) {
	srv := startServer(t, Config{FS: fixture()})
	c := newClient(t, srv.addr)
	res := c.get("52-54-00-12-34-56/nothing.efi", getOpts{})
	if res.errCode != int(errNotFound) {
		t.Fatalf("got ERROR %d %q; want %d", res.errCode, res.errMsg, errNotFound)
	}
	ev := srv.events.wait(t, 1)[0]
	if ev.Outcome != OutcomeNotFound || ev.MAC.String() != "52:54:00:12:34:56" {
		t.Errorf("event = %+v; want not-found for 52:54:00:12:34:56", ev)
	}
}

func TestPerMACPath(t *testing.T) {
	fsys := fixture()
	srv := startServer(t, Config{FS: fsys})
	names := []string{"52:54:00:12:34:56/ipxe.efi", "52-54-00-12-34-56/ipxe.efi", "52:54:00:12:34:56/dir/file.txt", "52:54:00:AB:cd:EF/ipxe.efi"}
	for i, name := range names {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, srv.addr)
			res := c.get(name, getOpts{})
			_, rest, _ := strings.Cut(name, "/")
			if !bytes.Equal(res.data, fsys[rest].Data) {
				t.Fatalf("got %d bytes, want %s's %d", len(res.data), rest, len(fsys[rest].Data))
			}
			ev := srv.events.wait(t, i+1)[i]
			mac := macaddr.MustParse(name[:17])
			if ev.Outcome != OutcomeServed || ev.MAC != mac || !strings.Contains(ev.Message, name) {
				t.Errorf("event = %+v; want served for %s with the name asked", ev, mac)
			}
		})
	}
}

// TestSymlinkOutOfRoot serves an os.Root: a link inside it is followed,
// one that leaves it is refused.
func TestSymlinkOutOfRoot(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	mustWriteFile(t, secret, []byte("do not serve"))
	dir := t.TempDir()
	mustWriteFile(t, filepath.Join(dir, "ipxe.efi"), pattern(2000))
	for _, l := range []struct{ target, name string }{
		{secret, "abs-link"},
		{"../" + filepath.Base(outside) + "/secret", "rel-link"},
		{"ipxe.efi", "inner-link"},
		{outside, "dir-link"},
	} {
		if err := os.Symlink(l.target, filepath.Join(dir, l.name)); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	srv := startServer(t, Config{FS: root.FS()})
	tests := []struct {
		name        string
		wantOutcome string
	}{
		{"abs-link", OutcomeRefused},
		{"rel-link", OutcomeRefused},
		{"dir-link/secret", OutcomeRefused},
		{"inner-link", OutcomeServed},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, srv.addr)
			res := c.get(tc.name, getOpts{})
			ev := srv.events.wait(t, i+1)[i]
			if ev.Outcome != tc.wantOutcome {
				t.Errorf("event = %+v; want %s", ev, tc.wantOutcome)
			}
			if tc.wantOutcome == OutcomeRefused {
				if res.errCode != int(errAccess) || len(res.data) != 0 {
					t.Errorf("got ERROR %d and %d bytes; want ERROR %d and nothing", res.errCode, len(res.data), errAccess)
				}
				if !strings.Contains(ev.Message, "escapes") {
					t.Errorf("message %q does not say the path escapes", ev.Message)
				}
			}
		})
	}
}

func TestConcurrentTransfers(t *testing.T) {
	fsys := fixture()
	srv := startServer(t, Config{FS: fsys})
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newClient(t, srv.addr)
			opts := []string{"blksize", "1468"}
			if i%2 == 0 {
				opts = append(opts, "windowsize", strconv.Itoa(1+i%16))
			}
			res := c.get("f100k", getOpts{options: opts})
			if !bytes.Equal(res.data, fsys["f100k"].Data) {
				errs <- "client " + strconv.Itoa(i) + ": data differs"
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	for _, ev := range srv.events.wait(t, n) {
		if ev.Outcome != OutcomeServed {
			t.Errorf("event = %+v; want served", ev)
		}
	}
}

// TestMaxTransfers fills the only slot with a stalled transfer: the next
// request is dropped (no ERROR, the client asks again) and recorded.
func TestMaxTransfers(t *testing.T) {
	srv := startServer(t, Config{FS: fixture(), MaxTransfers: 1, Timeout: 200 * time.Millisecond, Retries: 1})
	stalled := newClient(t, srv.addr)
	stalled.sendTo(srv.addr, rrq("f5000", "octet"))
	if _, _, err := stalled.recv(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, srv.addr)
	c.sendTo(srv.addr, rrq("f5000", "octet"))
	ev := srv.events.wait(t, 1)[0]
	if ev.Outcome != OutcomeRefused || !strings.Contains(ev.Message, "busy") {
		t.Errorf("event = %+v; want refused, busy", ev)
	}
	// The event is recorded once the request is dealt with: an answer
	// would be here already.
	if p, ok := c.queued(); ok {
		t.Fatalf("busy server answered %q; want silence", p)
	}
	// Once the stalled transfer times out, the client's retry is served.
	srv.events.wait(t, 2)
	res := c.get("f5000", getOpts{})
	if len(res.data) != 5000 {
		t.Errorf("after the slot freed: %d bytes, want 5000", len(res.data))
	}
}

// TestDuplicateRequest sends the RRQ twice before answering: one
// transfer serves it.
func TestDuplicateRequest(t *testing.T) {
	srv := startServer(t, Config{FS: fixture()})
	c := newClient(t, srv.addr)
	marked := counterValue(t, malformedTotal) + 1
	c.sendTo(srv.addr, rrq("f5000", "octet"))
	c.sendTo(srv.addr, rrq("f5000", "octet"))
	// A marker from the same socket: the server reads its port in order,
	// so once the marker is counted both requests have been dealt with.
	c.sendTo(srv.addr, []byte{0, 99})
	waitCounter(t, malformedTotal, marked)
	if n := gaugeValue(t, activeTransfers); n != 1 {
		t.Fatalf("%v transfers in progress after both requests; want 1", n)
	}
	res := c.get("f5000", getOpts{requested: true})
	if len(res.data) != 5000 {
		t.Fatalf("got %d bytes; want 5000", len(res.data))
	}
	srv.events.wait(t, 1)
	// No other transfer is left to end and record a second event.
	if n := gaugeValue(t, activeTransfers); n != 0 {
		t.Errorf("%v transfers in progress after the first ended; want 0", n)
	}
	if n := srv.events.count(); n != 1 {
		t.Errorf("%d events; want 1 transfer", n)
	}
	if res.dups != 0 {
		t.Errorf("%d duplicate DATA packets; want 0", res.dups)
	}
}

func TestShutdown(t *testing.T) {
	srv := startServer(t, Config{FS: fixture(), Timeout: time.Minute})
	c := newClient(t, srv.addr)
	c.get("f5000", getOpts{stopAfter: 1})
	start := time.Now()
	srv.stop(t)
	if d := time.Since(start); d > time.Second {
		t.Errorf("Serve took %v to return; want < 1 s", d)
	}
	ev := srv.events.wait(t, 1)[0]
	if ev.Outcome != OutcomeError || !strings.Contains(ev.Message, "shutting down") {
		t.Errorf("event = %+v; want error, shutting down", ev)
	}
	// The client is told.
	for {
		p, _, err := c.recv(time.Second)
		if err != nil {
			t.Fatalf("no ERROR after shutdown: %v", err)
		}
		if op, _ := packetHead(p); op == opERROR {
			break
		}
	}
}

// TestWildcardBind serves on 0.0.0.0: the transfer answers from the
// address the request was sent to.
func TestWildcardBind(t *testing.T) {
	fsys := fixture()
	srv := startServerOn(t, Config{FS: fsys}, "0.0.0.0:0")
	c := newClient(t, srv.addr)
	res := c.get("f5000", getOpts{})
	if !bytes.Equal(res.data, fsys["f5000"].Data) {
		t.Fatalf("got %d bytes; want 5000", len(res.data))
	}
	if got := res.firstFrom.Addr(); got != srv.addr.Addr() {
		t.Errorf("answer came from %v; want %v", got, srv.addr.Addr())
	}
}

// TestIPv6 serves over ::1, wildcard too: the default block size limit is
// 20 bytes less than over IPv4 (the bigger header).
func TestIPv6(t *testing.T) {
	fsys := fixture()
	for _, addr := range []string{"[::1]:0", "[::]:0"} {
		t.Run(addr, func(t *testing.T) {
			srv := startServerOn(t, Config{FS: fsys}, addr)
			c := newClient(t, srv.addr)
			res := c.get("f100k", getOpts{options: []string{"blksize", "1468", "windowsize", "8"}})
			if !bytes.Equal(res.data, fsys["f100k"].Data) {
				t.Fatalf("got %d bytes; want %d", len(res.data), len(fsys["f100k"].Data))
			}
			if res.oack["blksize"] != "1448" {
				t.Errorf("OACK blksize = %q; want 1448", res.oack["blksize"])
			}
			if ev := srv.events.wait(t, 1)[0]; ev.Outcome != OutcomeServed || ev.IP != netip.IPv6Loopback() {
				t.Errorf("event = %+v; want served to ::1", ev)
			}
		})
	}
}

// TestMalformed sends packets that are not requests: each is dropped and
// counted, and the server keeps serving.
func TestMalformed(t *testing.T) {
	srv := startServer(t, Config{FS: fixture()})
	before := counterValue(t, malformedTotal)
	c := newClient(t, srv.addr)
	bad := [][]byte{
		{},
		{0},
		{0, 1},
		[]byte("\x00\x01no-terminator"),
		[]byte("\x00\x01name\x00"),
		[]byte("\x00\x01\x00octet\x00"),
		{0, 4, 0, 1},    // an ACK on the server port
		{0, 9, 1, 2, 3}, // no such opcode
	}
	for _, p := range bad {
		c.sendTo(srv.addr, p)
	}
	res := c.get("one", getOpts{})
	if string(res.data) != "x" {
		t.Fatalf("after malformed packets: got %q, want x", res.data)
	}
	if ev := srv.events.wait(t, 1)[0]; ev.Outcome != OutcomeServed {
		t.Errorf("event = %+v; want served", ev)
	}
	if d := counterValue(t, malformedTotal) - before; d != float64(len(bad)) {
		t.Errorf("malformed count went up by %v; want %d", d, len(bad))
	}
}

// TestClientGone: the client's port closes mid-transfer; the ICMP error
// ends the transfer instead of the retries (1+2+4+8+8+8 s). Linux rate
// limits ICMP errors, so the first one may not come.
func TestClientGone(t *testing.T) {
	srv := startServer(t, Config{FS: fixture(), Timeout: time.Second})
	c := newClient(t, srv.addr)
	c.get("f100k", getOpts{stopAfter: 3})
	c.sendTo(c.peer, ack(3))
	c.conn.Close()
	ev := srv.events.wait(t, 1)[0]
	if ev.Outcome != OutcomeError || !strings.Contains(ev.Message, syscall.ECONNREFUSED.Error()) {
		t.Errorf("event = %+v; want error, connection refused", ev)
	}
}

func TestNewRejects(t *testing.T) {
	fsys := fixture()
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no FS", Config{}},
		{"negative timeout", Config{FS: fsys, Timeout: -1}},
		{"negative retries", Config{FS: fsys, Retries: -1}},
		{"block size 7", Config{FS: fsys, MaxBlockSize: 7}},
		{"block size 65465", Config{FS: fsys, MaxBlockSize: 65465}},
		{"window 65536", Config{FS: fsys, MaxWindowSize: 65536}},
		{"negative window", Config{FS: fsys, MaxWindowSize: -1}},
		{"negative transfers", Config{FS: fsys, MaxTransfers: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if s, err := New(tc.cfg); err == nil {
				t.Errorf("New(%+v) = %v, nil; want an error", tc.cfg, s)
			}
		})
	}
}
