package wsman

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// TestDigestResponseRFC7616 checks the worked example of RFC 7616
// section 3.9.1, for MD5 and SHA-256.
func TestDigestResponseRFC7616(t *testing.T) {
	for alg, want := range map[string]string{
		"MD5":     "8ca523f5e9506fed4657c9700eebdbec",
		"SHA-256": "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1",
	} {
		got, err := DigestResponse(DigestParams{Algorithm: alg, Username: "Mufasa", Realm: "http-auth@example.org",
			Password: "Circle of Life", Nonce: "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v",
			CNonce: "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ", NC: "00000001", QOP: "auth", Method: "GET", URI: "/dir/index.html"})
		if err != nil || got != want {
			t.Errorf("%s: %s %v; want %s", alg, got, err, want)
		}
	}
	if _, err := DigestResponse(DigestParams{Algorithm: "SHA-1"}); !errors.Is(err, ErrUnsupportedAuth) {
		t.Errorf("SHA-1: %v; want unsupported", err)
	}
}

func TestParseChallenges(t *testing.T) {
	chs, err := ParseChallenges([]string{
		`Negotiate YII=, Digest realm="Digest:8E1F", nonce="a\"b", stale=FALSE, qop="auth,auth-int"`,
		`Basic realm="x"`,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(chs) != 3 || chs[0].Scheme != "Negotiate" || chs[0].Params[""] != "YII=" ||
		chs[1].Scheme != "Digest" || chs[1].Params["realm"] != "Digest:8E1F" || chs[1].Params["nonce"] != `a"b` ||
		chs[1].Params["stale"] != "FALSE" || chs[1].Params["qop"] != "auth,auth-int" || chs[2].Scheme != "Basic" {
		t.Errorf("parsed %+v", chs)
	}
	for _, bad := range []string{`Digest realm="open`, `Digest realm=x=y`, `Digest =x`, `Digest realm="a\`} {
		if _, err := ParseChallenges([]string{bad}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if _, err := pickDigest(chs[:1]); !errors.Is(err, ErrUnsupportedAuth) || !strings.Contains(err.Error(), "the server offers [Negotiate]") {
		t.Errorf("only Negotiate: %v", err)
	}
	// SHA-256 is taken over MD5 when both are offered.
	p, err := pickDigest([]Challenge{
		{Scheme: "Digest", Params: map[string]string{"realm": "r", "nonce": "n1", "qop": "auth", "algorithm": "MD5"}},
		{Scheme: "Digest", Params: map[string]string{"realm": "r", "nonce": "n2", "qop": "auth", "algorithm": "SHA-256"}},
	})
	if err != nil || p.alg != "SHA-256" || p.nonce != "n2" {
		t.Errorf("picked %+v %v", p, err)
	}
	if _, err := pickDigest([]Challenge{{Scheme: "Digest", Params: map[string]string{"nonce": "n", "qop": "auth-int"}}}); err == nil {
		t.Error("auth-int only: accepted")
	}
}

// TestDigestTransportReusesNonce: one challenge serves many requests with
// rising nonce counts, and the body is sent again after the challenge.
func TestDigestTransportReusesNonce(t *testing.T) {
	var challenges, ok atomic.Int32
	var lastNC atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h := r.Header.Get("Authorization")
		if h == "" {
			challenges.Add(1)
			w.Header().Set("WWW-Authenticate", `Digest realm="r", nonce="n", qop="auth", algorithm=SHA-256`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		chs, err := ParseChallenges([]string{h})
		if err != nil {
			t.Errorf("Authorization %q: %v", h, err)
			return
		}
		p := chs[0].Params
		want, _ := DigestResponse(DigestParams{Algorithm: "SHA-256", Username: "u", Realm: "r", Password: "pw", Nonce: "n",
			CNonce: p["cnonce"], NC: p["nc"], QOP: "auth", Method: r.Method, URI: p["uri"]})
		if p["response"] != want || string(body) != "payload" || p["algorithm"] != "SHA-256" {
			t.Errorf("Authorization %q, body %q", h, body)
		}
		lastNC.Store(p["nc"])
		ok.Add(1)
	}))
	defer srv.Close()
	c := &http.Client{Transport: &DigestTransport{Username: "u", Password: "pw"}}
	for range 3 {
		resp, err := c.Post(srv.URL+"/wsman", "text/plain", strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if challenges.Load() != 1 || ok.Load() != 3 || lastNC.Load() != "00000003" {
		t.Errorf("challenges %d, answered %d, last nc %v; want 1, 3, 00000003", challenges.Load(), ok.Load(), lastNC.Load())
	}
}

func TestMarshalParse(t *testing.T) {
	r := Request{To: "http://h:16992/wsman", Action: ActionGet, ResourceURI: "http://x/C", MessageID: "uuid:1",
		Selectors: []Selector{{Name: "Name", Value: `a<b&"c"`}}, Body: T("http://x/C", "V", "1 < 2")}
	e, err := Parse(Marshal(r.Envelope()))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := e.Path("Header", "SelectorSet").Value("Selector"); v != `a<b&"c"` {
		t.Errorf("selector %q", v)
	}
	if e.Path("Header", "SelectorSet", "Selector").Attr("Name") != "Name" {
		t.Error("selector name lost")
	}
	if v, _ := e.Path("Body").Value("V"); v != "1 < 2" || e.Path("Body", "V").Name.Space != "http://x/C" {
		t.Errorf("body %+v", e.Path("Body", "V"))
	}
}

func TestParseResponseFault(t *testing.T) {
	_, err := ParseResponse([]byte(`<e:Envelope xmlns:e="http://www.w3.org/2003/05/soap-envelope" xmlns:w="http://schemas.dmtf.org/wbem/wsman/1/wsman.xsd"><e:Body><e:Fault>
		<e:Code><e:Value>e:Receiver</e:Value><e:Subcode><e:Value>w:InternalError</e:Value></e:Subcode></e:Code>
		<e:Reason><e:Text xml:lang="en">The service cannot
		comply.</e:Text></e:Reason><e:Detail><w:FaultDetail>http://schemas.dmtf.org/wbem/wsman/1/wsman/faultDetail/InvalidValue</w:FaultDetail></e:Detail></e:Fault></e:Body></e:Envelope>`))
	var f *Fault
	if !errors.As(err, &f) {
		t.Fatalf("%v; want a Fault", err)
	}
	want := "SOAP Fault InternalError: The service cannot comply. (http://schemas.dmtf.org/wbem/wsman/1/wsman/faultDetail/InvalidValue)"
	if f.Error() != want {
		t.Errorf("%q\nwant %q", f.Error(), want)
	}
	for _, bad := range []string{``, `<a/>`, `<e:Envelope xmlns:e="http://www.w3.org/2003/05/soap-envelope"/>`, `<x><y></x>`,
		strings.Repeat("<a>", maxDepth+1)} {
		if _, err := ParseResponse([]byte(bad)); err == nil {
			t.Errorf("%.40q: no error", bad)
		}
	}
}

// TestClientHTTPErrors: a 401 is ErrUnauthorized; a non-SOAP error page
// is an HTTPError with its status.
func TestClientHTTPErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Case") == "401" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		http.Error(w, "<html>busy</html>", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r.Header.Set("X-Case", r.URL.Query().Get("case"))
		return http.DefaultTransport.RoundTrip(r)
	})}
	_, err := (&Client{Endpoint: srv.URL + "/wsman?case=401", HTTP: hc}).Get(context.Background(), "http://x/C", nil)
	if !errors.Is(err, ErrUnauthorized) {
		t.Errorf("401: %v", err)
	}
	_, err = (&Client{Endpoint: srv.URL + "/wsman", HTTP: hc}).Get(context.Background(), "http://x/C", nil)
	var he *HTTPError
	if !errors.As(err, &he) || he.Status != 503 || err.Error() != "HTTP 503 Service Unavailable: <html>busy</html>" {
		t.Errorf("503: %v", err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// FuzzParseResponse: any answer parses or is refused with an error,
// never panics; a Fault is always a *Fault; and what Parse reads, Marshal
// writes back to the same tree (the round trip the test AMT relies on to
// compare requests).
func FuzzParseResponse(f *testing.F) {
	// A plain answer, a Fault, and a broken document.
	f.Add([]byte(`<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope"><s:Body><x>1</x></s:Body></s:Envelope>`))
	f.Add([]byte(`<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope"><s:Body><s:Fault><s:Code><s:Value>s:Sender</s:Value></s:Code></s:Fault></s:Body></s:Envelope>`))
	f.Add([]byte(`<a><b>`))
	// Attributes in a namespace, escaped text, an element without one.
	f.Add([]byte(`<w:S xmlns:w="urn:w" w:Name="a&amp;b"><plain>x &lt; y</plain></w:S>`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseResponse(data)
		var fault *Fault
		if err == nil && (r == nil || r.Body == nil) {
			t.Fatal("no error and no body")
		}
		if errors.As(err, &fault) {
			_ = fault.Error()
		}
		e, err := Parse(data)
		if err != nil {
			return
		}
		again, err := Parse(Marshal(e))
		if err != nil {
			t.Fatalf("Marshal(Parse(%q)) does not parse: %v\n%s", data, err, Marshal(e))
		}
		if a, b := dump(e), dump(again); a != b {
			t.Fatalf("round trip of %q:\n%s\nbecame\n%s", data, a, b)
		}
	})
}

// dump writes a tree with names by namespace URI, for comparing.
func dump(e *Element) string {
	var b strings.Builder
	var walk func(*Element)
	walk = func(e *Element) {
		b.WriteString("<{" + e.Name.Space + "}" + e.Name.Local)
		for _, a := range e.Attrs {
			b.WriteString(" {" + a.Name.Space + "}" + a.Name.Local + "=" + strconv.Quote(a.Value))
		}
		b.WriteString(">" + strconv.Quote(strings.TrimSpace(e.Text)))
		for _, c := range e.Children {
			walk(c)
		}
		b.WriteString("</>")
	}
	walk(e)
	return b.String()
}

// FuzzParseChallenges: any header parses or is refused, never panics; a
// parsed Digest challenge can be answered or is refused by pickDigest.
func FuzzParseChallenges(f *testing.F) {
	// AMT's challenge; several schemes with a token68; SHA-256-sess with
	// userhash and an escaped quote.
	f.Add(`Digest realm="Digest:8E1F", nonce="abc", stale="false", qop="auth"`)
	f.Add(`Negotiate YII=, Basic realm="x"`)
	f.Add(`Digest realm="a\"b", algorithm=SHA-256-sess, userhash=true, nonce=x, qop=auth`)
	f.Fuzz(func(t *testing.T, h string) {
		chs, err := ParseChallenges([]string{h})
		if err != nil {
			return
		}
		for _, c := range chs {
			if c.Scheme == "" {
				t.Fatalf("%q: a challenge without a scheme", h)
			}
		}
		if p, err := pickDigest(chs); err == nil {
			tr := &DigestTransport{Username: "u", Password: "p"}
			tr.ch = &p.digestState
			req, _ := http.NewRequest(http.MethodPost, "http://h/wsman", nil)
			if _, err := tr.authorization(req); err != nil {
				t.Fatalf("%q: %v", h, err)
			}
		}
	})
}
