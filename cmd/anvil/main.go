// Command anvil is Anvil's one binary: `anvil serve` runs the provisioning
// server, the other commands are clients of its API. The boot environment
// runs cmd/anvil-agent instead, which shares the agent's part
// (internal/agentcmd) and none of the rest.
//
// main only builds the command tree and wires flags to packages; the logic
// lives in internal/server and internal/cli.
package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/anvilproj/anvil/internal/agentcmd"
	"github.com/anvilproj/anvil/internal/cli"
	"github.com/anvilproj/anvil/internal/cmdbase"
)

func main() {
	// anvil can still be the boot environment's /init (bootenv falls
	// back to it when anvil-agent is missing), a container's init and
	// the kernel's modprobe.
	agentcmd.TakeRole()
	os.Exit(cmdbase.Run(newRootCmd()))
}

func newRootCmd() *cobra.Command {
	root := cmdbase.NewRoot("anvil", "Bare-metal provisioning in one binary")
	pf := root.PersistentFlags()
	pf.String(cli.FlagCACert, "", "PEM file of the CA to trust for an https:// --server, e.g. from 'anvil tls ca' (env "+cli.EnvCACert+"; default: the system's CAs)")
	pf.Bool(cli.FlagInsecureSkipVerify, false, "do not verify the server's certificate (labs only: anyone on the path can read and change the calls)")
	cli.AddTokenFlags(root)

	root.AddCommand(newServeCmd(), cmdbase.NewVersionCmd(), newRelayCmd(), agentcmd.NewCommand(), newBootenvCmd(), newTokenCmd(), newTLSCmd(),
		newExportCmd(), newRestoreCmd(), newBackupCmd())
	root.AddCommand(cli.Commands()...)
	return root
}
