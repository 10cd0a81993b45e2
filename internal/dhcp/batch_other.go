//go:build !linux

package dhcp

import (
	"context"
	"errors"
	"net"
)

// batchIO: elsewhere than Linux, Serve reads one datagram at a time.
const batchIO = false

func (s *Server) batchWorker(ctx context.Context, uc *net.UDPConn, port int) error {
	panic("unreachable: batchIO is false")
}

var errNoBatch = errors.New("dhcp: no batched reads on this system")
