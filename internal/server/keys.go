package server

import (
	"context"
	"path/filepath"

	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/keyring"
	"github.com/anvilproj/anvil/internal/secrets"
	"github.com/anvilproj/anvil/internal/tlsconf"
)

// shareKeys, in Kubernetes mode, makes the keys every replica must hold
// the same the cluster's (internal/keyring): the agent token key and the
// local issuer's key (a token from one replica is good at all), the
// generated TLS CA (a machine that trusts one trusts all) and the seal key
// (a Secret sealed by the embedded store opens on all). Keys the operator
// gives as files (--tls-cert, --seal-key-file) are theirs to distribute.
// It runs before anything loads those files.
func shareKeys(ctx context.Context, cfg Config) error {
	if !cfg.Store.IsKubernetes() {
		return nil
	}
	rc, err := cfg.Store.RESTConfig()
	if err != nil {
		return err
	}
	authDir := auth.LocalIssuerDir(cfg.DataDir)
	files := []keyring.File{
		{Key: "agent.key", Path: filepath.Join(authDir, agentKeyFile)},
		{Key: "issuer-key.pem", Path: auth.LocalIssuerKeyFile(authDir)},
	}
	generatedTLS := cfg.TLS && cfg.TLSCertFile == ""
	if generatedTLS {
		files = append(files,
			keyring.File{Key: "tls-ca.pem", Path: filepath.Join(TLSDir(cfg.DataDir), tlsconf.CAFile)},
			keyring.File{Key: "tls-ca-key.pem", Path: filepath.Join(TLSDir(cfg.DataDir), tlsconf.CAKeyFile)})
	}
	if cfg.SealKeyFile == "" {
		files = append(files, keyring.File{Key: "seal.key", Path: filepath.Join(cfg.DataDir, secretsDir, secrets.KeyFileName)})
	}
	return keyring.Sync(ctx, keyring.Config{REST: rc, Namespace: leaseNamespace(cfg), Files: files, Log: cfg.Logger,
		Generate: func() error {
			if _, err := auth.LoadOrCreateAgentKey(files[0].Path); err != nil {
				return err
			}
			if _, err := auth.EnsureLocalIssuer(authDir); err != nil {
				return err
			}
			if generatedTLS {
				if _, err := tlsconf.NewGeneratedSource(tlsconf.GeneratedConfig{Dir: TLSDir(cfg.DataDir), Hosts: tlsHosts(cfg), Logger: cfg.Logger}); err != nil {
					return err
				}
			}
			if cfg.SealKeyFile == "" {
				if _, err := secrets.OpenSealer(filepath.Join(cfg.DataDir, secretsDir, secrets.KeyFileName), nil); err != nil {
					return err
				}
			}
			return nil
		}})
}
