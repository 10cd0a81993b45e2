package server

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/testtool"
)

// sendfileListener hands net/http connections that record how response
// bytes reach the socket: through ReadFrom with a file as the source —
// what net/http does only on its zero-copy path, and what net turns into
// sendfile(2) — or through Write, from user space.
type sendfileListener struct {
	net.Listener
	fromFile atomic.Int64 // bytes sent by ReadFrom from a file
	copied   atomic.Int64 // bytes sent by Write, or by ReadFrom from anything else
}

func (l *sendfileListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("accepted a %T, not a TCP connection", c)
	}
	return &sendfileConn{TCPConn: tc, l: l}, nil
}

// sendfileConn is a TCP connection that counts for its listener. Its
// ReadFrom is the TCP connection's: the file still goes by sendfile.
type sendfileConn struct {
	*net.TCPConn
	l *sendfileListener
}

func (c *sendfileConn) Write(b []byte) (int, error) {
	n, err := c.TCPConn.Write(b)
	c.l.copied.Add(int64(n))
	return n, err
}

func (c *sendfileConn) ReadFrom(src io.Reader) (int64, error) {
	n, err := c.TCPConn.ReadFrom(src)
	if isFile(src) {
		c.l.fromFile.Add(n)
	} else {
		c.l.copied.Add(n)
	}
	return n, err
}

// isFile reports whether net's sendfile takes src: a file, or a file
// behind one *io.LimitedReader.
func isFile(src io.Reader) bool {
	if lr, ok := src.(*io.LimitedReader); ok {
		src = lr.R
	}
	_, ok := src.(*os.File)
	_, conn := src.(syscall.Conn)
	return ok && conn
}

// TestImagesUseSendfile: an OS image served by the real server — the
// clientip handler, the boot limits, the pacer, the request log, metrics
// and machine record all wrapping the file response — reaches the TCP
// connection's ReadFrom with the file as source, so the kernel sends it
// (sendfile) and no body passes through user space but the 512 bytes
// net/http reads first to start the response. Both a full GET and a Range
// GET, and the request log still counts every body byte.
func TestImagesUseSendfile(t *testing.T) {
	const size = 8 << 20 // several of the pacer's 4 MiB sendfile chunks
	images := t.TempDir()
	f, err := os.Create(filepath.Join(images, "os.raw"))
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Truncate(size), f.Close()); err != nil {
		t.Fatal(err)
	}
	var rec *sendfileListener
	base, _, _, _, logs := startWith(t, func(c *Config) {
		c.ImagesDir = images
		// Every wrapper of the boot path on, at anvil serve's defaults.
		c.BootRate, c.BootBurst, c.BootConcurrency = DefaultBootRate, DefaultBootBurst, DefaultBootConcurrency
		c.BootClientRate, c.BootClientBurst, c.BootClientConcurrency = DefaultBootClientRate, DefaultBootClientBurst, DefaultBootClientConcurrency
		c.BootStallTimeout, c.BootMinSendRate, c.BootSendGrace = DefaultBootStallTimeout, DefaultBootMinSendRate, DefaultBootSendGrace
		rec = &sendfileListener{Listener: c.Listeners.HTTP}
		c.Listeners.HTTP = rec
	})
	// Headers, the first 512 bytes of the body and the chunked /readyz
	// answers of startup: far less than any body.
	const userSpace = 16 << 10
	tests := []struct {
		name, rng string
		code      int
		length    int64
		logged    string
	}{
		{name: "full GET", code: http.StatusOK, length: size, logged: "200, 8,388,608 bytes"},
		{name: "Range GET", rng: "bytes=1000-6000999", code: http.StatusPartialContent, length: 6_000_000,
			logged: "206, 6,000,000 bytes (of 8,388,608, bytes=1000-6000999)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file0, copied0 := rec.fromFile.Load(), rec.copied.Load()
			req, err := http.NewRequest(http.MethodGet, base+"/images/os.raw", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.rng != "" {
				req.Header.Set("Range", tc.rng)
			}
			// A connection of its own, closed after: nothing else is
			// sent while the counters run.
			tr := &http.Transport{DisableKeepAlives: true}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr, Timeout: time.Minute}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != tc.code || n != tc.length {
				t.Fatalf("got %s with %d bytes (%v); want %d with %d", resp.Status, n, err, tc.code, tc.length)
			}
			fromFile, copied := rec.fromFile.Load()-file0, rec.copied.Load()-copied0
			if fromFile < tc.length-userSpace || copied > userSpace {
				t.Errorf("%d body bytes: %d sent from the file by ReadFrom (sendfile), %d by copies in user space; "+
					"want all but a few KiB by sendfile: a writer on the way hides io.ReaderFrom", n, fromFile, copied)
			}
			// The log line is written once the handler returns, which
			// may be just after the client has read the last byte.
			testtool.WaitFor(t, "the request's log line", func() bool {
				return strings.Contains(logs.String(), strconv.Quote("http boot: "+tc.logged))
			})
		})
	}
}
