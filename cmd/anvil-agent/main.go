// Command anvil-agent is the boot environment's /init: anvil's agent
// without the server, the store, the Kubernetes and BMC clients or the
// management CLI, so that the initramfs every machine downloads and
// unpacks on every netboot carries only what runs there (docs/bootenv.md).
//
// As PID 1 it mounts the kernel's filesystems and keeps `anvil-agent
// agent --boot` running; it is also the kernel's modprobe and the init of
// the containers the agent starts. Its agent command is the full anvil's
// (internal/agentcmd), so `anvil-agent agent --server … --worker-id …`
// runs the agent on a machine that is already up, as `anvil agent` does.
package main

import (
	"os"

	"github.com/anvilproj/anvil/internal/agentcmd"
	"github.com/anvilproj/anvil/internal/cmdbase"
)

func main() {
	agentcmd.TakeRole()
	root := cmdbase.NewRoot("anvil-agent", "Anvil's agent alone: the boot environment's /init")
	root.AddCommand(agentcmd.NewCommand(), cmdbase.NewVersionCmd())
	os.Exit(cmdbase.Run(root))
}
