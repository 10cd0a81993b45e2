package server

import (
	"encoding/pem"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRegistrySettings(t *testing.T) {
	dir := t.TempDir()
	srv := httptest.NewTLSServer(nil)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	srv.Close()
	caFile, authFile, badAuth := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "config.json"), filepath.Join(dir, "bad.json")
	os.WriteFile(caFile, ca, 0o600)
	os.WriteFile(authFile, []byte(`{"auths":{"10.0.0.2:5000":{"auth":"dTpw"}}}`), 0o600)
	os.WriteFile(badAuth, []byte(`{"auths":`), 0o600)

	s, err := registrySettings(Config{
		RegistryMirrors:   []string{"quay.io=http://10.0.0.2:5000", "docker.io=https://mirror.lab/hub/"},
		RegistryPlainHTTP: []string{"registry.lab:5000"},
		RegistryCAs:       []string{"mirror.lab=" + caFile},
		RegistryAuthFile:  authFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	src, err := s.Resolve("quay.io/tinkerbell/actions/cexec:v1.0.0")
	if err != nil || src.Ref != "10.0.0.2:5000/tinkerbell/actions/cexec:v1.0.0" || !src.PlainHTTP || src.Auth.Username != "u" || src.Auth.Password != "p" {
		t.Errorf("quay.io image: %+v, %v", src, err)
	}
	if src, _ := s.Resolve("alpine"); src.Ref != "mirror.lab/hub/library/alpine:latest" || src.CA != string(ca) || src.AuthKind() != "" {
		t.Errorf("Docker Hub image: %+v", src)
	}

	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{RegistryMirrors: []string{"quay.io"}}, "--registry-mirror: registry mirror \"quay.io\": want REGISTRY=URL"},
		{Config{RegistryMirrors: []string{"quay.io=http://a", "quay.io=http://b"}}, "quay.io has two mirrors"},
		{Config{RegistryCAs: []string{"x=" + filepath.Join(dir, "missing.pem")}}, "--registry-ca x="},
		{Config{RegistryCAs: []string{"x=" + authFile}}, "ca[x]: no PEM certificate"},
		{Config{RegistryAuthFile: badAuth}, "--registry-auth-file " + badAuth},
		{Config{RegistryPlainHTTP: []string{"http://x"}}, "plainHTTP: registry \"http://x\""},
	} {
		if _, err := registrySettings(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("registrySettings(%+v) = %v; want an error containing %q", tc.cfg, err, tc.want)
		}
	}
}
