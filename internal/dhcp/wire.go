package dhcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/anvilproj/anvil/internal/macaddr"
)

// The packet path of Serve reads requests into, and writes replies from,
// per-worker memory instead of dhcpv4.FromBytes and DHCPv4.ToBytes, which
// allocate a few dozen times per packet. parseInto and appendPacket produce
// exactly what those do (FuzzWire checks it), so Reply behaves the same on
// either.

// BOOTP header layout (RFC 951, RFC 2131 §2).
const (
	headerLen = 236 // up to and without the magic cookie
	snameLen  = 64
	fileLen   = 128
	// bootpMinLen is the smallest BOOTP message (RFC 951: 300 bytes);
	// some relays drop shorter ones.
	bootpMinLen = 300
)

var magicCookie = [4]byte{99, 130, 83, 99}

var errMagicCookie = errors.New("malformed DHCP packet: bad magic cookie")

// scratch is one worker's reusable memory: the request and reply structs
// with their option maps, and the arena reply option values are cut from.
type scratch struct {
	req, resp dhcpv4.DHCPv4
	arena     []byte
	out       []byte
	decision  Decision
	// host is the Host the last reply was built for (nil if none).
	host *Host
	// scan is the template path's reading of the current request.
	scan scan
	// looked is the Backend's answer for the current request when the
	// template path asked it (ok), so the general path does not ask again.
	looked struct {
		ok   bool
		mac  macaddr.MAC
		host *Host
		err  error
	}
}

func newScratch() *scratch {
	return &scratch{
		req:   dhcpv4.DHCPv4{Options: make(dhcpv4.Options, 16)},
		resp:  dhcpv4.DHCPv4{Options: make(dhcpv4.Options, 16)},
		arena: make([]byte, 0, 512),
		out:   make([]byte, 0, 1500),
	}
}

// parseInto decodes pkt into sc.req as dhcpv4.FromBytes would. The result
// shares memory with pkt (which must not change until the request is
// answered), except the client hardware address, which is copied: the
// Backend and the event sink may keep it.
func (sc *scratch) parseInto(pkt []byte) (*dhcpv4.DHCPv4, error) {
	if len(pkt) < headerLen+len(magicCookie) {
		return nil, io.ErrUnexpectedEOF
	}
	if [4]byte(pkt[headerLen:headerLen+4]) != magicCookie {
		return nil, errMagicCookie
	}
	p := &sc.req
	p.OpCode = dhcpv4.OpcodeType(pkt[0])
	p.HWType = iana.HWType(pkt[1])
	hlen := int(pkt[2])
	if hlen > 16 {
		hlen = 16
	}
	p.HopCount = pkt[3]
	copy(p.TransactionID[:], pkt[4:8])
	p.NumSeconds = binary.BigEndian.Uint16(pkt[8:10])
	p.Flags = binary.BigEndian.Uint16(pkt[10:12])
	p.ClientIPAddr = net.IP(pkt[12:16:16])
	p.YourIPAddr = net.IP(pkt[16:20:20])
	p.ServerIPAddr = net.IP(pkt[20:24:24])
	p.GatewayIPAddr = net.IP(pkt[24:28:28])
	hw := make(net.HardwareAddr, 16)
	copy(hw, pkt[28:44])
	p.ClientHWAddr = hw[:hlen]
	p.ServerHostName = cString(pkt[44 : 44+snameLen])
	p.BootFileName = cString(pkt[44+snameLen : headerLen])

	clear(p.Options)
	r := newOptionReader(pkt[headerLen+4:])
	for code, v, ok := r.next(); ok; code, v, ok = r.next() {
		// RFC 3396: repeated options are concatenated. The reader's
		// capacity limit makes append copy rather than write into pkt.
		if old, ok := p.Options[code]; ok {
			p.Options[code] = append(old, v...)
		} else if len(v) == 0 {
			p.Options[code] = nil // as dhcpv4.FromBytes has it
		} else {
			p.Options[code] = v
		}
	}
	if !r.complete() {
		return nil, io.ErrUnexpectedEOF
	}
	return p, nil
}

// optionReader reads the options field of a packet: code, length and
// value, pads skipped, up to the end option. The general parser and the
// template path's scan both read through it, so they agree on what a
// well-formed options field is. It allocates nothing.
type optionReader struct {
	opts []byte
	i    int
	end  bool // the end option was read, or there are no options at all
}

// newOptionReader reads opts. No options at all are accepted (as by
// dhcpv4.FromBytes); options without an end option are not.
func newOptionReader(opts []byte) optionReader {
	return optionReader{opts: opts, end: len(opts) == 0}
}

// next returns the next option; ok is false once the options are over or
// one is cut short (see complete). v's capacity ends with it, so an append
// to v copies instead of writing into the packet.
func (r *optionReader) next() (code byte, v []byte, ok bool) {
	for r.i < len(r.opts) {
		code = r.opts[r.i]
		r.i++
		switch {
		case code == optPad:
			continue
		case code == optEnd:
			r.end, r.i = true, len(r.opts)
			return 0, nil, false
		case r.i >= len(r.opts):
			return 0, nil, false
		}
		n := int(r.opts[r.i])
		r.i++
		if r.i+n > len(r.opts) {
			r.i = len(r.opts)
			return 0, nil, false
		}
		v = r.opts[r.i : r.i+n : r.i+n]
		r.i += n
		return code, v, true
	}
	return 0, nil, false
}

// complete reports whether every option was read whole, up to the end
// option.
func (r *optionReader) complete() bool { return r.end }

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	if len(b) == 0 {
		return ""
	}
	return string(b)
}

// appendPacket appends p in wire form to b, as p.ToBytes() would write it:
// options in code order with the relay agent option (82) last (RFC 3046
// §2.1), long options split (RFC 3396), padded to 300 bytes.
func appendPacket(b []byte, p *dhcpv4.DHCPv4) []byte {
	start := len(b)
	b = append(b, byte(p.OpCode), byte(p.HWType), byte(len(p.ClientHWAddr)), p.HopCount)
	b = append(b, p.TransactionID[:]...)
	b = binary.BigEndian.AppendUint16(b, p.NumSeconds)
	b = binary.BigEndian.AppendUint16(b, p.Flags)
	for _, ip := range []net.IP{p.ClientIPAddr, p.YourIPAddr, p.ServerIPAddr, p.GatewayIPAddr} {
		b = appendIP(b, ip)
	}
	b = appendFixed(b, p.ClientHWAddr, 16, 16)
	b = appendFixed(b, p.ServerHostName, snameLen-1, snameLen)
	b = appendFixed(b, p.BootFileName, fileLen-1, fileLen)
	b = append(b, magicCookie[:]...)

	// Codes in order: at most 254 distinct ones (1..254), sorted on the
	// stack.
	var codes [256]byte
	n := 0
	for c := range p.Options {
		if c == optPad || c == optEnd || c == optRelayAgentInfo {
			continue
		}
		codes[n] = c
		n++
	}
	sortBytes(codes[:n])
	if _, ok := p.Options[optRelayAgentInfo]; ok {
		codes[n] = optRelayAgentInfo
		n++
	}
	for _, c := range codes[:n] {
		b = appendOption(b, c, p.Options[c])
	}
	b = append(b, optEnd)
	for len(b)-start < bootpMinLen {
		b = append(b, optPad)
	}
	return b
}

// appendIP writes ip's four bytes, or zeros for a nil IP, as ToBytes does.
func appendIP(b []byte, ip net.IP) []byte {
	if ip == nil {
		return append(b, 0, 0, 0, 0)
	}
	if v4 := ip.To4(); v4 != nil {
		return append(b, v4...)
	}
	return append(b, 0, 0, 0, 0)
}

// appendFixed writes at most max bytes of v, zero-padded to size.
func appendFixed[T ~string | ~[]byte](b []byte, v T, max, size int) []byte {
	if len(v) > max {
		v = v[:max]
	}
	b = append(b, v...)
	for range size - len(v) {
		b = append(b, 0)
	}
	return b
}

// sortBytes is an insertion sort: option lists are a dozen codes long.
func sortBytes(s []byte) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
