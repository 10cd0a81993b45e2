package tftp

import (
	"encoding/binary"
	"net"
	"net/netip"
)

// sender writes a transfer's packets to its client.
type sender interface {
	// writeData sends count DATA packets for blocks first, first+1, …
	// (numbered modulo 65536: block 65536 goes out as 0). Their payloads
	// are data cut in blksize pieces; the last may be shorter or empty.
	writeData(first uint64, data []byte, count, blksize int) error
	// write sends one packet.
	write(p []byte) error
}

// maxBatch bounds the packets handed to the kernel in one call.
const maxBatch = 64

// packetSender sends one packet per WriteTo: for any net.PacketConn.
type packetSender struct {
	conn net.PacketConn
	to   net.Addr
	pkt  []byte
}

func newPacketSender(conn net.PacketConn, peer netip.AddrPort) *packetSender {
	return &packetSender{conn: conn, to: net.UDPAddrFromAddrPort(peer)}
}

func (s *packetSender) writeData(first uint64, data []byte, count, blksize int) error {
	for i := 0; i < count; i++ {
		s.pkt = appendData(s.pkt[:0], first+uint64(i), payload(data, i, blksize))
		if err := s.write(s.pkt); err != nil {
			return err
		}
	}
	return nil
}

func (s *packetSender) write(p []byte) error {
	_, err := s.conn.WriteTo(p, s.to)
	return err
}

// appendData appends a DATA packet to b.
func appendData(b []byte, block uint64, payload []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, opDATA)
	b = binary.BigEndian.AppendUint16(b, uint16(block))
	return append(b, payload...)
}

// putDataHeader writes the header of DATA block into h[:headerLen].
func putDataHeader(h []byte, block uint64) {
	binary.BigEndian.PutUint16(h, opDATA)
	binary.BigEndian.PutUint16(h[2:], uint16(block))
}

// payload returns the i-th blksize piece of data (shorter or empty at the
// end).
func payload(data []byte, i, blksize int) []byte {
	lo := min(i*blksize, len(data))
	return data[lo:min(lo+blksize, len(data))]
}
