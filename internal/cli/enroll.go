package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
)

func newEnrollCmd() *cobra.Command {
	var namespace string
	var all, dryRun bool
	cmd := &cobra.Command{
		Use:   "enroll [--dry-run]",
		Short: "Match discovered machines to WorkflowRuleSets, and create their workflows",
		Long: `enroll runs an auto-enrolment pass now: each discovered Hardware (label
` + model.LabelDiscovered + `=true) that has its inventory (status.attributes), no
workflow and no enrolment yet gets a Workflow from the first rule that matches
it: rule sets by spec.priority (highest first), then by name, rules in their
order. The server's enrolment controller does the same by itself whenever a
discovered Hardware or a rule set changes; this command is for now, after a
fix (a Template that was missing), and for seeing what the rules say.

With --dry-run nothing is written: it lists each discovered Hardware with
the rule it would get, the other rules that also match it (only the first
acts), or why none applies.`,
		Example: `  anvil enroll --dry-run
  anvil enroll --dry-run -A
  anvil enroll -n lab`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClients(cmd)
			if err != nil {
				return err
			}
			ns := namespace
			if all {
				ns = ""
			}
			resp, err := c.ruleSets.Enroll(ctx(cmd), connect.NewRequest(&v1.EnrollRequest{Namespace: ns, DryRun: dryRun}))
			if err != nil {
				return c.explain(err)
			}
			return printEnroll(cmd.OutOrStdout(), resp.Msg.GetResults(), all)
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", model.DefaultNamespace, "namespace")
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "every namespace")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only say which rule each discovered machine would get")
	return cmd
}

// printEnroll writes a table of the results, then a line per result
// that has more to say: the rules that also matched, why none applied,
// why it failed, the rule sets that were skipped as broken.
func printEnroll(w io.Writer, results []*v1.EnrollResult, showNS bool) error {
	if len(results) == 0 {
		fmt.Fprintf(w, "No discovered hardware (label %s=true).\n", model.LabelDiscovered)
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	header := []string{"HARDWARE", "RESULT", "RULE", "WORKFLOW"}
	if showNS {
		header = append([]string{"NAMESPACE"}, header...)
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range results {
		wf := "-"
		switch r.GetOutcome() {
		case "enrolled", "would-enrol", "already-enrolled", "has-workflow":
			wf = r.GetWorkflow()
		}
		row := []string{r.GetHardware(), r.GetOutcome(), orDash(r.GetRule()), wf}
		if showNS {
			row = append([]string{r.GetNamespace()}, row...)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	broken := map[string]bool{}
	for _, r := range results {
		name := r.GetHardware()
		if showNS {
			name = r.GetNamespace() + "/" + name
		}
		if also := r.GetAlso(); len(also) > 0 {
			fmt.Fprintf(w, "%s: also matched %s (only the first rule acts)\n", name, strings.Join(also, ", "))
		}
		switch r.GetOutcome() {
		case "no-match", "failed", "no-attributes", "has-workflow":
			fmt.Fprintf(w, "%s: %s\n", name, r.GetMessage())
		}
		for _, b := range r.GetBroken() {
			if !broken[b] {
				broken[b] = true
				fmt.Fprintf(w, "warning: rule set skipped, it does not compile: %s\n", b)
			}
		}
	}
	return nil
}

// describeRuleSet shows a rule set: its order, conditions, the workflow it
// makes, and the workflows it made (wfs: its namespace's).
func describeRuleSet(w io.Writer, r *model.WorkflowRuleSet, wfs []model.Object, now time.Time) {
	describeMeta(w, &r.ObjectMeta, now)
	fmt.Fprintf(w, "Priority:    %d\n", r.Spec.Priority)
	if len(r.Spec.Selector) > 0 {
		fmt.Fprintf(w, "Selector:    %s\n", strings.Join(r.Spec.Selector, " | "))
	}
	fmt.Fprintln(w, "Rules:")
	if len(r.Spec.Rules) == 0 {
		fmt.Fprintln(w, "  (none: the selector alone decides)")
	}
	for i, rule := range r.Spec.Rules {
		fmt.Fprintf(w, "  [%d] %s\n", i, rule)
	}
	t := r.Spec.Workflow.Template
	fmt.Fprintf(w, "Workflow:\n  Template:      %s\n  Hardware map:  %s = the machine's first MAC", orDash(t.Ref), r.AgentKey())
	for _, k := range slices.Sorted(maps.Keys(t.KVs)) {
		fmt.Fprintf(w, ", %s = %s", k, t.KVs[k])
	}
	fmt.Fprintf(w, "\n  Disabled:      %t\n  Attributes:    %t (copied to the workflow's annotation)\n",
		model.BoolValue(r.Spec.Workflow.Disabled, false), r.Spec.Workflow.AddAttributes)
	prefix := r.Key() + "#"
	var made []string
	for _, o := range wfs {
		m := o.GetObjectMeta()
		if by := m.Annotations[model.AnnotationEnrolledBy]; strings.HasPrefix(by, prefix) {
			made = append(made, fmt.Sprintf("%s (%s)", m.Name, strings.TrimPrefix(by, prefix)))
		}
	}
	fmt.Fprintf(w, "Enrolled:    %s\n", orDash(strings.Join(made, ", ")))
}
