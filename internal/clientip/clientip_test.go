package clientip

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func mustTrusted(t testing.TB, list ...string) []netip.Prefix {
	t.Helper()
	p, err := ParseTrustedProxies(list)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestResolve(t *testing.T) {
	r := Resolver{Trusted: mustTrusted(t, "10.0.0.0/24", "192.0.2.9", "2001:db8:ff::/48")}
	tests := []struct {
		name    string
		peer    string
		xff     []string // one entry per header
		want    string
		wantErr string
	}{
		{name: "no proxy", peer: "10.20.0.17", want: "10.20.0.17"},
		{name: "untrusted peer: header ignored", peer: "10.20.0.17", xff: []string{"10.20.0.18"}, want: "10.20.0.17"},
		{name: "untrusted peer claiming a trusted hop", peer: "10.20.0.17", xff: []string{"10.20.0.18, 10.0.0.5"}, want: "10.20.0.17"},
		{name: "untrusted peer with garbage", peer: "10.20.0.17", xff: []string{"not-an-ip"}, want: "10.20.0.17"},
		{name: "untrusted peer, IPv4-mapped", peer: "::ffff:10.20.0.17", xff: []string{"10.20.0.18"}, want: "10.20.0.17"},
		{name: "trusted peer", peer: "10.0.0.5", xff: []string{"10.20.0.18"}, want: "10.20.0.18"},
		{name: "trusted single address", peer: "192.0.2.9", xff: []string{"10.20.0.18"}, want: "10.20.0.18"},
		{name: "trusted peer, IPv4-mapped", peer: "::ffff:10.0.0.5", xff: []string{"10.20.0.18"}, want: "10.20.0.18"},
		{name: "trusted peer without the header", peer: "10.0.0.5", want: "10.0.0.5"},
		{name: "spoofed left is never read", peer: "10.0.0.5", xff: []string{"10.20.0.99, 10.20.0.18"}, want: "10.20.0.18"},
		{name: "spoofed trusted hop left of the client", peer: "10.0.0.5", xff: []string{"10.0.0.7, 10.20.0.18"}, want: "10.20.0.18"},
		{name: "chain of trusted proxies", peer: "10.0.0.5", xff: []string{"10.20.0.17, 10.0.0.6, 10.0.0.7"}, want: "10.20.0.17"},
		{name: "several headers are one list", peer: "10.0.0.5", xff: []string{"10.20.0.18", "10.0.0.6"}, want: "10.20.0.18"},
		{name: "several headers, the last decides", peer: "10.0.0.5", xff: []string{"10.20.0.99", "10.20.0.18"}, want: "10.20.0.18"},
		{name: "several headers, trusted across them", peer: "10.0.0.5", xff: []string{"10.20.0.18, 10.0.0.9", "10.0.0.6,10.0.0.7"}, want: "10.20.0.18"},
		{name: "port", peer: "10.0.0.5", xff: []string{"10.20.0.18:5555"}, want: "10.20.0.18"},
		{name: "IPv6 with port", peer: "10.0.0.5", xff: []string{"[2001:db8::1]:5555"}, want: "2001:db8::1"},
		{name: "IPv6 in brackets", peer: "10.0.0.5", xff: []string{"[2001:db8::1]"}, want: "2001:db8::1"},
		{name: "IPv6 trusted proxy", peer: "2001:db8:ff::1", xff: []string{"2001:db8::1"}, want: "2001:db8::1"},
		{name: "IPv4-mapped hop", peer: "10.0.0.5", xff: []string{"::ffff:10.20.0.18"}, want: "10.20.0.18"},
		{name: "spaces and tabs", peer: "10.0.0.5", xff: []string{" \t10.20.0.18 ,\t10.0.0.6 "}, want: "10.20.0.18"},
		{name: "all trusted: the left-most", peer: "10.0.0.5", xff: []string{"10.0.0.8, 10.0.0.6"}, want: "10.0.0.8"},
		{name: "garbage left of the client is not read", peer: "10.0.0.5", xff: []string{"<script>, unknown,, 10.20.0.18"}, want: "10.20.0.18"},
		{name: "garbage right of the client", peer: "10.0.0.5", xff: []string{"10.20.0.17, not-an-ip"}, wantErr: `"not-an-ip" is not an IP address`},
		{name: "unknown", peer: "10.0.0.5", xff: []string{"unknown"}, wantErr: `"unknown" is not an IP address`},
		{name: "obfuscated identifier", peer: "10.0.0.5", xff: []string{"_hidden"}, wantErr: "is not an IP address"},
		{name: "a name", peer: "10.0.0.5", xff: []string{"node07.lab"}, wantErr: "is not an IP address"},
		{name: "empty element between trusted", peer: "10.0.0.5", xff: []string{"10.20.0.17,,10.0.0.6"}, wantErr: `"" is not an IP address`},
		{name: "empty header", peer: "10.0.0.5", xff: []string{""}, wantErr: `"" is not an IP address`},
		{name: "zone", peer: "10.0.0.5", xff: []string{"fe80::1%eth0"}, wantErr: "is not an IP address"},
		{name: "CIDR", peer: "10.0.0.5", xff: []string{"10.20.0.0/24"}, wantErr: "is not an IP address"},
		{name: "long garbage is cut in the error", peer: "10.0.0.5", xff: []string{strings.Repeat("x", 200)}, wantErr: "xxx…"},
		{name: "32 trusted hops", peer: "10.0.0.5", xff: []string{strings.Repeat("10.0.0.6,", 31) + "10.0.0.6"}, want: "10.0.0.6"},
		{name: "33 trusted hops", peer: "10.0.0.5", xff: []string{strings.Repeat("10.0.0.6,", 32) + "10.0.0.6"}, wantErr: "more than 32"},
		{name: "long chain, untrusted near the right", peer: "10.0.0.5", xff: []string{strings.Repeat("10.0.0.6,", 100) + "10.20.0.18,10.0.0.6"}, want: "10.20.0.18"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, x := range tc.xff {
				h.Add(HeaderForwardedFor, x)
			}
			got, err := r.Resolve(netip.MustParseAddr(tc.peer), h)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, errForwardedFor) {
					t.Fatalf("Resolve(%s, %q) = %v, %v; want an error containing %q", tc.peer, tc.xff, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != netip.MustParseAddr(tc.want) {
				t.Fatalf("Resolve(%s, %q) = %v, %v; want %s", tc.peer, tc.xff, got, err, tc.want)
			}
		})
	}
}

func TestZeroResolverTrustsNobody(t *testing.T) {
	h := http.Header{}
	h.Set(HeaderForwardedFor, "10.20.0.18")
	for _, peer := range []string{"127.0.0.1", "10.0.0.5", "::1"} {
		if got, err := (Resolver{}).Resolve(netip.MustParseAddr(peer), h); err != nil || got != netip.MustParseAddr(peer) {
			t.Errorf("Resolver{}.Resolve(%s) = %v, %v; want the peer", peer, got, err)
		}
	}
}

func TestOf(t *testing.T) {
	r := Resolver{Trusted: mustTrusted(t, "10.0.0.0/24")}
	tests := []struct {
		name     string
		remote   string
		xff      string
		wantAddr string // "" for invalid
		wantPeer string
		wantErr  string
		wantKey  string
	}{
		{name: "direct", remote: "10.20.0.17:4000", wantAddr: "10.20.0.17", wantPeer: "10.20.0.17", wantKey: "10.20.0.17"},
		{name: "mapped peer", remote: "[::ffff:10.20.0.17]:4000", wantAddr: "10.20.0.17", wantPeer: "10.20.0.17", wantKey: "10.20.0.17"},
		{name: "through a proxy", remote: "10.0.0.5:4000", xff: "10.20.0.18", wantAddr: "10.20.0.18", wantPeer: "10.0.0.5", wantKey: "10.20.0.18"},
		{name: "bad header from a proxy", remote: "10.0.0.5:4000", xff: "bogus", wantPeer: "10.0.0.5",
			wantErr: `from trusted proxy 10.0.0.5: bad X-Forwarded-For: "bogus" is not an IP address`, wantKey: "10.0.0.5"},
		{name: "no peer", remote: "@", wantErr: `cannot read the caller's address "@"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.RemoteAddr = tc.remote
			if tc.xff != "" {
				req.Header.Set(HeaderForwardedFor, tc.xff)
			}
			c := r.Of(req)
			str := func(a netip.Addr) string {
				if !a.IsValid() {
					return ""
				}
				return a.String()
			}
			if str(c.Addr) != tc.wantAddr || str(c.Peer) != tc.wantPeer || str(c.Key()) != tc.wantKey {
				t.Errorf("Of = %+v (key %v); want addr %q, peer %q, key %q", c, c.Key(), tc.wantAddr, tc.wantPeer, tc.wantKey)
			}
			if tc.wantErr == "" && c.Err != nil || tc.wantErr != "" && (c.Err == nil || c.Err.Error() != tc.wantErr) {
				t.Errorf("Of error = %v; want %q", c.Err, tc.wantErr)
			}
		})
	}
}

// TestHandler checks that the middleware works the client out once and
// that later readers (Of, FromContext) see that answer.
func TestHandler(t *testing.T) {
	r := Resolver{Trusted: mustTrusted(t, "10.0.0.0/24")}
	var got Client
	var ok bool
	var viaOf Client
	h := r.Handler(http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) {
		got, ok = FromContext(req.Context())
		// A resolver trusting nobody still returns what the middleware
		// found: one answer per request, wherever it is asked.
		viaOf = Resolver{}.Of(req)
	}))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "10.0.0.5:4000"
	req.Header.Set(HeaderForwardedFor, "10.20.0.18")
	h.ServeHTTP(httptest.NewRecorder(), req)
	want := netip.MustParseAddr("10.20.0.18")
	if !ok || got.Addr != want || got.Err != nil || viaOf.Addr != want {
		t.Errorf("in the handler: FromContext = %+v, %v; Of = %+v; want addr %s", got, ok, viaOf, want)
	}
	if _, ok := FromContext(context.Background()); ok {
		t.Error("FromContext(Background) found a client")
	}
}

func TestParseTrustedProxies(t *testing.T) {
	tests := []struct {
		name    string
		in      []string
		want    []string
		wantErr string
	}{
		{name: "none", in: nil, want: nil},
		{name: "prefixes and addresses", in: []string{"10.0.0.0/24", " 192.0.2.9 ", "", "2001:db8::/32", "2001:db8::1"},
			want: []string{"10.0.0.0/24", "192.0.2.9/32", "2001:db8::/32", "2001:db8::1/128"}},
		{name: "host bits cleared", in: []string{"10.0.0.7/24"}, want: []string{"10.0.0.0/24"}},
		{name: "mapped", in: []string{"::ffff:10.0.0.0/120", "::ffff:10.0.0.9"}, want: []string{"10.0.0.0/24", "10.0.0.9/32"}},
		{name: "a name", in: []string{"proxy.lab"}, wantErr: `trusted proxy "proxy.lab" is neither an IP address nor a CIDR prefix`},
		{name: "bad prefix", in: []string{"10.0.0.0/33"}, wantErr: `"10.0.0.0/33"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTrustedProxies(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("ParseTrustedProxies(%q) error = %v; want %q", tc.in, err, tc.wantErr)
				}
				return
			}
			var s []string
			for _, p := range got {
				s = append(s, p.String())
			}
			if err != nil || !slices.Equal(s, tc.want) {
				t.Errorf("ParseTrustedProxies(%q) = %v, %v; want %v", tc.in, s, err, tc.want)
			}
		})
	}
}
