package tftp

import (
	"bytes"
	"io"
)

// Netascii (RFC 1350 section 2, after the Telnet NVT of RFC 764): a line
// end is CR LF and a bare CR is CR NUL. The file is stored with Unix line
// ends, so LF becomes CR LF and CR becomes CR NUL; a receiver applying
// the reverse mapping gets the file back byte for byte.
const (
	asciiCR  = '\r'
	asciiLF  = '\n'
	asciiNUL = 0
)

// netasciiReader translates r to netascii as it is read.
type netasciiReader struct {
	r       io.Reader
	buf     []byte // raw input
	in      []byte // raw input not yet translated, a suffix of buf
	pending int    // second byte of a translated pair, or -1
	err     error  // r's error, returned once in has been drained
}

func newNetasciiReader(r io.Reader) *netasciiReader {
	return &netasciiReader{r: r, buf: make([]byte, 32<<10), pending: -1}
}

func (n *netasciiReader) Read(p []byte) (int, error) {
	w := 0
	for w < len(p) {
		if n.pending >= 0 {
			p[w] = byte(n.pending)
			w++
			n.pending = -1
			continue
		}
		if len(n.in) == 0 {
			if n.err != nil {
				break
			}
			m, err := n.r.Read(n.buf)
			n.in, n.err = n.buf[:m], err
			continue
		}
		// Copy the run up to the next CR or LF in one go.
		i := indexCRLF(n.in)
		if i < 0 {
			i = len(n.in)
		}
		k := copy(p[w:], n.in[:i])
		w += k
		n.in = n.in[k:]
		if k < i || len(n.in) == 0 || w == len(p) {
			continue
		}
		c := n.in[0]
		n.in = n.in[1:]
		p[w] = asciiCR
		w++
		if c == asciiLF {
			n.pending = asciiLF
		} else {
			n.pending = asciiNUL
		}
	}
	if w == 0 && n.err != nil {
		return 0, n.err
	}
	return w, nil
}

// indexCRLF returns the index of the first CR or LF in b, or -1.
func indexCRLF(b []byte) int {
	lf := bytes.IndexByte(b, asciiLF)
	end := len(b)
	if lf >= 0 {
		end = lf
	}
	if cr := bytes.IndexByte(b[:end], asciiCR); cr >= 0 {
		return cr
	}
	return lf
}

// netasciiLen returns the length of r's content once translated to
// netascii: one more byte for each CR and each LF.
func netasciiLen(r io.Reader) (int64, error) {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		m, err := r.Read(buf)
		b := buf[:m]
		n += int64(m) + int64(bytes.Count(b, []byte{asciiLF})) + int64(bytes.Count(b, []byte{asciiCR}))
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
