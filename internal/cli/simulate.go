package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/agentsim"
	"github.com/anvilproj/anvil/internal/clientheader"
)

func newSimulateAgentCmd() *cobra.Command {
	var agentID string
	var actionTime time.Duration
	var progress int
	var agentTok string
	cmd := &cobra.Command{
		Use:   "simulate-agent --agent-id ID",
		Short: "Pretend to be a machine's agent: take its workflow's actions and report them done",
		Long: `simulate-agent speaks the real agent protocol (GetAction, ReportActionStatus,
StreamLogs) for one agent ID but runs nothing: each action "takes" --action-time.
It is for trying workflows, templates and the operator view without hardware.

A server that checks agents (the default) refuses it: agent calls must carry
the workflow's token from the machine's boot script and come from the
Hardware's address. Try it against a server run with --insecure-no-auth, or
give --token (the boot script's anvil.token=) for a Hardware that lists no
addresses.`,
		Example: `  anvil simulate-agent --agent-id 3c:ec:ef:12:34:07 --action-time 2s`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if agentID == "" {
				return fmt.Errorf("--agent-id is required (a Hardware's first MAC, or its spec.agentID)")
			}
			c, err := newClients(cmd)
			if err != nil {
				return err
			}
			out := cmd.ErrOrStderr()
			res, err := agentsim.Run(ctx(cmd), agentsim.Config{
				Client:        anvilv1connect.NewAgentServiceClient(c.http, c.server, clientheader.AgentToken(agentTok)),
				AgentID:       agentID,
				ActionTime:    actionTime,
				ProgressSteps: progress,
				StreamLogs:    true,
				Logf: func(format string, args ...any) {
					fmt.Fprintf(out, "agent "+format+"\n", args...)
				},
			})
			if err != nil {
				return c.explain(err)
			}
			fmt.Fprintf(out, "agent %s: %d actions run; workflow ended %s\n", agentID, res.Actions, res.WorkflowState)
			return nil
		},
	}
	cmd.Flags().StringVar(&agentID, "agent-id", "", "agent ID to act as (usually the machine's MAC)")
	cmd.Flags().DurationVar(&actionTime, "action-time", time.Second, "how long each simulated action takes")
	cmd.Flags().IntVar(&progress, "progress-steps", 4, "progress reports per image-writing action")
	cmd.Flags().StringVar(&agentTok, "agent-token", "", "the workflow's agent token (anvil.token= of the machine's boot script)")
	return cmd
}
