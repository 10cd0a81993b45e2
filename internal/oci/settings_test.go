package oci

import (
	"encoding/json"
	"encoding/pem"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
)

// testCA is a real certificate, so that Normalize's PEM check has one to
// accept.
var testCA = func() string {
	srv := httptest.NewTLSServer(nil)
	defer srv.Close()
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
}()

func TestResolve(t *testing.T) {
	s, err := Settings{
		Mirrors: map[string]string{
			"quay.io":   "http://10.0.0.2:5000",
			"docker.io": "https://mirror.lab/hub/",
		},
		PlainHTTP: []string{"registry.lab:5000"},
		CAs:       map[string]string{"mirror.lab": testCA, "quay.io": testCA},
		Auths: map[string]authn.AuthConfig{
			"10.0.0.2:5000":     {Username: "mirror-user", Password: "mirror-pw"},
			"quay.io":           {Username: "quay-user", Password: "quay-pw"},
			"registry.lab:5000": {RegistryToken: "tok"},
		},
	}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	const digest = "sha256:0000000000000000000000000000000000000000000000000000000000000001"
	tests := []struct {
		name, image string
		want        Source
	}{
		{name: "mirrored, plain HTTP by the mirror's scheme; the mirror's credentials, not quay.io's",
			image: "quay.io/tinkerbell/actions/writefile:v1.0.0",
			want: Source{Ref: "10.0.0.2:5000/tinkerbell/actions/writefile:v1.0.0", Mirror: "http://10.0.0.2:5000", PlainHTTP: true,
				Auth: authn.AuthConfig{Username: "mirror-user", Password: "mirror-pw"}}},
		{name: "pinned digest keeps its digest through the mirror",
			image: "quay.io/tinkerbell/actions/cexec@" + digest,
			want: Source{Ref: "10.0.0.2:5000/tinkerbell/actions/cexec@" + digest, Mirror: "http://10.0.0.2:5000", PlainHTTP: true,
				Auth: authn.AuthConfig{Username: "mirror-user", Password: "mirror-pw"}}},
		{name: "Docker Hub short name through a mirror with a path prefix and its CA",
			image: "alpine",
			want:  Source{Ref: "mirror.lab/hub/library/alpine:latest", Mirror: "https://mirror.lab/hub", CA: testCA}},
		{name: "docker.io spelled out is the same registry",
			image: "docker.io/library/busybox:1.36",
			want:  Source{Ref: "mirror.lab/hub/library/busybox:1.36", Mirror: "https://mirror.lab/hub", CA: testCA}},
		{name: "unmirrored registry with plain HTTP and a bearer token",
			image: "registry.lab:5000/team/tool:1",
			want:  Source{Ref: "registry.lab:5000/team/tool:1", PlainHTTP: true, Auth: authn.AuthConfig{RegistryToken: "tok"}}},
		{name: "nothing configured: anonymous HTTPS",
			image: "ghcr.io/jacobweinstock/waitdaemon:latest",
			want:  Source{Ref: "ghcr.io/jacobweinstock/waitdaemon:latest"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Resolve(tc.image)
			if err != nil {
				t.Fatal(err)
			}
			tc.want.Image = tc.image
			if got != tc.want {
				t.Errorf("Resolve(%q) =\n  %+v\nwant\n  %+v", tc.image, got, tc.want)
			}
		})
	}
	if _, err := s.Resolve("Quay.io/UPPER/case"); err == nil || !strings.Contains(err.Error(), "not a valid reference") {
		t.Errorf("Resolve of an invalid reference = %v; want an error naming it", err)
	}
}

// TestSourceNeverShowsCredentials: what may be logged of a Source names
// the kind of credentials, never their values.
func TestSourceNeverShowsCredentials(t *testing.T) {
	for _, a := range []authn.AuthConfig{
		{Username: "u", Password: "s3cret-pw"}, {IdentityToken: "s3cret-id"}, {RegistryToken: "s3cret-tok"},
	} {
		src := Source{Image: "quay.io/x/y:1", Ref: "m:5000/x/y:1", Mirror: "http://m:5000", Auth: a}
		for _, text := range []string{src.String(), src.LogValue().String()} {
			if strings.Contains(text, "s3cret") {
				t.Errorf("%q shows a credential", text)
			}
			if !strings.Contains(text, src.AuthKind()) || !strings.Contains(text, "quay.io/x/y:1") || !strings.Contains(text, "http://m:5000") {
				t.Errorf("%q does not name the image, the mirror and the kind of credentials (%s)", text, src.AuthKind())
			}
		}
	}
}

func TestMerge(t *testing.T) {
	server, err := Settings{
		Mirrors:   map[string]string{"quay.io": "http://10.0.0.2:5000", "ghcr.io": "http://10.0.0.2:5001"},
		PlainHTTP: []string{"a.lab:5000"},
		Auths:     map[string]authn.AuthConfig{"10.0.0.2:5000": {Username: "server", Password: "x"}},
	}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	hw, err := ParseSettings([]byte(`{"mirrors":{"quay.io":"https://rack7.lab"},"plainHTTP":["b.lab:5000"],
		"auths":{"rack7.lab":{"auth":"cmFjazpwdw=="}}}`))
	if err != nil {
		t.Fatal(err)
	}
	m := server.Merge(hw)
	src, err := m.Resolve("quay.io/tinkerbell/actions/cexec:v1")
	if err != nil {
		t.Fatal(err)
	}
	want := Source{Image: "quay.io/tinkerbell/actions/cexec:v1", Ref: "rack7.lab/tinkerbell/actions/cexec:v1", Mirror: "https://rack7.lab",
		Auth: authn.AuthConfig{Username: "rack", Password: "pw"}}
	if src != want {
		t.Errorf("the Hardware's mirror does not win: %+v; want %+v", src, want)
	}
	if src, _ := m.Resolve("ghcr.io/x/y:1"); src.Mirror != "http://10.0.0.2:5001" {
		t.Errorf("the server's other mirror was lost: %+v", src)
	}
	if got := strings.Join(m.PlainHTTP, ","); got != "a.lab:5000,b.lab:5000" {
		t.Errorf("PlainHTTP = %s; want the union", got)
	}
}

func TestSettingsErrors(t *testing.T) {
	tests := []struct{ json, want string }{
		{`{"mirors":{}}`, `unknown field "mirors"`},
		{`{"mirrors":{"quay.io":"ftp://x"}}`, `want an http:// or https:// URL`},
		{`{"mirrors":{"quay.io":"http://x/a?b"}}`, `want scheme://host[:port][/path], nothing else`},
		{`{"mirrors":{"https://quay.io":"http://x"}}`, `want a host[:port], not a URL`},
		{`{"mirrors":{"docker.io":"http://x","index.docker.io":"http://y"}}`, `are the same registry`},
		{`{"ca":{"quay.io":"not a certificate"}}`, `ca[quay.io]: no PEM certificate in it`},
		{`{"auths":{"quay.io":{"auth":"bm9jb2xvbg=="}}}`, `base64(username:password)`},
		{`{} {}`, `more than one JSON value`},
	}
	for _, tc := range tests {
		if _, err := ParseSettings([]byte(tc.json)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSettings(%s) = %v; want an error containing %q", tc.json, err, tc.want)
		}
	}
}

func TestParseMirror(t *testing.T) {
	reg, m, err := ParseMirror("docker.io=http://10.0.0.2:5000/hub/")
	if err != nil || reg != "index.docker.io" || m != "http://10.0.0.2:5000/hub" {
		t.Errorf("ParseMirror = %q, %q, %v", reg, m, err)
	}
	for _, bad := range []string{"quay.io", "=http://x", "quay.io=x:5000"} {
		if _, _, err := ParseMirror(bad); err == nil || !strings.Contains(err.Error(), "registry mirror") {
			t.Errorf("ParseMirror(%q) = %v; want an error naming the flag", bad, err)
		}
	}
}

func TestParseDockerConfig(t *testing.T) {
	auths, err := ParseDockerConfig([]byte(`{"auths":{"https://index.docker.io/v1/":{"auth":"dTpw"},
		"quay.io":{"username":"robot","password":"pw"},"ghcr.io":{"registrytoken":"t"}},"credsStore":"desktop"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]authn.AuthConfig{
		"index.docker.io": {Username: "u", Password: "p"},
		"quay.io":         {Username: "robot", Password: "pw"},
		"ghcr.io":         {RegistryToken: "t"},
	}
	got, _ := json.Marshal(auths)
	w, _ := json.Marshal(want)
	if string(got) != string(w) {
		t.Errorf("ParseDockerConfig = %s; want %s", got, w)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"512M": 512 << 20, "2GiB": 2 << 30, "1073741824": 1 << 30, "64k": 64 << 10, "3 g": 3 << 30, "10B": 10} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "-1M", "1.5G", "M", "10 PB", "99999999999T"} {
		if _, err := ParseSize(bad); err == nil || !strings.Contains(err.Error(), "want a positive whole number") {
			t.Errorf("ParseSize(%q) = %v; want an error", bad, err)
		}
	}
}
