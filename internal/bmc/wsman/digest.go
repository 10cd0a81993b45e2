package wsman

import (
	"crypto/md5" //nolint:gosec // RFC 7616's MD5 is what AMT firmware speaks; SHA-256 is preferred when offered
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strings"
	"sync"
)

// Challenge is one challenge of a WWW-Authenticate header (RFC 7235): a
// scheme and its parameters, names lower-cased.
type Challenge struct {
	Scheme string
	Params map[string]string
}

// ParseChallenges reads every challenge of the WWW-Authenticate header
// values: `Digest realm="x", nonce="y", Negotiate` is two. A value that is
// not made of challenges is an error naming where it went wrong.
func ParseChallenges(values []string) ([]Challenge, error) {
	var out []Challenge
	for _, v := range values {
		p := &authParser{s: v}
		cs, err := p.challenges()
		if err != nil {
			return nil, fmt.Errorf("WWW-Authenticate %q: %w", v, err)
		}
		out = append(out, cs...)
	}
	return out, nil
}

// authParser reads RFC 7235's grammar: challenge = auth-scheme [ 1*SP (
// token68 / #auth-param ) ], challenges separated by commas.
type authParser struct {
	s string
	i int
}

func (p *authParser) skipSpace() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func isTokenChar(c byte) bool {
	if c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func (p *authParser) token() string {
	start := p.i
	for p.i < len(p.s) && isTokenChar(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i]
}

func (p *authParser) quoted() (string, error) {
	p.i++ // the opening quote
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch c {
		case '"':
			p.i++
			return b.String(), nil
		case '\\':
			p.i++
			if p.i >= len(p.s) {
				return "", errors.New("a quoted string ends in a backslash")
			}
			c = p.s[p.i]
		}
		b.WriteByte(c)
		p.i++
	}
	return "", errors.New("a quoted string is not closed")
}

func (p *authParser) challenges() ([]Challenge, error) {
	var out []Challenge
	for {
		p.skipSpace()
		for p.i < len(p.s) && p.s[p.i] == ',' { // empty list elements are allowed
			p.i++
			p.skipSpace()
		}
		if p.i >= len(p.s) {
			return out, nil
		}
		scheme := p.token()
		if scheme == "" {
			return nil, fmt.Errorf("at %d: want an auth scheme, have %q", p.i, p.s[p.i:])
		}
		c := Challenge{Scheme: scheme, Params: map[string]string{}}
		if err := p.params(&c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
}

// token68 reads RFC 7235's token68 (a challenge's only value, e.g.
// Negotiate's) if one stands at the cursor, followed by a comma or the end.
func (p *authParser) token68() (string, bool) {
	start := p.i
	j := p.i
	for j < len(p.s) && (isTokenChar(p.s[j]) && strings.IndexByte("!#$%&'*^`|", p.s[j]) < 0 || p.s[j] == '/') {
		j++
	}
	if j == start {
		return "", false
	}
	for j < len(p.s) && p.s[j] == '=' {
		j++
	}
	k := j
	for k < len(p.s) && (p.s[k] == ' ' || p.s[k] == '\t') {
		k++
	}
	if k < len(p.s) && p.s[k] != ',' {
		return "", false
	}
	if j < len(p.s) && p.s[j] != ',' && p.s[j] != ' ' && p.s[j] != '\t' {
		return "", false
	}
	// The caller takes it only with '=' padding: a bare token before a
	// comma is as likely the next challenge's scheme.
	p.i = k
	return p.s[start:j], true
}

// params reads a challenge's parameters up to the next challenge (a
// token not followed by '=') or the end.
func (p *authParser) params(c *Challenge) error {
	p.skipSpace()
	save := p.i
	if t, ok := p.token68(); ok && strings.Contains(t, "=") {
		c.Params[""] = t
		return nil
	}
	p.i = save
	for {
		p.skipSpace()
		if p.i >= len(p.s) {
			return nil
		}
		if p.s[p.i] == ',' {
			p.i++
			continue
		}
		save := p.i
		name := p.token()
		if name == "" {
			return fmt.Errorf("at %d: want a parameter, have %q", p.i, p.s[p.i:])
		}
		p.skipSpace()
		if p.i >= len(p.s) || p.s[p.i] != '=' {
			p.i = save // the next challenge's scheme
			return nil
		}
		p.i++
		p.skipSpace()
		if p.i >= len(p.s) {
			return fmt.Errorf("parameter %s has no value", name)
		}
		var val string
		if p.s[p.i] == '"' {
			v, err := p.quoted()
			if err != nil {
				return fmt.Errorf("parameter %s: %w", name, err)
			}
			val = v
		} else {
			val = p.token()
			if val == "" {
				return fmt.Errorf("parameter %s: at %d: want a token or quoted string, have %q", name, p.i, p.s[p.i:])
			}
		}
		c.Params[strings.ToLower(name)] = val
	}
}

// digestAlgorithms are RFC 7616's algorithms, best first.
var digestAlgorithms = []struct {
	name string
	new  func() hash.Hash
}{
	{"SHA-512-256", sha512.New512_256},
	{"SHA-256", sha256.New},
	{"MD5", md5.New},
}

// hashFor returns the hash of an algorithm name (its -sess form too) and
// whether it is a session variant.
func hashFor(alg string) (func() hash.Hash, bool, bool) {
	if alg == "" {
		alg = "MD5" // RFC 7616 3.3: absent means MD5
	}
	sess := strings.HasSuffix(strings.ToUpper(alg), "-SESS")
	base := strings.TrimSuffix(strings.ToUpper(alg), "-SESS")
	for _, a := range digestAlgorithms {
		if a.name == base {
			return a.new, sess, true
		}
	}
	return nil, false, false
}

// DigestParams are the inputs of an RFC 7616 response.
type DigestParams struct {
	Algorithm, Username, Realm, Password, Nonce, CNonce, NC, QOP, Method, URI string
}

// DigestResponse computes the request-digest ("response") of RFC 7616
// section 3.4.1 for qop auth, or RFC 2069's form when QOP is empty. It is
// exported for test servers that check what a client sent.
func DigestResponse(p DigestParams) (string, error) {
	newHash, sess, ok := hashFor(p.Algorithm)
	if !ok {
		return "", fmt.Errorf("digest algorithm %q: %w", p.Algorithm, ErrUnsupportedAuth)
	}
	h := func(parts ...string) string {
		d := newHash()
		io.WriteString(d, strings.Join(parts, ":"))
		return hex.EncodeToString(d.Sum(nil))
	}
	ha1 := h(p.Username, p.Realm, p.Password)
	if sess {
		ha1 = h(ha1, p.Nonce, p.CNonce)
	}
	ha2 := h(p.Method, p.URI)
	if p.QOP == "" {
		return h(ha1, p.Nonce, ha2), nil
	}
	return h(ha1, p.Nonce, p.NC, p.CNonce, p.QOP, ha2), nil
}

// ErrUnsupportedAuth is returned (wrapped) when the server offers no
// authentication this client speaks.
var ErrUnsupportedAuth = errors.New("unsupported authentication")

// ErrUnauthorized is returned (wrapped) when the server refuses the
// credentials themselves: a 401 to a fresh challenge's answer.
var ErrUnauthorized = errors.New("the server refused the username or password")

// DigestTransport is an http.RoundTripper that answers HTTP Digest
// challenges (RFC 7616: MD5, SHA-256, SHA-512-256 and their -sess forms,
// qop auth or none). It keeps the last challenge and reuses its nonce for
// later requests with a rising nonce count, so a session costs one
// challenge, and takes a new one when the server says the nonce is stale.
// Requests must have a body that can be read again (GetBody), as
// http.NewRequest makes for bytes readers.
type DigestTransport struct {
	Username, Password string
	// Base sends the requests. If nil, uses http.DefaultTransport.
	Base http.RoundTripper

	mu sync.Mutex
	ch *digestState
}

// digestState is the challenge in use and its nonce count.
type digestState struct {
	alg, realm, nonce, opaque, qop string
	userhash                       bool
	nc                             uint32
}

func (t *DigestTransport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

// RoundTrip implements http.RoundTripper.
func (t *DigestTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	fresh := false // whether the Authorization sent answers a challenge just received
	auth, err := t.authorization(req)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		r, err := cloneWithBody(req)
		if err != nil {
			return nil, err
		}
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		resp, err := t.base().RoundTrip(r)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			return resp, err
		}
		chs, perr := ParseChallenges(resp.Header.Values("WWW-Authenticate"))
		if perr != nil {
			drain(resp)
			return nil, perr
		}
		st, cerr := pickDigest(chs)
		if cerr != nil {
			drain(resp)
			return nil, cerr
		}
		stale := strings.EqualFold(st.stale, "true")
		// A 401 to the answer of a fresh challenge that does not call the
		// nonce stale refuses the credentials; so does a second retry.
		if (fresh && !stale) || attempt >= 2 {
			return resp, nil
		}
		drain(resp)
		t.mu.Lock()
		t.ch = &st.digestState
		t.mu.Unlock()
		if auth, err = t.authorization(req); err != nil {
			return nil, err
		}
		fresh = true
	}
}

// authorization is the header for req from the kept challenge, or "" when
// there is none yet.
func (t *DigestTransport) authorization(req *http.Request) (string, error) {
	t.mu.Lock()
	ch := t.ch
	var nc uint32
	if ch != nil {
		ch.nc++
		nc = ch.nc
	}
	t.mu.Unlock()
	if ch == nil {
		return "", nil
	}
	var cb [16]byte
	if _, err := rand.Read(cb[:]); err != nil {
		return "", err
	}
	cnonce := hex.EncodeToString(cb[:])
	uri := req.URL.RequestURI()
	p := DigestParams{Algorithm: ch.alg, Username: t.Username, Realm: ch.realm, Password: t.Password,
		Nonce: ch.nonce, CNonce: cnonce, NC: fmt.Sprintf("%08x", nc), QOP: ch.qop, Method: req.Method, URI: uri}
	resp, err := DigestResponse(p)
	if err != nil {
		return "", err
	}
	user := t.Username
	if ch.userhash {
		newHash, _, _ := hashFor(ch.alg)
		d := newHash()
		io.WriteString(d, t.Username+":"+ch.realm)
		user = hex.EncodeToString(d.Sum(nil))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `Digest username=%s, realm=%s, nonce=%s, uri=%s, response="%s"`,
		quote(user), quote(ch.realm), quote(ch.nonce), quote(uri), resp)
	if ch.alg != "" {
		fmt.Fprintf(&b, ", algorithm=%s", ch.alg)
	}
	if ch.qop != "" {
		fmt.Fprintf(&b, `, qop=%s, nc=%s, cnonce="%s"`, ch.qop, p.NC, cnonce)
	}
	if ch.opaque != "" {
		fmt.Fprintf(&b, ", opaque=%s", quote(ch.opaque))
	}
	if ch.userhash {
		b.WriteString(", userhash=true")
	}
	return b.String(), nil
}

// quote makes a quoted-string.
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// pickedDigest is a Digest challenge chosen from a 401.
type pickedDigest struct {
	digestState
	stale string
}

// pickDigest chooses the Digest challenge with the best algorithm this
// client speaks and qop auth (or none).
func pickDigest(chs []Challenge) (pickedDigest, error) {
	var best *pickedDigest
	rank := len(digestAlgorithms)
	var offered []string
	for _, c := range chs {
		offered = append(offered, c.Scheme)
		if !strings.EqualFold(c.Scheme, "Digest") {
			continue
		}
		alg := c.Params["algorithm"]
		_, _, ok := hashFor(alg)
		if !ok {
			continue
		}
		qop := ""
		if q := c.Params["qop"]; q != "" {
			for _, o := range strings.Split(q, ",") {
				if strings.EqualFold(strings.TrimSpace(o), "auth") {
					qop = "auth"
				}
			}
			if qop == "" {
				continue // auth-int only: the body would have to be hashed
			}
		}
		if c.Params["nonce"] == "" {
			continue
		}
		base := strings.TrimSuffix(strings.ToUpper(alg), "-SESS")
		if base == "" {
			base = "MD5"
		}
		r := 0
		for i, a := range digestAlgorithms {
			if a.name == base {
				r = i
			}
		}
		if best != nil && r >= rank {
			continue
		}
		rank = r
		best = &pickedDigest{digestState: digestState{alg: alg, realm: c.Params["realm"], nonce: c.Params["nonce"],
			opaque: c.Params["opaque"], qop: qop, userhash: strings.EqualFold(c.Params["userhash"], "true")}, stale: c.Params["stale"]}
	}
	if best == nil {
		return pickedDigest{}, fmt.Errorf("the server offers %v: %w (Anvil speaks HTTP Digest with MD5, SHA-256 or SHA-512-256, qop auth)", offered, ErrUnsupportedAuth)
	}
	return *best, nil
}

// cloneWithBody copies req with a fresh body for one attempt.
func cloneWithBody(req *http.Request) (*http.Request, error) {
	r := req.Clone(req.Context())
	if req.Body == nil || req.Body == http.NoBody {
		return r, nil
	}
	if req.GetBody == nil {
		return nil, errors.New("digest auth: the request's body cannot be sent twice")
	}
	b, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	r.Body = b
	return r, nil
}

// drain reads a little of a response we do not return and closes it, so
// the connection can carry the retry.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}
