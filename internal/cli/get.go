package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
)

// scope is the namespace and selector flags shared by get, delete and
// describe.
type scope struct {
	namespace     string
	allNamespaces bool
	labels        string
	fields        string
}

func (s *scope) add(cmd *cobra.Command, selectors bool) {
	cmd.Flags().StringVarP(&s.namespace, "namespace", "n", model.DefaultNamespace, "namespace")
	if selectors {
		cmd.Flags().BoolVarP(&s.allNamespaces, "all-namespaces", "A", false, "list across all namespaces")
		cmd.Flags().StringVarP(&s.labels, "selector", "l", "", "label selector, e.g. rack=r1,role in (worker,gpu)")
		cmd.Flags().StringVar(&s.fields, "field-selector", "", "field selector, e.g. status.state=RUNNING")
	}
}

func (s *scope) listRequest() *v1.ListRequest {
	ns := s.namespace
	if s.allNamespaces {
		ns = ""
	}
	return &v1.ListRequest{Namespace: ns, LabelSelector: s.labels, FieldSelector: s.fields}
}

func newGetCmd() *cobra.Command {
	var sc scope
	var output, apiVersion string
	cmd := &cobra.Command{
		Use:   "get hardware|templates|workflows|bootprofiles|machines|jobs|tasks|secrets|workflowrulesets [NAME...] | KIND/NAME",
		Short: "List objects, or show some by name",
		Example: `  anvil get hardware
  anvil get workflows -o wide
  anvil get workflow rack1-node07-install -o yaml
  anvil get hw -A -l rack=r1
  anvil get bootprofiles -o wide
  anvil get hardware/rack1-node07 -o yaml --api-version tinkerbell.org/v1alpha2
  anvil get machines
  anvil get jobs`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if k, name, ok := strings.Cut(args[0], "/"); ok && len(args) == 1 {
				args = []string{k, name} // kubectl's KIND/NAME
			}
			kind, err := model.ParseKind(args[0])
			if err != nil {
				return err
			}
			switch output {
			case "", "wide", "yaml", "json", "name":
			default:
				return fmt.Errorf("unknown output format %q (want wide, yaml, json or name)", output)
			}
			if apiVersion != "" && output != "yaml" && output != "json" {
				return errors.New("--api-version applies to -o yaml and -o json")
			}
			c, err := newClients(cmd)
			if err != nil {
				return err
			}
			ops := c.ops(kind)
			var objs []model.Object
			if len(args) == 1 {
				objs, err = ops.list(ctx(cmd), sc.listRequest())
				if err != nil {
					return c.explain(err)
				}
			} else {
				for _, name := range args[1:] {
					o, err := ops.get(ctx(cmd), sc.namespace, name)
					if err != nil {
						return c.explain(err)
					}
					objs = append(objs, o)
				}
			}
			return printObjects(cmd.OutOrStdout(), kind, objs, printOptions{
				output: output, apiVersion: apiVersion, showNS: sc.allNamespaces, asList: len(args) > 2 || len(args) == 1})
		},
	}
	sc.add(cmd, true)
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: wide, yaml, json or name")
	cmd.Flags().StringVar(&apiVersion, "api-version", "", "with -o yaml|json: show Hardware and Workflows as "+model.APIVersion+" (the default) or "+model.APIVersionV1alpha2)
	return cmd
}

// printOptions say how printObjects writes.
type printOptions struct {
	output     string // "", "wide", "yaml", "json" or "name"
	apiVersion string // for yaml and json: the form of the objects ("": their own)
	showNS     bool   // a NAMESPACE column
	asList     bool   // wrap yaml and json in a Kubernetes-style List
}

// printObjects writes objs as a table (output "" or "wide"), names, or
// YAML/JSON, in the form o.apiVersion names.
func printObjects(w io.Writer, kind string, objs []model.Object, o printOptions) error {
	output, showNS := o.output, o.showNS
	switch output {
	case "yaml", "json":
		items := make([]any, len(objs))
		for i, obj := range objs {
			v, err := model.ToVersion(obj, o.apiVersion)
			if err != nil {
				return err
			}
			items[i] = v
		}
		var v any = items
		if o.asList {
			v = map[string]any{"apiVersion": "v1", "kind": "List", "items": items}
		} else if len(items) == 1 {
			v = items[0]
		}
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		if output == "yaml" {
			if b, err = yaml.JSONToYAML(b); err != nil {
				return err
			}
		} else {
			b = append(b, '\n')
		}
		_, err = w.Write(b)
		return err
	case "name":
		for _, o := range objs {
			fmt.Fprintf(w, "%s/%s\n", strings.ToLower(kind), o.GetObjectMeta().Name)
		}
		return nil
	}
	if len(objs) == 0 {
		fmt.Fprintf(w, "No %s found.\n", strings.ToLower(kind))
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	wide := output == "wide"
	header := tableHeader(kind, wide)
	if showNS {
		header = append([]string{"NAMESPACE"}, header...)
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	now := time.Now()
	for _, o := range objs {
		row := tableRow(o, wide, now)
		if showNS {
			row = append([]string{o.GetObjectMeta().Namespace}, row...)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

func tableHeader(kind string, wide bool) []string {
	switch kind {
	case model.KindHardware:
		if wide {
			return []string{"NAME", "MAC", "IP", "HOSTNAME", "ALLOW-PXE", "ARCH", "UEFI", "DISKS", "AGE"}
		}
		return []string{"NAME", "MAC", "IP", "HOSTNAME", "ALLOW-PXE", "AGE"}
	case model.KindTemplate:
		return []string{"NAME", "AGE"}
	case model.KindMachine:
		return []string{"NAME", "HOST", "PORT", "POWER", "CONTACTABLE", "AGE"}
	case model.KindJob:
		return []string{"NAME", "MACHINE", "TASKS", "STATE", "AGE"}
	case model.KindTask:
		return []string{"NAME", "JOB", "ACTION", "STATE", "AGE"}
	case model.KindSecret:
		return []string{"NAME", "TYPE", "KEYS", "AGE"}
	case model.KindWorkflowRuleSet:
		if wide {
			return []string{"NAME", "PRIORITY", "RULES", "SELECTOR", "TEMPLATE", "DISABLED", "AGE"}
		}
		return []string{"NAME", "PRIORITY", "RULES", "TEMPLATE", "AGE"}
	case model.KindBootProfile:
		if wide {
			return []string{"NAME", "SELECTOR", "PRIORITY", "KERNEL", "CONFIGS", "AGE"}
		}
		return []string{"NAME", "SELECTOR", "PRIORITY", "CONFIGS", "AGE"}
	}
	if wide {
		return []string{"NAME", "TEMPLATE", "HARDWARE", "STATE", "ACTIONS", "CURRENT", "AGENT", "DURATION", "AGE"}
	}
	return []string{"NAME", "TEMPLATE", "HARDWARE", "STATE", "ACTIONS", "CURRENT", "AGE"}
}

func tableRow(o model.Object, wide bool, now time.Time) []string {
	meta := o.GetObjectMeta()
	age := humanAge(meta.CreationTimestamp, now)
	switch x := o.(type) {
	case *model.Hardware:
		mac, ip, host, pxe, arch, uefi := "-", "-", "-", "-", "-", "-"
		if len(x.Spec.Interfaces) > 0 {
			i := x.Spec.Interfaces[0]
			if d := i.DHCP; d != nil {
				mac, host, arch = orDash(d.MAC), orDash(d.Hostname), orDash(d.Arch)
				if d.IP != nil {
					ip = orDash(d.IP.Address)
				}
				if d.UEFI != nil {
					uefi = fmt.Sprint(*d.UEFI)
				}
			}
			if i.Netboot != nil && i.Netboot.AllowPXE != nil {
				pxe = fmt.Sprint(*i.Netboot.AllowPXE)
			}
		}
		if wide {
			var disks []string
			for _, d := range x.Spec.Disks {
				disks = append(disks, d.Device)
			}
			return []string{meta.Name, mac, ip, host, pxe, arch, uefi, orDash(strings.Join(disks, ",")), age}
		}
		return []string{meta.Name, mac, ip, host, pxe, age}
	case *model.Template:
		return []string{meta.Name, age}
	case *model.Machine:
		port := x.Spec.Connection.Port
		if port == 0 {
			port = model.DefaultIPMIPort
		}
		contactable := "-"
		for _, c := range x.Status.Conditions {
			if c.Type == model.ConditionContactable {
				contactable = c.Status
			}
		}
		return []string{meta.Name, x.Spec.Connection.Host, fmt.Sprint(port), orDash(x.Status.PowerState), contactable, age}
	case *model.Job:
		return []string{meta.Name, x.Spec.MachineRef.Name, fmt.Sprint(len(x.Spec.Tasks)), bmcState(x.Status.Conditions), age}
	case *model.BMCTask:
		return []string{meta.Name, orDash(meta.Labels[model.BMCJobLabel]), x.Spec.Task.Describe(), bmcState(x.Status.Conditions), age}
	case *model.Secret:
		return []string{meta.Name, orDash(x.Type), orDash(strings.Join(x.Keys, ",")), age}
	case *model.WorkflowRuleSet:
		prio, rules, tpl := fmt.Sprint(x.Spec.Priority), fmt.Sprint(len(x.Spec.Rules)), orDash(x.Spec.Workflow.Template.Ref)
		if wide {
			sel := orDash(strings.Join(x.Spec.Selector, " | "))
			return []string{meta.Name, prio, rules, sel, tpl, fmt.Sprint(model.BoolValue(x.Spec.Workflow.Disabled, false)), age}
		}
		return []string{meta.Name, prio, rules, tpl, age}
	case *model.BootProfile:
		sel := orDash(strings.Join(x.Spec.Selector, " | "))
		configs := orDash(strings.Join(slices.Sorted(maps.Keys(x.Spec.Configs)), ","))
		prio := fmt.Sprint(x.Spec.Priority)
		if wide {
			return []string{meta.Name, sel, prio, x.Spec.Kernel, configs, age}
		}
		return []string{meta.Name, sel, prio, configs, age}
	case *model.Workflow:
		done, total := actionCounts(x)
		current, agent := "-", "-"
		if cs := x.Status.CurrentState; cs != nil {
			current = orDash(joinNonEmpty("/", cs.TaskName, cs.ActionName))
			agent = orDash(cs.AgentID)
		}
		state := orDash(x.Status.State)
		actions := fmt.Sprintf("%d/%d", done, total)
		if wide {
			return []string{meta.Name, x.Spec.TemplateRef, orDash(x.Spec.HardwareRef), state, actions, current, agent,
				workflowDuration(x, now), age}
		}
		return []string{meta.Name, x.Spec.TemplateRef, orDash(x.Spec.HardwareRef), state, actions, current, age}
	}
	return []string{meta.Name, age}
}

// bmcState is a BMC Job's or Task's state in one word, from Rufio's
// conditions: Completed, Failed, Running or Pending.
func bmcState(conds []model.JobCondition) string {
	for _, t := range []string{model.ConditionCompleted, model.ConditionFailed, model.ConditionRunning} {
		if model.HasCondition(conds, t) {
			return t
		}
	}
	return "Pending"
}

// actionCounts returns how many actions have succeeded and how many there are.
func actionCounts(w *model.Workflow) (done, total int) {
	for _, t := range w.Status.Tasks {
		for _, a := range t.Actions {
			total++
			if a.State == model.StateSuccess {
				done++
			}
		}
	}
	return done, total
}

func workflowDuration(w *model.Workflow, now time.Time) string {
	if w.Status.StartTime == nil {
		return "-"
	}
	end := now
	if w.Status.CompletionTime != nil {
		end = *w.Status.CompletionTime
	}
	return end.Sub(*w.Status.StartTime).Round(100 * time.Millisecond).String()
}

func humanAge(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	d := now.Sub(*t)
	switch {
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func orDash[S ~string](s S) string {
	if s == "" {
		return "-"
	}
	return string(s)
}

func joinNonEmpty(sep string, parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, sep)
}

func newDeleteCmd() *cobra.Command {
	var sc scope
	cmd := &cobra.Command{
		Use:     "delete hardware|template|workflow|bootprofile|machine|job|task|secret NAME...",
		Short:   "Delete objects by name",
		Example: `  anvil delete workflow rack1-node07-install`,
		Args:    cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, err := model.ParseKind(args[0])
			if err != nil {
				return err
			}
			c, err := newClients(cmd)
			if err != nil {
				return err
			}
			var errs []error
			for _, name := range args[1:] {
				if err := c.ops(kind).del(ctx(cmd), sc.namespace, name); err != nil {
					errs = append(errs, c.explain(err))
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s/%s deleted\n", strings.ToLower(kind), name)
			}
			return errors.Join(errs...)
		},
	}
	sc.add(cmd, false)
	return cmd
}
