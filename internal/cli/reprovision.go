package cli

import (
	"fmt"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
)

func newReprovisionCmd() *cobra.Command {
	var namespace, template, name string
	cmd := &cobra.Command{
		Use:   "reprovision HARDWARE --template TEMPLATE",
		Short: "Provision a machine again: a new workflow from a template, and netboot allowed",
		Long: `reprovision starts a new Workflow for HARDWARE from TEMPLATE (its hardwareMap
device_1 is the Hardware's first MAC, and toggleAllowNetboot is on) and sets
allowPXE on every interface of the Hardware, so that the machine's next
network boot runs the workflow — power-cycle it to start. When the workflow
succeeds, allowPXE goes back to false and the machine boots its disk again.

The server does it in one step. It refuses while the Hardware has another
unfinished workflow (wait for it, or delete it first), and when the Hardware
or the Template does not exist.`,
		Example: `  anvil reprovision rack1-node07 --template debian-raw
  anvil reprovision rack1-node07 --template debian-raw --name node07-reinstall -n lab
  anvil workflow watch node07-reinstall -n lab`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if template == "" {
				return fmt.Errorf("--template is required: the Template the new workflow runs (anvil get templates lists them)")
			}
			c, err := newClients(cmd)
			if err != nil {
				return err
			}
			resp, err := c.workflows.Reprovision(ctx(cmd), connect.NewRequest(&v1.ReprovisionRequest{
				Namespace: namespace, Hardware: args[0], Template: template, Workflow: name,
			}))
			if err != nil {
				return c.explain(err)
			}
			r := resp.Msg
			wf := r.GetWorkflow().GetMetadata()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "workflow/%s created (template %s, hardware %s)\n", wf.GetName(), template, args[0])
			fmt.Fprintf(out, "hardware/%s: %s; its next network boot runs the workflow\n", args[0], netbootSummary(r.GetHardware()))
			if bmc := bmcRefName(r.GetHardware()); bmc != "" {
				fmt.Fprintf(out, "machine/%s: the BMC powers it off, sets a one-time PXE boot and powers it on before the workflow starts (job/%s)\n",
					bmc, model.NetbootJobName(args[0]))
			}
			for _, w := range r.GetWarnings() {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
			}
			ns := ""
			if wf.GetNamespace() != model.DefaultNamespace {
				ns = " -n " + wf.GetNamespace()
			}
			fmt.Fprintf(out, "follow it: anvil workflow watch %s%s\n", wf.GetName(), ns)
			return nil
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", model.DefaultNamespace, "namespace of the Hardware, the Template and the new Workflow")
	cmd.Flags().StringVarP(&template, "template", "t", "", "the Template the new workflow runs (required)")
	cmd.Flags().StringVar(&name, "name", "", "name of the new Workflow (default HARDWARE-YYYYMMDD-HHMMSS, UTC)")
	return cmd
}

// bmcRefName is the Machine a Hardware's spec.bmcRef names, or "".
func bmcRefName(m *v1.Hardware) string {
	return m.GetSpec().GetFields()["bmcRef"].GetStructValue().GetFields()["name"].GetStringValue()
}

// netbootSummary says on how many of a Hardware's interfaces allowPXE is
// true, as the server answered it (reprovision, netboot).
func netbootSummary(m *v1.Hardware) string {
	total, on := 0, 0
	for _, v := range m.GetSpec().GetFields()["interfaces"].GetListValue().GetValues() {
		total++
		nb := v.GetStructValue().GetFields()["netboot"].GetStructValue()
		if nb.GetFields()["allowPXE"].GetBoolValue() {
			on++
		}
	}
	switch on {
	case total:
		return fmt.Sprintf("allowPXE true on every interface (%d)", total)
	case 0:
		return fmt.Sprintf("allowPXE false on every interface (%d)", total)
	}
	return fmt.Sprintf("allowPXE true on %d of %d interfaces", on, total)
}
