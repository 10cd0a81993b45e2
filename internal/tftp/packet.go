package tftp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
)

// Opcodes (RFC 1350 section 5; OACK from RFC 2347).
const (
	opRRQ   uint16 = 1
	opWRQ   uint16 = 2
	opDATA  uint16 = 3
	opACK   uint16 = 4
	opERROR uint16 = 5
	opOACK  uint16 = 6
)

// Error codes (RFC 1350 appendix; 8 from RFC 2347).
const (
	errUndefined     uint16 = 0 // not defined, see the message
	errNotFound      uint16 = 1 // file not found
	errAccess        uint16 = 2 // access violation
	errDiskFull      uint16 = 3 // disk full or allocation exceeded
	errIllegalOp     uint16 = 4 // illegal TFTP operation
	errUnknownTID    uint16 = 5 // unknown transfer ID
	errFileExists    uint16 = 6 // file already exists
	errNoSuchUser    uint16 = 7 // no such user
	errOptionRefused uint16 = 8 // option negotiation refused (RFC 2347)
)

// Transfer modes served (RFC 1350 section 2; compared case-insensitively).
// The third, "mail", is obsolete and refused like any other.
const (
	modeOctet    = "octet"
	modeNetascii = "netascii"
)

// Option names (compared case-insensitively; sent in lower case).
const (
	optBlksize    = "blksize"    // RFC 2348
	optTimeout    = "timeout"    // RFC 2349
	optTsize      = "tsize"      // RFC 2349
	optWindowsize = "windowsize" // RFC 7440
)

// Option value limits.
const (
	minBlksize    = 8     // RFC 2348
	maxBlksize    = 65464 // RFC 2348
	minTimeout    = 1     // RFC 2349, seconds
	maxTimeout    = 255   // RFC 2349, seconds
	minWindowsize = 1     // RFC 7440
	maxWindowsize = 65535 // RFC 7440
)

const (
	// defaultBlksize is the block size without the blksize option (RFC 1350).
	defaultBlksize = 512
	// headerLen is the size of a DATA, ACK or ERROR header: opcode and
	// block number or error code.
	headerLen = 4
)

// option is one name/value pair of a request or an OACK, as sent.
type option struct {
	name, value string
}

// request is a parsed RRQ or WRQ (RFC 1350 section 5, RFC 2347 section 2):
//
//	opcode | filename | 0 | mode | 0 | opt1 | 0 | value1 | 0 | ...
type request struct {
	op       uint16 // opRRQ or opWRQ
	filename string // as sent, unchecked: see resolvePath
	mode     string // as sent; compare with strings.EqualFold
	options  []option
}

// errMalformed is returned by parseRequest for a packet that is not a
// well-formed request.
var errMalformed = errors.New("malformed request")

// parseRequest parses an RRQ or WRQ. The file name and mode must be
// non-empty and NUL-terminated. Options are read as name/value pairs up
// to the first empty name; an incomplete trailing pair (some clients pad
// requests) is ignored, so a request never fails because of its options.
// Option names and values are not checked here: negotiation ignores the
// ones it does not understand (RFC 2347).
func parseRequest(b []byte) (request, error) {
	if len(b) < 2 {
		return request{}, errMalformed
	}
	var r request
	r.op = binary.BigEndian.Uint16(b)
	if r.op != opRRQ && r.op != opWRQ {
		return request{}, errMalformed
	}
	rest := b[2:]
	name, rest, ok := cutString(rest)
	if !ok || name == "" {
		return request{}, errMalformed
	}
	mode, rest, ok := cutString(rest)
	if !ok || mode == "" {
		return request{}, errMalformed
	}
	r.filename, r.mode = name, mode
	for {
		name, after, ok := cutString(rest)
		if !ok || name == "" {
			break
		}
		value, after, ok := cutString(after)
		if !ok {
			break
		}
		r.options = append(r.options, option{name: name, value: value})
		rest = after
	}
	return r, nil
}

// cutString splits a NUL-terminated string off the front of b. ok is
// false if b has no NUL.
func cutString(b []byte) (s string, rest []byte, ok bool) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return "", b, false
	}
	return string(b[:i]), b[i+1:], true
}

// appendRequest appends r in wire form to b. It is the inverse of
// parseRequest for the requests parseRequest returns.
func appendRequest(b []byte, r request) []byte {
	b = binary.BigEndian.AppendUint16(b, r.op)
	b = appendString(b, r.filename)
	b = appendString(b, r.mode)
	for _, o := range r.options {
		b = appendString(b, o.name)
		b = appendString(b, o.value)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = append(b, s...)
	return append(b, 0)
}

// appendOACK appends an option acknowledgement (RFC 2347) to b.
func appendOACK(b []byte, opts []option) []byte {
	b = binary.BigEndian.AppendUint16(b, opOACK)
	for _, o := range opts {
		b = appendString(b, o.name)
		b = appendString(b, o.value)
	}
	return b
}

// appendError appends an ERROR packet to b. The message is sanitized to
// printable ASCII without NUL.
func appendError(b []byte, code uint16, msg string) []byte {
	b = binary.BigEndian.AppendUint16(b, opERROR)
	b = binary.BigEndian.AppendUint16(b, code)
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c < 0x20 || c >= 0x7f {
			c = '?'
		}
		b = append(b, c)
	}
	return append(b, 0)
}

// parseError returns the code and message of an ERROR packet's body (b
// without the opcode). A missing NUL is tolerated.
func parseError(b []byte) (code uint16, msg string) {
	if len(b) < 2 {
		return errUndefined, ""
	}
	code = binary.BigEndian.Uint16(b)
	m := b[2:]
	if i := bytes.IndexByte(m, 0); i >= 0 {
		m = m[:i]
	}
	return code, strings.ToValidUTF8(string(m), "?")
}

// errorCodeName returns the RFC's name of an error code, for logs.
func errorCodeName(code uint16) string {
	switch code {
	case errUndefined:
		return "not defined"
	case errNotFound:
		return "file not found"
	case errAccess:
		return "access violation"
	case errDiskFull:
		return "disk full"
	case errIllegalOp:
		return "illegal operation"
	case errUnknownTID:
		return "unknown transfer ID"
	case errFileExists:
		return "file already exists"
	case errNoSuchUser:
		return "no such user"
	case errOptionRefused:
		return "option negotiation refused"
	}
	return "unknown error code"
}

// parseDecimal parses a non-negative decimal option value: digits only,
// no sign or spaces. Values above limit (and overflowing ones) return
// limit+1, so callers can clamp or refuse without overflow.
func parseDecimal(s string, limit int) (int, bool) {
	if s == "" {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n <= limit {
			n = n*10 + int(c-'0')
		}
	}
	if n > limit {
		n = limit + 1
	}
	return n, true
}
