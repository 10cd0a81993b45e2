package testtool

import (
	"net"
	"sync/atomic"
)

// CountingConn is a net.Conn that counts the bytes read from and written
// to it. Its counters are safe for concurrent use.
type CountingConn struct {
	net.Conn
	read, written atomic.Int64
}

// NewCountingConn returns c counting.
func NewCountingConn(c net.Conn) *CountingConn { return &CountingConn{Conn: c} }

func (c *CountingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *CountingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

// BytesRead returns the bytes read so far.
func (c *CountingConn) BytesRead() int64 { return c.read.Load() }

// BytesWritten returns the bytes written so far.
func (c *CountingConn) BytesWritten() int64 { return c.written.Load() }

// CountingListener is a net.Listener whose connections count what the
// server reads from them, all together: wrap an httptest server's
// listener with it to learn how much of a request body the server read.
type CountingListener struct {
	net.Listener
	read atomic.Int64
}

// NewCountingListener returns ln counting.
func NewCountingListener(ln net.Listener) *CountingListener { return &CountingListener{Listener: ln} }

func (l *CountingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &listenerConn{Conn: c, l: l}, nil
}

// BytesRead returns the bytes read from every accepted connection so far.
func (l *CountingListener) BytesRead() int64 { return l.read.Load() }

type listenerConn struct {
	net.Conn
	l *CountingListener
}

func (c *listenerConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.read.Add(int64(n))
	return n, err
}
