package testtool

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
)

// SmallReceiveBuffer is a net.Dialer Control that gives the socket a 4 KiB
// receive buffer, so a server writing to a client that stops reading
// blocks as soon as the kernel's buffers fill.
func SmallReceiveBuffer(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
	})
	return errors.Join(err, serr)
}

// StalledGet connects to addr from local (nil: any address) with a small
// receive buffer, sends an HTTP/1.1 GET for path and never reads the
// answer: a download that stalls. The connection closes when the test
// ends.
func StalledGet(t testing.TB, local net.IP, addr, path string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: SmallReceiveBuffer}
	if local != nil {
		d.LocalAddr = &net.TCPAddr{IP: local}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: anvil\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return c
}
