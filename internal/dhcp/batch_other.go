//go:build !linux

package dhcp

import (
	"context"
	"net"
)

// batchIO: elsewhere than Linux, Serve reads one datagram at a time.
const batchIO = false

func (s *Server) batchWorker(ctx context.Context, uc *net.UDPConn, port int) error {
	panic("unreachable: batchIO is false")
}
