package metadata

import (
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"testing"
)

// FuzzClientAddr feeds X-Forwarded-For values from a trusted and an
// untrusted peer. Properties: no panic; an untrusted peer is always the
// caller; a trusted peer's answer is the peer (no header), an error
// wrapping errForwardedFor, or one of the header's own addresses — never
// a trusted one unless every address is trusted.
func FuzzClientAddr(f *testing.F) {
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
	}
	for _, s := range seeds {
		f.Add(s)
	}
	trusted, err := ParseTrustedProxies([]string{"10.0.0.0/24"})
	if err != nil {
		f.Fatal(err)
	}
	peer := netip.MustParseAddr("10.0.0.5")
	stranger := netip.MustParseAddr("10.20.0.99")
	f.Fuzz(func(t *testing.T, xff string) {
		h := http.Header{}
		h.Set(HeaderForwardedFor, xff)
		if got, err := clientAddr(stranger, h, trusted); err != nil || got != stranger {
			t.Fatalf("untrusted peer with %q: %v, %v; want the peer", xff, got, err)
		}
		got, err := clientAddr(peer, h, trusted)
		if err != nil {
			if !errors.Is(err, errForwardedFor) {
				t.Fatalf("clientAddr(%q) error %v does not wrap errForwardedFor", xff, err)
			}
			return
		}
		hops, perr := parseForwardedFor([]string{xff})
		if perr != nil {
			t.Fatalf("clientAddr(%q) = %v but the header does not parse: %v", xff, got, perr)
		}
		if !got.IsValid() || !slices.Contains(hops, got) {
			t.Fatalf("clientAddr(%q) = %v; want one of %v", xff, got, hops)
		}
		allTrusted := !slices.ContainsFunc(hops, func(a netip.Addr) bool { return !isTrusted(a, trusted) })
		if isTrusted(got, trusted) && !allTrusted {
			t.Fatalf("clientAddr(%q) = trusted %v while %v has an untrusted address", xff, got, hops)
		}
	})
}
