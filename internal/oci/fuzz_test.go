package oci

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
)

// FuzzParseSettings: accepted settings print (as JSON) to settings that
// parse to the same thing: the annotation round-trips.
func FuzzParseSettings(f *testing.F) {
	for _, s := range []string{
		`{"mirrors":{"quay.io":"http://10.0.0.2:5000","docker.io":"https://m.lab/hub/"}}`,
		`{"plainHTTP":["r.lab:5000","R.LAB:5000"],"auths":{"r.lab:5000":{"auth":"dTpw"},"q.io":{"registrytoken":"t"}}}`,
		`{"ca":{"x":"-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n"}}`,
		`{"mirrors":{"a":"http://[::1]:5000/p"}}`, `{}`, `null`, `{"mirrors":{"":""}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSettings(data)
		if err != nil {
			return
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("Marshal(%+v): %v", s, err)
		}
		again, err := ParseSettings(b)
		if err != nil {
			t.Fatalf("ParseSettings(%s) accepted; its JSON %s is refused: %v", data, b, err)
		}
		if !reflect.DeepEqual(s, again) {
			t.Fatalf("round trip of %s: %+v, then %+v", data, s, again)
		}
	})
}

// FuzzResolve: a resolved source is a valid reference that keeps the
// image's repository and tag or digest; without a mirror it is on the
// image's own registry, and credentials are only ever the asked
// registry's.
func FuzzResolve(f *testing.F) {
	f.Add("quay.io/tinkerbell/actions/cexec:v1.0.0", "quay.io", "http://10.0.0.2:5000/p")
	f.Add("alpine", "docker.io", "https://m.lab")
	f.Add("r.lab:5000/a/b@sha256:0000000000000000000000000000000000000000000000000000000000000001", "r.lab:5000", "http://x")
	f.Add("image2disk", "", "")
	f.Fuzz(func(t *testing.T, image, registry, mirror string) {
		var s Settings
		if registry != "" {
			s.Mirrors = map[string]string{registry: mirror}
		}
		n, err := s.Normalize()
		if err != nil {
			return
		}
		src, err := n.Resolve(image)
		if err != nil {
			return
		}
		got, err := name.ParseReference(src.Ref)
		if err != nil {
			t.Fatalf("Resolve(%q).Ref = %q: not a reference: %v", image, src.Ref, err)
		}
		// Resolve trims surrounding space (a YAML value's), as the
		// agent's puller does; anything else must parse as it is.
		orig, err := name.ParseReference(strings.TrimSpace(image))
		if err != nil {
			t.Fatalf("Resolve accepted %q, which does not parse: %v", image, err)
		}
		if got.Identifier() != orig.Identifier() || !strings.HasSuffix(got.Context().RepositoryStr(), orig.Context().RepositoryStr()) {
			t.Fatalf("Resolve(%q).Ref = %q: lost the repository or tag", image, src.Ref)
		}
		if src.Mirror == "" && got.Context().RegistryStr() != orig.Context().RegistryStr() {
			t.Fatalf("Resolve(%q).Ref = %q: another registry without a mirror", image, src.Ref)
		}
	})
}

// FuzzParseSize: an accepted size is positive and prints (FormatSize) to
// a string that parses to the same size.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"512M", "2GiB", "1073741824", "1k", " 3 G ", "0", "-1M", "8T", "9223372036854775807", "8589934592G", "M", "1.5G"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		if n <= 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
		if again, err := ParseSize(FormatSize(n)); err != nil || again != n {
			t.Fatalf("ParseSize(%q) = %d; FormatSize gives %q, which parses to %d, %v", s, n, FormatSize(n), again, err)
		}
	})
}
