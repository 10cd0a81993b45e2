package server

import (
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/anvilproj/anvil/internal/oci"
)

// registrySettings builds the server's registry settings from its flags:
// mirrors (REGISTRY=URL), plain-HTTP registries, CA files (REGISTRY=FILE)
// and a docker config.json of credentials, each checked (docs/actions.md).
func registrySettings(cfg Config) (oci.Settings, error) {
	var s oci.Settings
	for _, m := range cfg.RegistryMirrors {
		reg, url, err := oci.ParseMirror(m)
		if err != nil {
			return oci.Settings{}, fmt.Errorf("--registry-mirror: %w", err)
		}
		if s.Mirrors == nil {
			s.Mirrors = map[string]string{}
		}
		if prev, ok := s.Mirrors[reg]; ok {
			return oci.Settings{}, fmt.Errorf("--registry-mirror: %s has two mirrors, %s and %s", reg, prev, url)
		}
		s.Mirrors[reg] = url
	}
	s.PlainHTTP = cfg.RegistryPlainHTTP
	for _, c := range cfg.RegistryCAs {
		reg, file, ok := strings.Cut(c, "=")
		if !ok || reg == "" || file == "" {
			return oci.Settings{}, fmt.Errorf("--registry-ca %q: want REGISTRY=FILE, e.g. registry.lab:5000=/etc/anvil/registry-ca.pem", c)
		}
		pem, err := os.ReadFile(file)
		if err != nil {
			return oci.Settings{}, fmt.Errorf("--registry-ca %s: %w", c, err)
		}
		if s.CAs == nil {
			s.CAs = map[string]string{}
		}
		s.CAs[reg] = string(pem)
	}
	if cfg.RegistryAuthFile != "" {
		b, err := os.ReadFile(cfg.RegistryAuthFile)
		if err != nil {
			return oci.Settings{}, fmt.Errorf("--registry-auth-file: %w", err)
		}
		if s.Auths, err = oci.ParseDockerConfig(b); err != nil {
			return oci.Settings{}, fmt.Errorf("--registry-auth-file %s: %w", cfg.RegistryAuthFile, err)
		}
	}
	n, err := s.Normalize()
	if err != nil {
		return oci.Settings{}, fmt.Errorf("registry settings (--registry-*): %w", err)
	}
	return n, nil
}

// logRegistrySettings says at start what the settings are, never the
// credentials: only which registries have some.
func logRegistrySettings(log *slog.Logger, s oci.Settings) {
	if s.IsZero() {
		return
	}
	var mirrors []string
	for _, reg := range slices.Sorted(maps.Keys(s.Mirrors)) {
		mirrors = append(mirrors, reg+"="+s.Mirrors[reg])
	}
	log.Info("registry settings for container actions", "mirrors", strings.Join(mirrors, ","),
		"plain_http", strings.Join(s.PlainHTTP, ","), "ca", strings.Join(slices.Sorted(maps.Keys(s.CAs)), ","),
		"credentials_for", strings.Join(slices.Sorted(maps.Keys(s.Auths)), ","))
}
