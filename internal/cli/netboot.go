package cli

import (
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
)

func newNetbootCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "netboot",
		Short: "Allow or deny a machine's network boot (allowPXE, allowWorkflow)",
		Long: `netboot allow and netboot deny set spec.interfaces[].netboot.allowPXE of a
Hardware — whether the machine gets a boot file when it boots from the
network (denied, it gets its address only and goes on to its disk) — and,
with --workflow, allowWorkflow, whether that boot runs the machine's
workflow. Nothing else of the Hardware changes, and a change
someone makes at the same time is kept.

Operators may run it (it needs the permission reprovision needs), not only
admins: reprovision allows netboot, netboot deny stops it again.`,
		Example: `  anvil netboot deny rack1-node07
  anvil netboot allow rack1-node07 --mac 3c:ec:ef:12:34:07
  anvil netboot deny rack1-node07 --pxe=false --workflow   # netboot, but no workflow`,
	}
	cmd.AddCommand(newNetbootSetCmd(true), newNetbootSetCmd(false))
	return cmd
}

// newNetbootSetCmd is `netboot allow` (allow true) or `netboot deny`.
func newNetbootSetCmd(allow bool) *cobra.Command {
	verb := "deny"
	if allow {
		verb = "allow"
	}
	var namespace string
	var macs []string
	var pxe, workflow bool
	cmd := &cobra.Command{
		Use:   verb + " HARDWARE [--mac MAC]... [--workflow]",
		Short: strings.ToUpper(verb[:1]) + verb[1:] + " a machine's network boot",
		Long: fmt.Sprintf(`netboot %s sets allowPXE to %t on every interface of HARDWARE, or on those
--mac names, and with --workflow allowWorkflow too (--pxe=false --workflow:
allowWorkflow alone). It prints each flag it changed; a flag that already
had that value is left as it is.`, verb, allow),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &v1.SetNetbootRequest{Namespace: namespace, Hardware: args[0], Interfaces: macs}
			if pxe {
				req.AllowPxe = model.Bool(allow)
			}
			if workflow {
				req.AllowWorkflow = model.Bool(allow)
			}
			if req.AllowPxe == nil && req.AllowWorkflow == nil {
				return fmt.Errorf("nothing to %s: --pxe=false without --workflow changes no flag", verb)
			}
			c, err := newClients(cmd)
			if err != nil {
				return err
			}
			resp, err := c.hardware.SetNetboot(ctx(cmd), connect.NewRequest(req))
			if err != nil {
				return c.explain(err)
			}
			out := cmd.OutOrStdout()
			for _, ch := range resp.Msg.GetChanges() {
				ifc := ch.GetMac()
				if ifc == "" {
					ifc = fmt.Sprintf("interface %d", ch.GetInterface())
				}
				fmt.Fprintf(out, "hardware/%s: %s %t on %s (was %t)\n", args[0], ch.GetField(), ch.GetAfter(), ifc, ch.GetBefore())
			}
			if len(resp.Msg.GetChanges()) == 0 {
				fmt.Fprintf(out, "hardware/%s unchanged: every flag asked for already had that value\n", args[0])
			}
			fmt.Fprintf(out, "hardware/%s: %s\n", args[0], netbootSummary(resp.Msg.GetHardware()))
			return nil
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", model.DefaultNamespace, "namespace of the Hardware")
	cmd.Flags().StringArrayVar(&macs, "mac", nil, "MAC of an interface to change (repeat for several; default every interface)")
	cmd.Flags().BoolVar(&pxe, "pxe", true, "set allowPXE")
	cmd.Flags().BoolVar(&workflow, "workflow", false, "set allowWorkflow too")
	return cmd
}
