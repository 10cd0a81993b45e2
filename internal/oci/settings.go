package oci

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

// Settings say how images are reached: which registry is served by a
// mirror, which registries speak plain HTTP, which certificates a registry
// presents, and the credentials each asks for. The server has one set (its
// flags) and each Hardware may add its own (an annotation); Merge combines
// them and Resolve applies them to one image.
//
// Every map is keyed by a registry host as an image reference names it
// ("quay.io", "10.0.0.2:5000"); "docker.io" and "index.docker.io" are the
// same registry. The JSON form is the annotation's.
type Settings struct {
	// Mirrors maps a registry to the mirror that serves its images in its
	// place: "http://10.0.0.2:5000" (plain HTTP), "https://mirror.lab", or
	// with a path that prefixes every repository ("https://mirror.lab/quay":
	// quay.io/tinkerbell/actions/cexec is pulled as
	// mirror.lab/quay/tinkerbell/actions/cexec). A mirror replaces the
	// registry: the registry itself is not asked when the mirror fails.
	Mirrors map[string]string `json:"mirrors,omitempty"`
	// PlainHTTP lists registries reached over plain HTTP (when HTTPS
	// fails: go-containerregistry tries HTTPS first). A mirror given as an
	// http:// URL needs no entry.
	PlainHTTP []string `json:"plainHTTP,omitempty"`
	// CAs maps a registry to PEM certificates trusted for its TLS
	// certificate, besides the system's.
	CAs map[string]string `json:"ca,omitempty"`
	// Auths maps a registry to its credentials, in the form of docker's
	// config.json: username and password (or auth, base64 of
	// "username:password") for basic auth and the registry token service,
	// identitytoken for an OAuth2 refresh token, registrytoken for a bearer
	// token sent as it is. A registry with none is pulled anonymously.
	Auths map[string]authn.AuthConfig `json:"auths,omitempty"`
}

// registryKey is the canonical form of a registry host in Settings, or an
// error naming what is wrong with it.
func registryKey(host string) (string, error) {
	h := strings.TrimSpace(host)
	if h == "" {
		return "", errors.New("empty registry host")
	}
	if strings.Contains(h, "/") {
		return "", fmt.Errorf("registry %q: want a host[:port], not a URL or repository", host)
	}
	// A registry is a DNS name or an IP literal, with a port: ASCII
	// letters, digits and . - : [ ] only. name.NewRegistry lets other
	// bytes through (a mirror URL's %80 unescapes to one), and such a
	// key would not survive being written out as JSON.
	if i := strings.IndexFunc(h, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-:[]", r))
	}); i >= 0 {
		return "", fmt.Errorf("registry %q: %q is not allowed in a host name", host, h[i:i+1])
	}
	r, err := name.NewRegistry(h, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("registry %q: %w", host, err)
	}
	return r.RegistryStr(), nil
}

// parseMirror checks a mirror URL: http or https, a host, no query.
func parseMirror(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return nil, fmt.Errorf("mirror %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("mirror %q: want an http:// or https:// URL", raw)
	}
	if u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("mirror %q: want scheme://host[:port][/path], nothing else", raw)
	}
	if _, err := registryKey(u.Host); err != nil {
		return nil, fmt.Errorf("mirror %q: %w", raw, err)
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		if _, err := name.NewRepository(u.Host+"/"+p, name.StrictValidation); err != nil {
			return nil, fmt.Errorf("mirror %q: its path is not a repository prefix: %w", raw, err)
		}
	}
	return u, nil
}

// Normalize returns s with every registry key in canonical form, each
// value checked: mirror URLs, PEM certificates. Two keys naming the same
// registry ("docker.io", "index.docker.io") are an error.
func (s Settings) Normalize() (Settings, error) {
	var out Settings
	keys := func(what string, in []string) (map[string]string, error) {
		m := map[string]string{}
		for _, k := range in {
			c, err := registryKey(k)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			if prev, ok := m[c]; ok {
				return nil, fmt.Errorf("%s: %q and %q are the same registry", what, prev, k)
			}
			m[c] = k
		}
		return m, nil
	}
	if len(s.Mirrors) > 0 {
		ks, err := keys("mirrors", slices.Sorted(maps.Keys(s.Mirrors)))
		if err != nil {
			return Settings{}, err
		}
		out.Mirrors = map[string]string{}
		for c, k := range ks {
			u, err := parseMirror(s.Mirrors[k])
			if err != nil {
				return Settings{}, fmt.Errorf("mirrors[%s]: %w", k, err)
			}
			out.Mirrors[c] = u.Scheme + "://" + u.Host + strings.TrimRight(u.Path, "/")
		}
	}
	if len(s.PlainHTTP) > 0 {
		ks, err := keys("plainHTTP", s.PlainHTTP)
		if err != nil {
			return Settings{}, err
		}
		out.PlainHTTP = slices.Sorted(maps.Keys(ks))
	}
	if len(s.CAs) > 0 {
		ks, err := keys("ca", slices.Sorted(maps.Keys(s.CAs)))
		if err != nil {
			return Settings{}, err
		}
		out.CAs = map[string]string{}
		for c, k := range ks {
			if err := checkPEM(s.CAs[k]); err != nil {
				return Settings{}, fmt.Errorf("ca[%s]: %w", k, err)
			}
			out.CAs[c] = s.CAs[k]
		}
	}
	if len(s.Auths) > 0 {
		ks, err := keys("auths", slices.Sorted(maps.Keys(s.Auths)))
		if err != nil {
			return Settings{}, err
		}
		out.Auths = map[string]authn.AuthConfig{}
		for c, k := range ks {
			a := s.Auths[k]
			if a.Auth != "" && a.Username == "" {
				// Decoded when read from JSON; set in Go, decode it the
				// same way (authn's UnmarshalJSON) by a round trip.
				b, _ := json.Marshal(a)
				if err := json.Unmarshal(b, &a); err != nil {
					return Settings{}, fmt.Errorf("auths[%s]: %w", k, err)
				}
			}
			a.Auth = ""
			out.Auths[c] = a
		}
	}
	return out, nil
}

// checkPEM reports whether pemText holds at least one certificate and
// nothing else that fails to parse.
func checkPEM(pemText string) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(pemText)) {
		return errors.New("no PEM certificate in it")
	}
	return nil
}

// Merge returns s with over's settings on top: for each registry, over's
// mirror, certificates and credentials replace s's; PlainHTTP is the union.
// Both must be normalized.
func (s Settings) Merge(over Settings) Settings {
	out := Settings{
		Mirrors: mergeMap(s.Mirrors, over.Mirrors),
		CAs:     mergeMap(s.CAs, over.CAs),
		Auths:   mergeMap(s.Auths, over.Auths),
	}
	for _, h := range append(slices.Clone(s.PlainHTTP), over.PlainHTTP...) {
		if !slices.Contains(out.PlainHTTP, h) {
			out.PlainHTTP = append(out.PlainHTTP, h)
		}
	}
	slices.Sort(out.PlainHTTP)
	return out
}

func mergeMap[V any](a, b map[string]V) map[string]V {
	if len(a)+len(b) == 0 {
		return nil
	}
	out := maps.Clone(a)
	if out == nil {
		out = map[string]V{}
	}
	maps.Copy(out, b)
	return out
}

// IsZero reports whether s says nothing.
func (s Settings) IsZero() bool {
	return len(s.Mirrors)+len(s.PlainHTTP)+len(s.CAs)+len(s.Auths) == 0
}

// ParseSettings reads Settings from their JSON form (the Hardware
// annotation), refusing unknown fields, and normalizes them.
func ParseSettings(data []byte) (Settings, error) {
	var s Settings
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Settings{}, fmt.Errorf("registry settings: %w", err)
	}
	if dec.More() {
		return Settings{}, errors.New("registry settings: more than one JSON value")
	}
	n, err := s.Normalize()
	if err != nil {
		return Settings{}, fmt.Errorf("registry settings: %w", err)
	}
	return n, nil
}

// ParseDockerConfig reads the credentials of a docker config.json (what
// `docker login` writes, and a Kubernetes dockerconfigjson secret holds):
// its "auths" section. Keys may be hosts or URLs
// ("https://index.docker.io/v1/"). Other sections (credsStore, credHelpers)
// are not supported: the boot environment has no credential helpers.
func ParseDockerConfig(data []byte) (map[string]authn.AuthConfig, error) {
	var cfg struct {
		Auths map[string]authn.AuthConfig `json:"auths"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("docker config: %w", err)
	}
	out := map[string]authn.AuthConfig{}
	for k, a := range cfg.Auths {
		host := k
		if u, err := url.Parse(k); err == nil && u.Host != "" {
			host = u.Host
		}
		c, err := registryKey(host)
		if err != nil {
			return nil, fmt.Errorf("docker config: auths[%s]: %w", k, err)
		}
		a.Auth = ""
		out[c] = a
	}
	return out, nil
}

// ParseMirror reads a mirror flag, REGISTRY=URL
// ("quay.io=http://10.0.0.2:5000"), into the registry's key and the
// mirror's URL, both checked.
func ParseMirror(flag string) (registry, mirror string, err error) {
	reg, raw, ok := strings.Cut(flag, "=")
	if !ok {
		return "", "", fmt.Errorf("registry mirror %q: want REGISTRY=URL, e.g. quay.io=http://10.0.0.2:5000", flag)
	}
	key, err := registryKey(reg)
	if err != nil {
		return "", "", fmt.Errorf("registry mirror %q: %w", flag, err)
	}
	u, err := parseMirror(raw)
	if err != nil {
		return "", "", fmt.Errorf("registry mirror %q: %w", flag, err)
	}
	return key, u.Scheme + "://" + u.Host + strings.TrimRight(u.Path, "/"), nil
}

// Source is how one image is pulled, as Resolve decided from Settings:
// the reference to pull (the mirror's, when one serves the image's
// registry) and what that registry needs. It holds credentials: its String
// and LogValue leave them out, and it must not be logged any other way.
type Source struct {
	// Image is the reference as the action names it.
	Image string
	// Ref is what is pulled: Image with the mirror applied, fully
	// qualified ("10.0.0.2:5000/tinkerbell/actions/cexec:v1.0.0").
	Ref string
	// Mirror is the mirror that serves Image's registry, "" when none.
	Mirror string
	// PlainHTTP allows plain HTTP to Ref's registry.
	PlainHTTP bool
	// CA holds PEM certificates trusted for Ref's registry.
	CA string
	// Auth holds the credentials for Ref's registry; zero: anonymous.
	Auth authn.AuthConfig
}

// String describes s without its credentials: the image, the mirror and
// what is configured for the registry.
func (s Source) String() string {
	var b strings.Builder
	b.WriteString(s.Image)
	if s.Mirror != "" {
		fmt.Fprintf(&b, " from mirror %s (%s)", s.Mirror, s.Ref)
	}
	var notes []string
	if s.PlainHTTP {
		notes = append(notes, "plain HTTP")
	}
	if s.CA != "" {
		notes = append(notes, "own CA")
	}
	if k := s.AuthKind(); k != "" {
		notes = append(notes, k)
	}
	if len(notes) > 0 {
		fmt.Fprintf(&b, " [%s]", strings.Join(notes, ", "))
	}
	return b.String()
}

// LogValue logs s as String does: never its credentials.
func (s Source) LogValue() slog.Value { return slog.StringValue(s.String()) }

// AuthKind names the kind of credentials s carries ("basic auth",
// "identity token", "registry token"), or "" for none.
func (s Source) AuthKind() string {
	switch {
	case s.Auth.RegistryToken != "":
		return "registry token"
	case s.Auth.IdentityToken != "":
		return "identity token"
	case s.Auth.Username != "" || s.Auth.Password != "" || s.Auth.Auth != "":
		return "basic auth"
	}
	return ""
}

// Resolve decides how image is pulled under s (normalized): the mirror of
// its registry, if any, rewrites the reference; plain HTTP, certificates
// and credentials are those of the registry actually asked (the mirror's
// when there is one), and only that registry's. A bare name is Docker
// Hub's ("alpine" is index.docker.io/library/alpine:latest).
func (s Settings) Resolve(image string) (Source, error) {
	ref, err := name.ParseReference(strings.TrimSpace(image))
	if err != nil {
		return Source{}, fmt.Errorf("image %q is not a valid reference: %w", image, err)
	}
	src := Source{Image: image}
	host, repo := ref.Context().RegistryStr(), ref.Context().RepositoryStr()
	if m, ok := s.Mirrors[host]; ok {
		u, err := parseMirror(m)
		if err != nil {
			return Source{}, err
		}
		src.Mirror, host = m, u.Host
		if p := strings.Trim(u.Path, "/"); p != "" {
			repo = p + "/" + repo
		}
		src.PlainHTTP = u.Scheme == "http"
	}
	sep := ":"
	if _, ok := ref.(name.Digest); ok {
		sep = "@"
	}
	src.Ref = host + "/" + repo + sep + ref.Identifier()
	if _, err := name.ParseReference(src.Ref); err != nil {
		return Source{}, fmt.Errorf("image %q through mirror %s: %q is not a valid reference: %w", image, src.Mirror, src.Ref, err)
	}
	key, err := registryKey(host)
	if err != nil {
		return Source{}, err
	}
	src.PlainHTTP = src.PlainHTTP || slices.Contains(s.PlainHTTP, key)
	src.CA = s.CAs[key]
	src.Auth = s.Auths[key]
	return src, nil
}
