//go:build !linux

package tftp

import (
	"net"
	"net/netip"
)

// newSender returns a sender writing one packet per WriteTo, and false:
// conn is not connected to peer.
func newSender(conn net.PacketConn, peer netip.AddrPort) (sender, bool) {
	return newPacketSender(conn, peer), false
}

// rawReader is Linux only: newRawReader returns nil elsewhere.
type rawReader struct{}

func newRawReader(net.PacketConn) *rawReader { return nil }

func (*rawReader) recv([]byte) (int, error) { panic("tftp: rawReader outside Linux") }
