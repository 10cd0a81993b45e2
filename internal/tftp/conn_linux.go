//go:build linux

package tftp

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxGSOBytes is the most UDP payload one segmentation-offload send may
// carry: the largest IPv4 datagram minus the IPv4 and UDP headers.
const maxGSOBytes = 65535 - 20 - 8

// newSender returns the fastest sender conn allows, and whether conn is
// connected to peer.
//
// A UDP socket is connect(2)ed to the client: the kernel then drops other
// hosts' packets (so there is no source to check) and skips a route
// lookup per send. It is written with raw sendmsg(2): a window leaves in
// one call per ~64 KiB with UDP generic segmentation offload (UDP_SEGMENT,
// Linux 4.18+), the kernel cutting the buffer into one datagram per
// block; where the route cannot segment (no checksum offload, a block
// larger than the MTU) it falls back to sendmmsg(2), one call per 64
// blocks. Either way the 4-byte headers and the file data are gathered
// with iovecs, never copied into packets. Any other conn gets one WriteTo
// per packet.
//
// The system calls are raw (unix.RawSyscall): the socket is non-blocking,
// so they cannot block, and a plain syscall.Syscall would tell the Go
// scheduler, which wakes its sysmon thread when the process was idle —
// between two ACKs of a lock-step transfer it always is. That wake-up
// and the sleep after it cost about a third of the server's CPU per
// block, and 25% of the wall time, on the benchmark's VM.
func newSender(conn net.PacketConn, peer netip.AddrPort) (sender, bool) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return newPacketSender(conn, peer), false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return newPacketSender(conn, peer), false
	}
	var cerr error
	err = rc.Control(func(fd uintptr) { cerr = connectUDP(int(fd), peer) })
	if err != nil || cerr != nil {
		return newPacketSender(conn, peer), false
	}
	s := &rawSender{rc: rc, gso: true}
	s.writeFn = s.doWrite
	return s, true
}

// connectUDP connects the UDP socket fd to peer.
func connectUDP(fd int, peer netip.AddrPort) error {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return err
	}
	proto, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
	if err != nil {
		return err
	}
	if typ != unix.SOCK_DGRAM || proto != unix.IPPROTO_UDP {
		return errors.New("not a UDP socket")
	}
	domain, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return err
	}
	var sa unix.Sockaddr
	switch {
	case domain == unix.AF_INET && peer.Addr().Is4():
		sa = &unix.SockaddrInet4{Port: int(peer.Port()), Addr: peer.Addr().As4()}
	case domain == unix.AF_INET6:
		sa6 := &unix.SockaddrInet6{Port: int(peer.Port()), Addr: peer.Addr().As16()}
		if zone := peer.Addr().Zone(); zone != "" {
			if ifi, err := net.InterfaceByName(zone); err == nil {
				sa6.ZoneId = uint32(ifi.Index)
			} else if n, err := strconv.ParseUint(zone, 10, 32); err == nil {
				sa6.ZoneId = uint32(n)
			}
		}
		sa = sa6
	default:
		return errors.New("address family mismatch")
	}
	return unix.Connect(fd, sa)
}

// mmsghdr is struct mmsghdr of sendmmsg(2).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// rawSender writes to a connected UDP socket with sendmsg(2) and
// sendmmsg(2). Its arrays live in the struct, on the heap, so the
// pointers handed to the kernel stay valid for the call.
type rawSender struct {
	rc      syscall.RawConn
	gso     bool // UDP_SEGMENT worked so far
	gsoSize int  // segment size oob holds
	oob     []byte
	hdrs    [maxBatch * headerLen]byte
	iov     [2 * maxBatch]unix.Iovec
	msgs    [maxBatch]mmsghdr

	// The call in progress, for doWrite: nmsg messages from msgs with
	// sendmmsg, or when nmsg is 0 msgs[0] with sendmsg.
	nmsg, done int
	errno      syscall.Errno
	writeFn    func(fd uintptr) bool
}

func (s *rawSender) writeData(first uint64, data []byte, count, blksize int) error {
	segs := min(maxBatch, maxGSOBytes/(headerLen+blksize))
	for i := 0; i < count; {
		if k := min(count-i, segs); k > 1 && s.gso {
			err := s.sendGSO(first+uint64(i), data, i, k, blksize)
			if err == nil {
				i += k
				continue
			}
			if !gsoRefused(err) {
				return err
			}
			s.gso = false // this route cannot segment: batch instead
		}
		k := min(count-i, maxBatch)
		if err := s.sendBatch(first+uint64(i), data, i, k, blksize); err != nil {
			return err
		}
		i += k
	}
	return nil
}

// gsoRefused reports whether err means the kernel or the route will not
// segment, rather than a failure sending.
func gsoRefused(err error) bool {
	return errors.Is(err, unix.EIO) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EMSGSIZE) ||
		errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOPROTOOPT)
}

// sendGSO sends blocks i..i+k-1 of data as one buffer the kernel cuts
// into datagrams of headerLen+blksize bytes (the last may be shorter).
func (s *rawSender) sendGSO(first uint64, data []byte, i, k, blksize int) error {
	s.setSegmentSize(headerLen + blksize)
	niov := s.gather(0, 0, first, data, i, k, blksize)
	m := &s.msgs[0].hdr
	m.Name, m.Namelen = nil, 0
	m.Iov = &s.iov[0]
	m.SetIovlen(niov)
	m.Control = &s.oob[0]
	m.SetControllen(len(s.oob))
	s.nmsg = 0
	return s.call("sendmsg")
}

// sendBatch sends blocks i..i+k-1 of data, one message each.
func (s *rawSender) sendBatch(first uint64, data []byte, i, k, blksize int) error {
	v := 0
	for j := 0; j < k; j++ {
		n := s.gather(v, j, first+uint64(j), data, i+j, 1, blksize)
		m := &s.msgs[j].hdr
		m.Name, m.Namelen = nil, 0
		m.Iov = &s.iov[v]
		m.SetIovlen(n)
		m.Control = nil
		m.SetControllen(0)
		v += n
	}
	s.nmsg = k
	return s.call("sendmmsg")
}

// gather points iovecs from s.iov[v] at the headers (written to header
// slots from slot) and payloads of blocks i..i+k-1 of data, and returns
// how many iovecs it used.
func (s *rawSender) gather(v, slot int, first uint64, data []byte, i, k, blksize int) int {
	start := v
	for j := 0; j < k; j++ {
		h := s.hdrs[(slot+j)*headerLen:][:headerLen]
		putDataHeader(h, first+uint64(j))
		s.iov[v].Base = &h[0]
		s.iov[v].SetLen(headerLen)
		v++
		if p := payload(data, i+j, blksize); len(p) > 0 {
			s.iov[v].Base = &p[0]
			s.iov[v].SetLen(len(p))
			v++
		}
	}
	return v - start
}

func (s *rawSender) write(p []byte) error {
	s.iov[0].Base = &p[0]
	s.iov[0].SetLen(len(p))
	m := &s.msgs[0].hdr
	m.Name, m.Namelen = nil, 0
	m.Iov = &s.iov[0]
	m.SetIovlen(1)
	m.Control = nil
	m.SetControllen(0)
	s.nmsg = 0
	return s.call("sendmsg")
}

// setSegmentSize builds the UDP_SEGMENT control message for size.
func (s *rawSender) setSegmentSize(size int) {
	if s.gsoSize == size {
		return
	}
	s.oob = make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&s.oob[0]))
	h.Level = unix.SOL_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&s.oob[unix.CmsgLen(0)])) = uint16(size)
	s.gsoSize = size
}

// call runs the prepared send through the runtime's poller, which waits
// for the socket to drain when the kernel says EAGAIN.
func (s *rawSender) call(op string) error {
	s.done, s.errno = 0, 0
	if err := s.rc.Write(s.writeFn); err != nil {
		return err
	}
	if s.errno != 0 {
		return os.NewSyscallError(op, s.errno)
	}
	return nil
}

// doWrite is the RawConn.Write callback: false means "wait until
// writable and call again", with the progress kept in s.done.
func (s *rawSender) doWrite(fd uintptr) bool {
	if s.nmsg == 0 {
		for {
			_, _, e := unix.RawSyscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&s.msgs[0].hdr)), 0)
			switch e {
			case 0:
				return true
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false
			}
			s.errno = e
			return true
		}
	}
	for s.done < s.nmsg {
		n, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&s.msgs[s.done])), uintptr(s.nmsg-s.done), 0, 0, 0)
		switch e {
		case 0:
			s.done += int(n)
			continue
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		s.errno = e
		return true
	}
	return true
}

// rawReader reads a connected UDP socket with a raw recvfrom(2) (see
// newSender for why raw), waiting through the runtime's poller with
// RawConn.Read, so read deadlines work as for any net.Conn.
type rawReader struct {
	rc    syscall.RawConn
	buf   []byte
	n     int
	errno syscall.Errno
	fn    func(fd uintptr) bool
}

// newRawReader returns a rawReader for conn, which must be connected
// (recvfrom does not say who sent), or nil if conn has no descriptor.
func newRawReader(conn net.PacketConn) *rawReader {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &rawReader{rc: rc}
	r.fn = r.read
	return r
}

// recv reads one datagram into buf. Past the conn's read deadline the
// error is os.ErrDeadlineExceeded.
func (r *rawReader) recv(buf []byte) (int, error) {
	r.buf, r.n, r.errno = buf, 0, 0
	if err := r.rc.Read(r.fn); err != nil {
		return 0, err
	}
	if r.errno != 0 {
		return 0, os.NewSyscallError("recvfrom", r.errno)
	}
	return r.n, nil
}

// read is the RawConn.Read callback: false means "wait until readable and
// call again".
func (r *rawReader) read(fd uintptr) bool {
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&r.buf[0])), uintptr(len(r.buf)), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			r.n = int(n)
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		r.errno = e
		return true
	}
}
