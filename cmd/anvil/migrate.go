package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/anvilproj/anvil/internal/atomicfile"
	"github.com/anvilproj/anvil/internal/migrate"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/secrets"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/store/backend"
	"github.com/anvilproj/anvil/internal/store/bolt"
)

// secretsDir holds the seal key and the generated secrets in a data
// directory, where `anvil serve` keeps them.
const secretsDir = "secrets"

// storeFlags are the flags of the commands that open a store directly:
// backend's, --data-dir and --seal-key-file.
type storeFlags struct {
	cfg     backend.Config
	sealKey string
	timeout time.Duration
}

func (f *storeFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.cfg.DataDir, "data-dir", "/var/lib/anvil", "the data directory of the embedded store (--store bolt)")
	fs.StringVar(&f.sealKey, "seal-key-file", "", "the key that seals Secrets in the embedded store (default DATA_DIR/secrets/seal.key)")
	fs.DurationVar(&f.timeout, "open-timeout", time.Minute, "give up opening the store after this long (--store kubernetes: an unreachable API server)")
	f.cfg.AddFlags(fs)
}

// sealKeyPath is --seal-key-file, or its default in the data directory
// (where `anvil serve` keeps it).
func (f *storeFlags) sealKeyPath() string {
	if f.sealKey != "" {
		return f.sealKey
	}
	return filepath.Join(f.cfg.DataDir, secretsDir, secrets.KeyFileName)
}

// open opens the store the flags name. For the embedded store, mustExist
// refuses a data directory without one instead of creating it empty.
func (f *storeFlags) open(cmd *cobra.Command, mustExist bool) (store.Store, error) {
	if !f.cfg.IsKubernetes() && mustExist {
		p := filepath.Join(f.cfg.DataDir, backend.StoreFile)
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("no store to read at %s (--data-dir): %w", p, err)
		}
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	return backend.Open(ctx, f.cfg)
}

// generated opens the generated secrets the embedded store's server
// keeps beside the store (a cluster keeps them as Secrets).
func (f *storeFlags) generated() (*secrets.Store, error) {
	return secrets.Open(secrets.Config{Dir: filepath.Join(f.cfg.DataDir, secretsDir)})
}

// describe names the store for messages.
func (f *storeFlags) describe() string {
	if f.cfg.IsKubernetes() {
		if f.cfg.Kubeconfig != "" {
			return "the Kubernetes API of " + f.cfg.Kubeconfig
		}
		return "the Kubernetes API"
	}
	return "the embedded store in " + f.cfg.DataDir
}

// existingSealer opens the seal key at path, which must exist: export
// reads Secrets, it never makes a key.
func existingSealer(path string) (*secrets.Sealer, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("--unseal needs the seal key that sealed the Secrets (--seal-key-file): %w", err)
	}
	return secrets.OpenSealer(path, nil)
}

func printWarnings(w io.Writer, warns []string) {
	for _, s := range warns {
		fmt.Fprintln(w, "warning:", s)
	}
}

func newExportCmd() *cobra.Command {
	var (
		sf     storeFlags
		out    string
		unseal bool
	)
	cmd := &cobra.Command{
		Use:   "export [--store bolt --data-dir DIR | --store kubernetes --kubeconfig FILE] [-o FILE] [--unseal]",
		Short: "Write every object of a store, status included, as YAML (to move a site to another store)",
		Long: `export reads every object of a store directly — Secrets, Hardware, Templates,
BootProfiles, Machines, Workflows, Jobs, Tasks, in that order — and writes
them with their status as multi-document YAML, for 'anvil restore' into
another store. The embedded store is opened while its server is stopped
(the file's lock refuses a running server's).

uid, resourceVersion and generation are dropped; each object's creation time
is kept in the annotation ` + model.AnnotationCreatedAt + `. Sealed Secrets
stay sealed unless --unseal opens them with the seal key, which a cluster
needs. From a cluster only Anvil's Secrets are written: those a Machine or
Task names, and the generated ones (kubeadm tokens, passwords, SSH keys),
which from the embedded store come from DATA_DIR/secrets/secrets.json.

  anvil export --data-dir /var/lib/anvil --unseal -o site.yaml
  anvil export --store kubernetes --kubeconfig ~/.kube/config -o site.yaml

Machine records and the audit log are files in the data directory, not
store objects: see docs/kubernetes.md, "Moving a site between stores".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := migrate.ExportOptions{Source: sf.describe(), AnvilSecretsOnly: sf.cfg.IsKubernetes()}
			if unseal {
				key, err := existingSealer(sf.sealKeyPath())
				switch {
				case err == nil:
					opts.Unseal = key.Open
				case sf.cfg.IsKubernetes():
					// A cluster's Secrets are plain, but for those moved
					// in sealed: only these need the key.
					opts.Unseal = func(s *model.Secret) (map[string][]byte, error) {
						return nil, fmt.Errorf("secret %s is sealed: %w", s.Key(), err)
					}
				default:
					return err
				}
			}
			st, err := sf.open(cmd, true)
			if err != nil {
				return err
			}
			defer st.Close()
			if !sf.cfg.IsKubernetes() {
				gen, err := sf.generated()
				if err != nil {
					return err
				}
				opts.Generated = gen.All()
			}
			var buf bytes.Buffer
			res, err := migrate.Export(cmd.Context(), st, &buf, opts)
			if err != nil {
				return err
			}
			if out == "" || out == "-" {
				_, err = cmd.OutOrStdout().Write(buf.Bytes())
			} else {
				// Whole or not at all, so that a failed export never
				// leaves a cut file (or an earlier export truncated);
				// 0600: with --unseal it holds credentials.
				err = atomicfile.Write(out, buf.Bytes(), 0o600)
			}
			if err != nil {
				return err
			}
			printWarnings(cmd.ErrOrStderr(), res.Warnings)
			fmt.Fprintf(cmd.ErrOrStderr(), "exported %s from %s\n", res.Summary(), sf.describe())
			return nil
		},
	}
	sf.add(cmd)
	cmd.Flags().StringVarP(&out, "output", "o", "-", "file to write (- for standard output); created mode 0600")
	cmd.Flags().BoolVar(&unseal, "unseal", false, "write sealed Secrets' values as plain data (needs the seal key: --seal-key-file)")
	return cmd
}

func newRestoreCmd() *cobra.Command {
	var (
		sf        storeFlags
		overwrite bool
	)
	cmd := &cobra.Command{
		Use:   "restore FILE|- [--store bolt --data-dir DIR | --store kubernetes --kubeconfig FILE] [--overwrite]",
		Short: "Put a backup in place of the embedded store, or write the objects of an export into a store",
		Long: `restore FILE --data-dir DIR, FILE a backup ('anvil backup'), puts it in place
of the embedded store of DIR, whose server must be stopped (its lock refuses
the restore). The backup is checked whole first; one from a newer Anvil
(a newer store schema) is refused. The store file it replaces is kept as
DIR/anvil.db.replaced-by-restore.TIME (docs/upgrades.md).

  anvil restore /srv/backups/anvil.db --data-dir /var/lib/anvil

restore FILE, FILE an export, writes every object of FILE (an 'anvil export', or any manifest of
Anvil's kinds) into a store directly, with its status: a finished workflow
keeps its state, tasks, actions, times and history. Every document is checked
first, and an object the store already holds is refused unless --overwrite:
either the whole file is written or nothing is. The embedded store is opened
while its server is stopped.

Into the embedded store, plain Secrets are sealed with its seal key (made
when missing, as 'anvil serve' does), and sealed ones must open with it.
Into a cluster, Secrets are written as the file has them.

  anvil restore site.yaml --store kubernetes --kubeconfig ~/.kube/config
  anvil restore site.yaml --data-dir /var/lib/anvil`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			var err error
			source := args[0]
			if source != "-" && bolt.IsStoreFile(source) {
				return restoreBackup(cmd, sf, source)
			}
			if source == "-" {
				data, err = io.ReadAll(cmd.InOrStdin())
			} else {
				data, err = os.ReadFile(source)
			}
			if err != nil {
				return fmt.Errorf("read %s: %w", source, err)
			}
			// Parsed before the store opens: a broken file leaves nothing
			// behind, not even a new empty store.
			file, err := migrate.Parse(source, data)
			if err != nil {
				return err
			}
			var opts migrate.RestoreOptions
			opts.Overwrite = overwrite
			if !sf.cfg.IsKubernetes() {
				if err := sf.cfg.Check(); err != nil {
					return err
				}
				sealer, err := secrets.OpenSealer(sf.sealKeyPath(), nil)
				if err != nil {
					return err
				}
				opts.Sealer = sealer
				if opts.Generated, err = sf.generated(); err != nil {
					return err
				}
			}
			st, err := sf.open(cmd, false)
			if err != nil {
				return err
			}
			defer st.Close()
			res, err := migrate.Restore(cmd.Context(), st, file, opts)
			if err != nil {
				return err
			}
			printWarnings(cmd.ErrOrStderr(), res.Warnings)
			fmt.Fprintf(cmd.ErrOrStderr(), "restored %s into %s\n", res.Summary(), sf.describe())
			return nil
		},
	}
	sf.add(cmd)
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "replace objects the store already holds")
	return cmd
}

// restoreBackup puts the backup file in place of the embedded store of
// --data-dir (bolt.RestoreFile).
func restoreBackup(cmd *cobra.Command, sf storeFlags, file string) error {
	if sf.cfg.IsKubernetes() {
		return fmt.Errorf("%s is a backup of the embedded store: it restores into --data-dir, not into --store kubernetes (move objects with 'anvil export' from it)", file)
	}
	path := filepath.Join(sf.cfg.DataDir, backend.StoreFile)
	r, err := bolt.RestoreFile(file, path, time.Now())
	if err != nil {
		return err
	}
	n := 0
	for _, objs := range r.Contents.Objects {
		n += len(objs)
	}
	w := cmd.ErrOrStderr()
	what := fmt.Sprintf("%d objects", n)
	if r.Contents.Schema.Version != bolt.SchemaVersion {
		what = "a store of an older schema (the server migrates it when it opens it, keeping a copy)"
	}
	fmt.Fprintf(w, "restored %s (store schema %d, last written by Anvil %s) from %s into %s\n",
		what, r.Contents.Schema.Version, r.Contents.Schema.Writer, file, path)
	if r.Replaced != "" {
		fmt.Fprintf(w, "the store it replaced is kept as %s\n", r.Replaced)
	}
	return nil
}
