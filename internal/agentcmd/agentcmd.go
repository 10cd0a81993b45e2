// Package agentcmd is the agent's part of anvil's command line, shared by
// the full anvil (cmd/anvil) and the boot environment's anvil-agent
// (cmd/anvil-agent): the `agent` command, and the roles the binary takes
// by how it was started, before any command line (a container's init, the
// boot environment's PID 1, the kernel's modprobe).
//
// It owns the wiring only: what the agent does is internal/agent's, how a
// container starts internal/container's. It must not import the server,
// the store or the management CLI (cmd/anvil-agent's test checks what that
// binary links).
package agentcmd

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/agent"
	"github.com/anvilproj/anvil/internal/clientheader"
	"github.com/anvilproj/anvil/internal/cmdbase"
	"github.com/anvilproj/anvil/internal/container"
	"github.com/anvilproj/anvil/internal/oci"
)

// modprobeName is the name the kernel runs its module helper by
// (/sbin/modprobe, a link to /init in the boot environment).
const modprobeName = "modprobe"

// EnvToken names the environment variable of the agent command's --token.
const EnvToken = "ANVIL_AGENT_TOKEN"

// TakeRole runs the role the process was started for, if it is not a
// command line, and then does not return: a container's init (this
// binary started again by the agent), PID 1 of the boot environment
// (which mounts the kernel's filesystems, reaps orphans and keeps
// `agent --boot` running), or the kernel's modprobe. Otherwise it returns
// and main runs the command line. main calls it first.
func TakeRole() {
	// A container's init is PID 1 of its own namespace, so this comes
	// before the check below.
	container.InitIfChild()
	if os.Getpid() == 1 {
		agent.Init()
	}
	if filepath.Base(os.Args[0]) == modprobeName {
		os.Exit(agent.Modprobe(os.Args[1:]))
	}
}

// NewCommand returns the agent command. It reads the root's persistent
// --server flag (cmdbase.NewRoot).
func NewCommand() *cobra.Command {
	var (
		boot         bool
		workerID     string
		cmdline      string
		exitWhenDone bool
		token        string
		cacheDir     string
		cacheSize    string
	)
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run a machine's workflow actions (the boot environment runs this as /init)",
		Long: `agent asks the Anvil server for the next action of this machine's workflow,
runs it natively (image2disk, writefile, cexec, kexec, archive2disk, reboot,
poweroff) or, for any other image (or runtime: container), pulls the image
and runs it in a container, and reports its start, progress, end and output.

In the boot environment anvil-agent (or anvil) is /init: PID 1 mounts the
kernel's filesystems and starts "agent --boot", which reads the server and
worker ID from the kernel command line (anvil.server=, or Hook's
grpc_authority= and worker_id=), loads the drivers of the machine's devices
and brings up every cabled link with DHCP first.

Without --boot it runs on a machine that is already up, with its network as
it is: give --server and --worker-id.`,
		Example: `  anvil agent --server http://10.20.0.1:7080 --worker-id 3c:ec:ef:12:34:07
  anvil agent --boot      # as the boot environment does`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if boot {
				return agent.Boot(cmd.Context(), agent.BootConfig{
					Cmdline: cmdline, Network: true, Drivers: true,
				})
			}
			// Before the catalog, which empties the image cache: a
			// command line that cannot run touches nothing.
			if workerID == "" {
				return errors.New("--worker-id is required (the machine's agent ID: its Hardware's spec.agentID or first MAC)")
			}
			cc := agent.CatalogConfig{ImageCacheDir: cacheDir}
			if cacheSize != "" {
				n, err := oci.ParseSize(cacheSize)
				if err != nil {
					return fmt.Errorf("--image-cache-size: %w", err)
				}
				cc.ImageCacheSize = n
			}
			set, note := agent.NewCatalog(cc)
			fmt.Fprintln(cmd.ErrOrStderr(), "anvil agent:", note)
			server := cmd.Flag("server").Value.String()
			if f := cmd.Flag("server"); !f.Changed {
				if env := os.Getenv(cmdbase.EnvServer); env != "" {
					server = env
				}
			}
			a, err := agent.New(agent.Config{
				Client:       anvilv1connect.NewAgentServiceClient(http.DefaultClient, server, clientheader.AgentToken(token)),
				AgentID:      workerID,
				Actions:      set,
				Console:      cmd.OutOrStdout(),
				ExitWhenDone: exitWhenDone,
			})
			if err != nil {
				return err
			}
			res, err := a.Run(cmd.Context())
			if err != nil && cmd.Context().Err() == nil {
				return err
			}
			if exitWhenDone && res.WorkflowState != "SUCCESS" {
				return &cmdbase.ExitError{Code: 3, Err: fmt.Errorf("workflow %s ended %s", res.WorkflowID, res.WorkflowState)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&boot, "boot", false, "run as the boot environment's agent: kernel command line, drivers, DHCP on every link")
	f.StringVar(&workerID, "worker-id", "", "this machine's agent ID (without --boot)")
	f.StringVar(&token, "token", os.Getenv(EnvToken), "the workflow's agent token (without --boot; default $"+EnvToken+"): the anvil.token= of the machine's boot script")
	f.StringVar(&cmdline, "cmdline", "", "with --boot: use this kernel command line instead of /proc/cmdline")
	f.BoolVar(&exitWhenDone, "exit-when-done", false, "exit when a workflow this agent worked on ends (exit code 3 unless SUCCESS)")
	f.StringVar(&cacheDir, "image-cache-dir", agent.DefaultImageCacheDir, "without --boot: where container images are kept (emptied at start)")
	f.StringVar(&cacheSize, "image-cache-size", "", "without --boot: the image cache's limit, e.g. 2G (default a quarter of the RAM; with --boot: anvil.image_cache= on the kernel command line)")
	return cmd
}
