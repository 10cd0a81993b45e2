package tlsconf

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/anvilproj/anvil/internal/clock"
)

// DefaultReloadInterval is how often a FileSource looks at its files when
// FileConfig.ReloadInterval is 0.
const DefaultReloadInterval = time.Second

// FileConfig configures NewFileSource.
type FileConfig struct {
	// CertFile is the PEM certificate, optionally followed by its
	// intermediates. Required.
	CertFile string
	// KeyFile is the PEM private key of the certificate. Required.
	KeyFile string
	// ReloadInterval is the least time between two looks at the files'
	// modification time and size. If 0, uses DefaultReloadInterval.
	ReloadInterval time.Duration
	// Clock paces reloads and checks expiry. If nil, clock.Real.
	Clock clock.Clock
	// Logger gets a line per reload and per pair that cannot be used. If
	// nil, uses slog.Default().
	Logger *slog.Logger
}

// FileSource serves a certificate from a pair of files and reloads it when
// either file changes, without a restart: a handshake at most one
// ReloadInterval after the change sees the new certificate. A new pair that
// cannot be used (half written, key and certificate not matching) is
// logged once and the previous one keeps serving. It is safe for
// concurrent use.
type FileSource struct {
	cfg FileConfig
	log *slog.Logger

	mu        sync.Mutex
	cert      *tls.Certificate
	loaded    fileStamps // of the files cert was read from
	failing   bool       // the files on disk cannot be used (logged)
	failed    fileStamps // of those files
	lastCheck time.Time
}

// fileStamp is what tells that a file changed: its modification time and
// size (a file rewritten within the file system's timestamp granularity
// usually changes size too).
type fileStamp struct {
	mod  time.Time
	size int64
}

type fileStamps struct{ cert, key fileStamp }

// NewFileSource reads the pair, which must be usable now.
func NewFileSource(cfg FileConfig) (*FileSource, error) {
	if cfg.CertFile == "" || cfg.KeyFile == "" {
		return nil, errors.New("a certificate file and a key file are both required")
	}
	if cfg.ReloadInterval <= 0 {
		cfg.ReloadInterval = DefaultReloadInterval
	}
	cfg.Clock = clock.Or(cfg.Clock)
	s := &FileSource{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	stamps, err := s.stat()
	if err != nil {
		return nil, err
	}
	cert, err := s.load()
	if err != nil {
		return nil, err
	}
	s.cert, s.loaded, s.lastCheck = cert, stamps, cfg.Clock.Now()
	s.logLoaded("TLS certificate loaded", cert)
	return s, nil
}

// GetCertificate returns the current certificate, first reloading the
// files if they changed. It suits tls.Config.GetCertificate.
func (s *FileSource) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := s.cfg.Clock.Now(); now.Sub(s.lastCheck) >= s.cfg.ReloadInterval {
		s.lastCheck = now
		s.reloadLocked()
	}
	return s.cert, nil
}

// Reload reads the pair now, whether or not the files look changed: a
// certificate rewritten with its old modification time and size (a copy
// keeping timestamps, a renewal of the same length within the file
// system's timestamp granularity) is seen only so. SIGHUP calls it. A
// pair that cannot be used is returned as the error, and the previous
// one keeps serving.
func (s *FileSource) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastCheck = s.cfg.Clock.Now()
	stamps, err := s.stat()
	var cert *tls.Certificate
	if err == nil {
		cert, err = s.load()
	}
	if err != nil {
		s.failing, s.failed = true, stamps
		return fmt.Errorf("%w; still serving the previous certificate", err)
	}
	s.cert, s.loaded, s.failing = cert, stamps, false
	s.logLoaded("TLS certificate reloaded", cert)
	return nil
}

// reloadLocked reads the pair again when a file changed since it was
// loaded. A pair that fails is tried again at the next look (the writer may
// not be done), but logged only once per change.
func (s *FileSource) reloadLocked() {
	stamps, err := s.stat() // zero stamps when a file is missing
	if err == nil && stamps == s.loaded {
		s.failing = false
		return
	}
	var cert *tls.Certificate
	if err == nil {
		cert, err = s.load()
	}
	if err != nil {
		if !s.failing || stamps != s.failed {
			s.log.Warn("TLS certificate files changed but cannot be used; still serving the previous certificate",
				"cert", s.cfg.CertFile, "key", s.cfg.KeyFile, "err", err)
		}
		s.failing, s.failed = true, stamps
		return
	}
	s.cert, s.loaded, s.failing = cert, stamps, false
	s.logLoaded("TLS certificate reloaded", cert)
}

func (s *FileSource) stat() (fileStamps, error) {
	var st fileStamps
	for _, f := range []struct {
		name string
		dst  *fileStamp
	}{{s.cfg.CertFile, &st.cert}, {s.cfg.KeyFile, &st.key}} {
		fi, err := os.Stat(f.name)
		if err != nil {
			return fileStamps{}, fmt.Errorf("tls certificate: %w", err)
		}
		*f.dst = fileStamp{mod: fi.ModTime(), size: fi.Size()}
	}
	return st, nil
}

func (s *FileSource) load() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(s.cfg.CertFile, s.cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("load %s and %s: %w", s.cfg.CertFile, s.cfg.KeyFile, err)
	}
	return &cert, nil
}

func (s *FileSource) logLoaded(msg string, cert *tls.Certificate) {
	leaf := cert.Leaf // set by LoadX509KeyPair
	attrs := []any{"cert", s.cfg.CertFile, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339),
		"sans", sans(leaf), "sha256", Fingerprint(leaf.Raw)}
	if s.cfg.Clock.Now().After(leaf.NotAfter) {
		s.log.Warn(msg+"; it has expired", attrs...)
		return
	}
	s.log.Info(msg, attrs...)
}
