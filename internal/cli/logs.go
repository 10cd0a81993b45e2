package cli

import (
	"fmt"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
)

func newLogsCmd() *cobra.Command {
	var namespace string
	var tail int
	var agent bool
	cmd := &cobra.Command{
		Use:   "logs WORKFLOW",
		Short: "Show the output lines agents streamed for a workflow (or, with --agent, for an agent ID)",
		Example: `  anvil logs rack1-node07-install
  anvil logs --agent 3c:ec:ef:12:34:07 --tail 50`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &v1.GetLogsRequest{Tail: int32(tail)}
			if agent {
				req.AgentId = args[0]
			} else {
				req.WorkflowId = namespace + "/" + args[0]
			}
			c := newClients(cmd)
			resp, err := c.logs.GetLogs(ctx(cmd), connect.NewRequest(req))
			if err != nil {
				return c.explain(err)
			}
			out := cmd.OutOrStdout()
			for _, l := range resp.Msg.GetLines() {
				fmt.Fprintf(out, "%s  %-24s %s\n", l.GetTime().AsTime().Local().Format("15:04:05.000"),
					joinNonEmpty("/", l.GetTaskName(), l.GetActionName()), l.GetLine())
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", model.DefaultNamespace, "namespace of the workflow")
	cmd.Flags().IntVar(&tail, "tail", 0, "only the newest N lines (0: all that are kept)")
	cmd.Flags().BoolVar(&agent, "agent", false, "the argument is an agent ID (usually a MAC), not a workflow")
	return cmd
}
