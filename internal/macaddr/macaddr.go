// Package macaddr owns the one shape a machine's Ethernet address has
// inside Anvil: MAC, six bytes compared as a value, and Parse, the one
// function that reads one from text.
//
// A MAC enters Anvil as bytes in a DHCP packet and as text: a Hardware's
// spec.interfaces[].dhcp.mac (read by model.Interface.MAC; the object keeps
// the user's spelling), an iPXE script, config or ISO URL, a TFTP path, an
// RPC field (`anvil logs --mac`, a device or agent ID) or a field selector.
// Each entry point converts it once (FromBytes or Parse); every package
// after it passes the MAC value on, compares it with == and uses it as a
// map key, and writes it with String, the canonical form
// ("3c:ec:ef:12:34:07") of the store's indexes, agent IDs, URLs and kernel
// arguments.
//
// The package imports only the standard library so that the protocol
// packages (dhcp, tftp, httpboot, ipxe) and the agent can use it without
// linking the model.
package macaddr

import (
	"fmt"
	"net"
)

// Len is the length in bytes of an Ethernet (EUI-48) address, the only kind
// a Hardware interface has.
const Len = 6

// MAC is an Ethernet address. The zero value is no address (IsValid
// reports false), distinct from 00:00:00:00:00:00, so a MAC field can say
// "the request carried none". MAC is comparable: == compares addresses and
// it can be a map key.
type MAC struct {
	b     [Len]byte
	valid bool
}

// From returns the MAC of b.
func From(b [Len]byte) MAC { return MAC{b: b, valid: true} }

// FromBytes returns the MAC of b (a DHCP packet's chaddr, an interface's
// address) and true, or the zero MAC and false when b is not six bytes
// long. b is copied.
func FromBytes(b []byte) (MAC, bool) {
	if len(b) != Len {
		return MAC{}, false
	}
	return From([Len]byte(b)), true
}

// Parse reads a MAC written as six hex pairs separated by colons
// ("3c:ec:ef:12:34:07") or hyphens ("3C-EC-EF-12-34-07"), or as three
// groups of four hex digits separated by dots ("3cec.ef12.3407"), or as
// twelve hex digits ("3cecef123407"), in any case: the spellings
// net.ParseMAC accepts for a six-byte address. It
// allocates nothing on success. The error quotes s and shows the wanted
// form.
func Parse(s string) (MAC, error) {
	var m MAC
	ok := false
	switch len(s) {
	case 3*Len - 1: // xx:xx:xx:xx:xx:xx
		if sep := s[2]; sep == ':' || sep == '-' {
			ok = true
			for i := 0; i < Len && ok; i++ {
				j := 3 * i
				if i > 0 && s[j-1] != sep {
					ok = false
					break
				}
				m.b[i], ok = hexByte(s[j], s[j+1])
			}
		}
	case 2 * Len: // xxxxxxxxxxxx
		ok = true
		for i := 0; i < Len && ok; i++ {
			m.b[i], ok = hexByte(s[2*i], s[2*i+1])
		}
	case 3*4 + 2: // xxxx.xxxx.xxxx
		ok = true
		for i := 0; i < Len/2 && ok; i++ {
			j := 5 * i
			if i > 0 && s[j-1] != '.' {
				ok = false
				break
			}
			m.b[2*i], ok = hexByte(s[j], s[j+1])
			if ok {
				m.b[2*i+1], ok = hexByte(s[j+2], s[j+3])
			}
		}
	}
	if !ok {
		return MAC{}, &ParseError{Input: s}
	}
	m.valid = true
	return m, nil
}

// MustParse is Parse for constants: it panics when s is not a MAC.
func MustParse(s string) MAC {
	m, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return m
}

// ParseError is Parse's error: Input is not a MAC address.
type ParseError struct {
	Input string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%q is not a MAC address (want six hex bytes like 3c:ec:ef:12:34:07)", e.Input)
}

func hexByte(hi, lo byte) (byte, bool) {
	h, ok1 := unhex(hi)
	l, ok2 := unhex(lo)
	return h<<4 | l, ok1 && ok2
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// IsValid reports whether m is an address rather than the zero MAC.
func (m MAC) IsValid() bool { return m.valid }

// Bytes returns m's six bytes; all zero for the zero MAC.
func (m MAC) Bytes() [Len]byte { return m.b }

// HardwareAddr returns m for a library that wants a net.HardwareAddr (the
// DHCP packet library, netlink), or nil for the zero MAC. The slice is new.
func (m MAC) HardwareAddr() net.HardwareAddr {
	if !m.valid {
		return nil
	}
	b := m.b
	return b[:]
}

const hexDigits = "0123456789abcdef"

// AppendText appends m's canonical form (String) to b.
func (m MAC) AppendText(b []byte) ([]byte, error) {
	if !m.valid {
		return b, nil
	}
	for i, c := range m.b {
		if i > 0 {
			b = append(b, ':')
		}
		b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
	}
	return b, nil
}

// String returns m in canonical form: lower-case hex pairs separated by
// colons ("3c:ec:ef:12:34:07"), the form Anvil stores, indexes, puts in
// URLs and kernel arguments and compares as text. The zero MAC is "".
func (m MAC) String() string {
	var buf [3*Len - 1]byte
	b, _ := m.AppendText(buf[:0])
	return string(b)
}

// MarshalText implements encoding.TextMarshaler: String's form, empty for
// the zero MAC.
func (m MAC) MarshalText() ([]byte, error) { return m.AppendText(nil) }

// UnmarshalText implements encoding.TextUnmarshaler: any spelling Parse
// accepts; empty text is the zero MAC.
func (m *MAC) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*m = MAC{}
		return nil
	}
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}
