package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/anvilproj/anvil/internal/atomicfile"
	"github.com/anvilproj/anvil/internal/audit"
	"github.com/anvilproj/anvil/internal/auth"
)

// Files the security setup keeps in the data directory.
const (
	agentKeyFile   = "agent.key"   // in auth.LocalIssuerDir: the HMAC key of agent tokens
	adminTokenFile = "admin.token" // in auth.LocalIssuerDir: the local admin's token
	auditFile      = "audit/audit.log"

	// adminTokenTTL is the lifetime of the admin token written at each
	// start when the local issuer is in use. The next start revokes it.
	adminTokenTTL = 365 * 24 * time.Hour
	// adminTokenReplaced is the revocation reason of the admin token a
	// start replaces.
	adminTokenReplaced = "admin token replaced at server start"
)

var tokensRefused = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "anvil_auth_tokens_refused_total",
	Help: "Bearer tokens refused, by reason (no token, malformed, expired, bad signature, …).",
}, []string{"reason"})

// security is what Run hands the API and the boot policy: how management
// calls are authenticated, how agent tokens are made and checked, and the
// audit log.
type security struct {
	authenticate func(ctx context.Context, h http.Header) (*auth.Principal, error) // nil: authentication off
	agentKey     *auth.AgentKey                                                    // nil: agents not checked
	audit        *audit.Log
	verifier     *auth.Verifier
}

// close closes the verifier and the audit log.
func (s *security) close() error {
	if s.verifier != nil {
		s.verifier.Close()
	}
	if s.audit != nil {
		s.audit.Close()
	}
	return nil
}

// setupSecurity opens the audit log and, unless cfg.InsecureNoAuth,
// builds the token verifier and loads the agent key. Tokens named in
// DATA_DIR/auth/revoked-tokens.json are refused (`anvil token revoke`).
// With no identity provider configured, the local issuer's key (made once
// in DATA_DIR/auth) is trusted and a fresh admin token is written next to
// it for the CLI on this machine; the one it replaces is revoked, so a
// start leaves one admin token of the local issuer valid, not one per
// start for a year each.
func setupSecurity(ctx context.Context, cfg Config, log *slog.Logger) (_ *security, err error) {
	s := &security{}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.audit, err = audit.Open(filepath.Join(cfg.DataDir, auditFile)); err != nil {
		return nil, err
	}
	if cfg.InsecureNoAuth {
		for _, line := range []string{
			"AUTHENTICATION IS OFF (--insecure-no-auth): anyone who can reach the API can read and change every object",
			"AUTHENTICATION IS OFF: agent calls are not checked; any machine can report for any workflow",
		} {
			log.Warn(line)
		}
		return s, nil
	}
	dir := auth.LocalIssuerDir(cfg.DataDir)
	if s.agentKey, err = auth.LoadOrCreateAgentKey(filepath.Join(dir, agentKeyFile)); err != nil {
		return nil, err
	}
	vc := cfg.Auth
	vc.Logger = log
	vc.RevocationFile = auth.RevocationFile(cfg.DataDir)
	if vc.JWKSURL == "" && len(vc.KeyFiles) == 0 {
		li, err := auth.EnsureLocalIssuer(dir)
		if err != nil {
			return nil, err
		}
		vc.KeyFiles = []string{li.PublicKeyFile()}
		vc.Issuer, vc.Audience = auth.LocalIssuerName, auth.LocalAudience
		path := filepath.Join(dir, adminTokenFile)
		// Revoked before the verifier reads the list, so the old token
		// is refused from the first call.
		if err := revokeAdminToken(path, vc.RevocationFile, log); err != nil {
			return nil, err
		}
		tok, err := li.Mint("admin", "", []string{auth.RoleAdmin}, adminTokenTTL)
		if err != nil {
			return nil, err
		}
		if err := atomicfile.Write(path, []byte(tok+"\n"), 0o600); err != nil {
			return nil, err
		}
		log.Info("authentication: local issuer (no identity provider configured); the admin token is in "+path+
			"; `anvil token create` makes tokens for others", "key_id", li.KeyID())
	} else {
		log.Info("authentication: tokens from the identity provider", "jwks_url", vc.JWKSURL, "key_files", vc.KeyFiles,
			"issuer", vc.Issuer, "audience", vc.Audience)
	}
	if s.verifier, err = auth.NewVerifier(ctx, vc); err != nil {
		return nil, fmt.Errorf("authentication: %w", err)
	}
	v := auth.NewCachingVerifier(s.verifier, 0, 0)
	s.authenticate = func(ctx context.Context, h http.Header) (*auth.Principal, error) {
		tok, err := auth.BearerToken(h)
		if err == nil {
			var p *auth.Principal
			if p, err = v.Verify(ctx, tok); err == nil {
				return p, nil
			}
		}
		tokensRefused.WithLabelValues(string(auth.ReasonOf(err))).Inc()
		return nil, err
	}
	return s, nil
}

// revokeAdminToken revokes the local issuer's admin token in path, the
// one the last start wrote, before a new one replaces it. No file is
// nothing to revoke; a file that holds no token of the local issuer (it
// was edited, or holds a token of another issuer) is left alone with a
// warning: revoking an unknown jti helps nobody.
func revokeAdminToken(path, list string, log *slog.Logger) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("previous admin token: %w", err)
	}
	r, err := auth.RevocationOf(strings.TrimSpace(string(b)))
	if err == nil && r.Issuer != auth.LocalIssuerName {
		err = fmt.Errorf("issued by %q, not the local issuer", r.Issuer)
	}
	if err != nil {
		log.Warn("authentication: the previous admin token file holds no local admin token; nothing revoked", "path", path, "err", err)
		return nil
	}
	now := time.Now()
	if r.Expires.Before(now) {
		return nil // refused anyway
	}
	r.Reason = adminTokenReplaced
	if err := auth.Revoke(list, r, now); err != nil {
		return fmt.Errorf("revoke the previous admin token: %w", err)
	}
	log.Info("authentication: the previous admin token is revoked", "jti", r.ID, "list", list)
	return nil
}
