package clientip

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// FuzzResolve feeds X-Forwarded-For values from a trusted and an untrusted
// peer. Properties: no panic; an untrusted peer is always the client; from
// a trusted peer the answer is an error wrapping errForwardedFor, or an
// address of the header such that every element right of it is a
// well-formed trusted address — and it is untrusted unless no element
// is.
func FuzzResolve(f *testing.F) {
	seeds := []string{
		"10.20.0.17",                      // one hop
		"10.20.0.17, 10.0.0.6",            // a client, then a trusted proxy
		"10.20.0.18, 10.20.0.17",          // a forged left, the real right
		"[2001:db8::1]:4711, 10.0.0.6:80", // ports and brackets
		"::ffff:10.20.0.17",               // IPv4-mapped
		"unknown",                         // RFC 7239's placeholder, refused
		"",                                // empty
		",,,",                             // empty elements
		"fe80::1%eth0",                    // a zone, refused
		"10.0.0.6, 10.0.0.7",              // all trusted
		"garbage, 10.20.0.17",             // garbage left of the client, never read
	}
	for _, s := range seeds {
		f.Add(s)
	}
	trusted, err := ParseTrustedProxies([]string{"10.0.0.0/24"})
	if err != nil {
		f.Fatal(err)
	}
	r := Resolver{Trusted: trusted}
	peer := netip.MustParseAddr("10.0.0.5")
	stranger := netip.MustParseAddr("10.20.0.99")
	f.Fuzz(func(t *testing.T, xff string) {
		h := http.Header{}
		h.Set(HeaderForwardedFor, xff)
		if got, err := r.Resolve(stranger, h); err != nil || got != stranger {
			t.Fatalf("untrusted peer with %q: %v, %v; want the peer", xff, got, err)
		}
		got, err := r.Resolve(peer, h)
		if err != nil {
			if !errors.Is(err, errForwardedFor) {
				t.Fatalf("Resolve(%q) error %v does not wrap errForwardedFor", xff, err)
			}
			return
		}
		els := strings.Split(xff, ",")
		// The answer is the right-most element equal to it with only
		// trusted, well-formed elements to its right.
		i := len(els) - 1
		for ; i >= 0; i-- {
			a, perr := parseHop(strings.TrimSpace(els[i]))
			if perr != nil {
				t.Fatalf("Resolve(%q) = %v, but element %q right of it is malformed", xff, got, els[i])
			}
			if a == got {
				break
			}
			if !r.trusted(a) {
				t.Fatalf("Resolve(%q) = %v, but untrusted %v is right of it", xff, got, a)
			}
		}
		if i < 0 {
			t.Fatalf("Resolve(%q) = %v, not an element of the header", xff, got)
		}
		if r.trusted(got) {
			// Only when every hop is trusted may the answer be a trusted
			// address: then it is the left-most (which may also appear
			// further right: "10.0.0.6,10.0.0.6").
			for _, el := range els {
				if a, perr := parseHop(strings.TrimSpace(el)); perr != nil || !r.trusted(a) {
					t.Fatalf("Resolve(%q) = trusted %v, but %q is not a trusted hop", xff, got, el)
				}
			}
			if a, _ := parseHop(strings.TrimSpace(els[0])); a != got {
				t.Fatalf("Resolve(%q) = trusted %v, but it is not the left-most element", xff, got)
			}
		}
	})
}
