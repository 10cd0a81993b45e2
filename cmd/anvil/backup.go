package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/anvilproj/anvil/internal/cli"
	"github.com/anvilproj/anvil/internal/store/backend"
	"github.com/anvilproj/anvil/internal/store/bolt"
)

func newBackupCmd() *cobra.Command {
	var (
		dataDir string
		online  bool
	)
	cmd := &cobra.Command{
		Use:   "backup FILE [--data-dir DIR | --online [--server URL]]",
		Short: "Copy the embedded store to FILE, consistently: offline from a data directory, or online from the running server",
		Long: `backup writes a consistent copy of the embedded store (DATA_DIR/anvil.db) to
FILE, a store file that 'anvil restore FILE --data-dir DIR' puts back. It is
written whole or not at all, fsynced, mode 0600.

Offline (the default) it reads the data directory of a stopped server; a
running server's lock refuses it. --online asks the running server at
--server instead (an admin token): it copies its store in one read
transaction while it goes on serving, and the call is audited.

A backup holds every object with its status (Secrets stay sealed); not the
seal key, the audit log, the machine records or the other keys of the data
directory: see docs/upgrades.md, "What a backup holds".

  anvil backup --data-dir /var/lib/anvil /srv/backups/anvil-$(date +%F).db
  anvil backup --online --server https://anvil.lab:8443 /srv/backups/anvil.db`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := args[0]
			from := "the server at --server"
			if online {
				head, err := cli.OnlineBackup(cmd, out)
				if err != nil {
					return err
				}
				from = "the server (Anvil " + head.GetServerVersion() + ")"
			} else {
				if _, err := bolt.BackupFile(filepath.Join(dataDir, backend.StoreFile), out, time.Second); err != nil {
					return fmt.Errorf("%w (a running server: `anvil backup --online`)", err)
				}
				from = dataDir
			}
			// Read back whole: a backup nobody checked is a hope.
			c, err := bolt.CheckFile(out)
			if err != nil {
				return fmt.Errorf("the backup written to %s does not check: %w", out, err)
			}
			n := 0
			for _, objs := range c.Objects {
				n += len(objs)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "backed up %d objects (store schema %d, last written by Anvil %s) from %s to %s\n",
				n, c.Schema.Version, c.Schema.Writer, from, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "/var/lib/anvil", "the data directory of a stopped server")
	cmd.Flags().BoolVar(&online, "online", false, "copy the running server's store through its API (--server, an admin token)")
	cmd.MarkFlagsMutuallyExclusive("data-dir", "online")
	return cmd
}
