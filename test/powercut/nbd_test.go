package powercut

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// An NBD server (the protocol of github.com/NetworkBlockDevice/nbd,
// doc/proto.md) exporting a volatileDisk: just what QEMU's NBD client
// needs to use it as a disk with a write cache. The fixed newstyle
// handshake with NBD_OPT_GO (or the older NBD_OPT_EXPORT_NAME), then
// simple replies to READ, WRITE (with FUA), FLUSH and DISC, handled one
// at a time in the order they arrive, so that a flush's reply follows
// everything before it. Every other option is refused as unsupported;
// every other command gets EINVAL (none is advertised).

// Handshake magics and flags.
const (
	nbdMagic      = 0x4e42444d41474943 // "NBDMAGIC"
	nbdOptMagic   = 0x49484156454f5054 // "IHAVEOPT"
	nbdReplyMagic = 0x0003e889045565a9 // option replies

	nbdFlagFixedNewstyle = 1 << 0 // handshake flags
	nbdFlagNoZeroes      = 1 << 1

	nbdFlagCFixedNewstyle = 1 << 0 // client flags
	nbdFlagCNoZeroes      = 1 << 1
)

// Options and option replies.
const (
	nbdOptExportName = 1
	nbdOptAbort      = 2
	nbdOptInfo       = 6
	nbdOptGo         = 7

	nbdRepAck        = 1
	nbdRepInfo       = 3
	nbdRepErrUnsup   = 1<<31 + 1
	nbdRepErrInvalid = 1<<31 + 3

	nbdInfoExport = 0

	// maxOptionLen bounds an option's data: an export name (at most 4096
	// bytes) and a few information requests.
	maxOptionLen = 8192
)

// Transmission flags: what the export is and which commands it takes.
const (
	nbdFlagHasFlags  = 1 << 0
	nbdFlagSendFlush = 1 << 2
	nbdFlagSendFUA   = 1 << 3

	exportFlags = nbdFlagHasFlags | nbdFlagSendFlush | nbdFlagSendFUA
)

// Commands, command flags, replies and errors of the transmission phase.
const (
	nbdRequestMagic = 0x25609513
	nbdSimpleReply  = 0x67446698

	nbdCmdRead  = 0
	nbdCmdWrite = 1
	nbdCmdDisc  = 2
	nbdCmdFlush = 3

	nbdCmdFlagFUA = 1 << 0

	nbdEINVAL = 22

	requestLen = 28
	// maxPayload bounds one write: QEMU sends at most 32 MiB.
	maxPayload = 32 << 20
)

// errOptionLen is a client's option longer than maxOptionLen.
var errOptionLen = errors.New("nbd: option data too long")

// nbdServer serves one volatileDisk.
type nbdServer struct {
	disk *volatileDisk
	// before, if set, is called with each request's command before it is
	// carried out (the test's power cuts happen there).
	before func(cmd uint16)
}

// serve speaks NBD on conn until the client disconnects, and returns nil
// then; a protocol error or a broken connection is returned.
func (s *nbdServer) serve(conn io.ReadWriter) error {
	noZeroes, err := s.handshake(conn)
	if err != nil {
		return err
	}
	done, err := s.options(conn, noZeroes)
	if err != nil || done {
		return err
	}
	return s.transmission(conn)
}

func (s *nbdServer) handshake(conn io.ReadWriter) (noZeroes bool, err error) {
	var hello [18]byte
	binary.BigEndian.PutUint64(hello[0:], nbdMagic)
	binary.BigEndian.PutUint64(hello[8:], nbdOptMagic)
	binary.BigEndian.PutUint16(hello[16:], nbdFlagFixedNewstyle|nbdFlagNoZeroes)
	if _, err := conn.Write(hello[:]); err != nil {
		return false, err
	}
	var cf [4]byte
	if _, err := io.ReadFull(conn, cf[:]); err != nil {
		return false, fmt.Errorf("nbd: client flags: %w", err)
	}
	flags := binary.BigEndian.Uint32(cf[:])
	if flags&^(nbdFlagCFixedNewstyle|nbdFlagCNoZeroes) != 0 {
		return false, fmt.Errorf("nbd: unknown client flags %#x", flags)
	}
	return flags&nbdFlagCNoZeroes != 0, nil
}

// options haggles until the client picks the export (done false) or
// aborts (done true).
func (s *nbdServer) options(conn io.ReadWriter, noZeroes bool) (done bool, err error) {
	for {
		var hdr [16]byte
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			return false, fmt.Errorf("nbd: option: %w", err)
		}
		if m := binary.BigEndian.Uint64(hdr[0:]); m != nbdOptMagic {
			return false, fmt.Errorf("nbd: option magic %#x", m)
		}
		opt, n := binary.BigEndian.Uint32(hdr[8:]), binary.BigEndian.Uint32(hdr[12:])
		if n > maxOptionLen {
			return false, errOptionLen
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(conn, data); err != nil {
			return false, fmt.Errorf("nbd: option data: %w", err)
		}
		switch opt {
		case nbdOptExportName:
			// No reply header: the export's size and flags, then the
			// transmission phase.
			out := make([]byte, 10, 10+124)
			binary.BigEndian.PutUint64(out[0:], uint64(s.disk.size()))
			binary.BigEndian.PutUint16(out[8:], exportFlags)
			if !noZeroes {
				out = append(out, make([]byte, 124)...)
			}
			_, err := conn.Write(out)
			return false, err
		case nbdOptAbort:
			return true, optionReply(conn, opt, nbdRepAck, nil)
		case nbdOptInfo, nbdOptGo:
			if !validGoData(data) {
				if err := optionReply(conn, opt, nbdRepErrInvalid, nil); err != nil {
					return false, err
				}
				continue
			}
			// Whatever was asked, the export's size and flags are the
			// information every client needs; any export name is this
			// disk.
			info := make([]byte, 12)
			binary.BigEndian.PutUint16(info[0:], nbdInfoExport)
			binary.BigEndian.PutUint64(info[2:], uint64(s.disk.size()))
			binary.BigEndian.PutUint16(info[10:], exportFlags)
			if err := optionReply(conn, opt, nbdRepInfo, info); err != nil {
				return false, err
			}
			if err := optionReply(conn, opt, nbdRepAck, nil); err != nil {
				return false, err
			}
			if opt == nbdOptGo {
				return false, nil
			}
		default:
			if err := optionReply(conn, opt, nbdRepErrUnsup, nil); err != nil {
				return false, err
			}
		}
	}
}

// validGoData reports whether data is an NBD_OPT_GO or NBD_OPT_INFO
// request: a name length, the name, a count of information requests and
// that many 16-bit requests.
func validGoData(data []byte) bool {
	if len(data) < 6 {
		return false
	}
	nameLen := int64(binary.BigEndian.Uint32(data))
	if nameLen > int64(len(data))-6 {
		return false
	}
	rest := data[4+nameLen:]
	return int64(len(rest)) == 2+2*int64(binary.BigEndian.Uint16(rest))
}

func optionReply(conn io.Writer, opt, typ uint32, data []byte) error {
	out := make([]byte, 20, 20+len(data))
	binary.BigEndian.PutUint64(out[0:], nbdReplyMagic)
	binary.BigEndian.PutUint32(out[8:], opt)
	binary.BigEndian.PutUint32(out[12:], typ)
	binary.BigEndian.PutUint32(out[16:], uint32(len(data)))
	_, err := conn.Write(append(out, data...))
	return err
}

// transmission serves requests until NBD_CMD_DISC.
func (s *nbdServer) transmission(conn io.ReadWriter) error {
	var hdr [requestLen]byte
	for {
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			return fmt.Errorf("nbd: request: %w", err)
		}
		if m := binary.BigEndian.Uint32(hdr[0:]); m != nbdRequestMagic {
			return fmt.Errorf("nbd: request magic %#x", m)
		}
		flags, cmd := binary.BigEndian.Uint16(hdr[4:]), binary.BigEndian.Uint16(hdr[6:])
		cookie := binary.BigEndian.Uint64(hdr[8:])
		off, n := int64(binary.BigEndian.Uint64(hdr[16:])), binary.BigEndian.Uint32(hdr[24:])
		var payload []byte
		if cmd == nbdCmdWrite {
			// The payload follows whatever the request's fate; past
			// maxPayload the stream cannot be trusted.
			if n > maxPayload {
				return fmt.Errorf("nbd: write of %d bytes", n)
			}
			// Grown as it arrives, so a bad length costs no more than
			// the bytes really sent.
			var buf bytes.Buffer
			if _, err := io.CopyN(&buf, conn, int64(n)); err != nil {
				return fmt.Errorf("nbd: write payload: %w", err)
			}
			payload = buf.Bytes()
		}
		if s.before != nil {
			s.before(cmd)
		}
		var errno uint32
		var data []byte
		switch cmd {
		case nbdCmdRead:
			if n > maxPayload || !s.disk.inRange(off, n) {
				errno = nbdEINVAL
				break
			}
			data = make([]byte, n)
			s.disk.read(off, data)
		case nbdCmdWrite:
			if !s.disk.inRange(off, n) {
				errno = nbdEINVAL
				break
			}
			s.disk.write(off, payload, flags&nbdCmdFlagFUA != 0)
		case nbdCmdFlush:
			s.disk.flush()
		case nbdCmdDisc:
			return nil
		default:
			errno = nbdEINVAL
		}
		out := make([]byte, 16, 16+len(data))
		binary.BigEndian.PutUint32(out[0:], nbdSimpleReply)
		binary.BigEndian.PutUint32(out[4:], errno)
		binary.BigEndian.PutUint64(out[8:], cookie)
		if _, err := conn.Write(append(out, data...)); err != nil {
			return fmt.Errorf("nbd: reply: %w", err)
		}
	}
}
