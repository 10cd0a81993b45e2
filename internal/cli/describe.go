package cli

import (
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
)

func newDescribeCmd() *cobra.Command {
	var sc scope
	var history int
	cmd := &cobra.Command{
		Use:   "describe KIND NAME | KIND/NAME",
		Short: "Show one object in detail: for a workflow, every action's state, duration and message; for a BMC job, every task's",
		Example: `  anvil describe workflow rack1-node07-install
  anvil describe hardware rack1-node07
  anvil describe bootprofile flatcar-worker
  anvil describe job/bmc-node07-power-on-lz4k1`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kindArg, name, err := kindAndName(args)
			if err != nil {
				return err
			}
			kind, err := model.ParseKind(kindArg)
			if err != nil {
				return err
			}
			c, err := newClients(cmd)
			if err != nil {
				return err
			}
			o, err := c.ops(kind).get(ctx(cmd), sc.namespace, name)
			if err != nil {
				return c.explain(err)
			}
			w := cmd.OutOrStdout()
			now := time.Now()
			switch x := o.(type) {
			case *model.Workflow:
				describeWorkflow(w, x, history, now)
			case *model.Hardware:
				wfs, err := c.ops(model.KindWorkflow).list(ctx(cmd), &v1.ListRequest{
					Namespace: x.Namespace, FieldSelector: "spec.hardwareRef=" + x.Name})
				if err != nil {
					return c.explain(err)
				}
				describeHardware(w, x, wfs, now)
			case *model.Template:
				describeMeta(w, &x.ObjectMeta, now)
				if x.Spec.Data != nil {
					fmt.Fprintf(w, "Data:\n%s\n", indent(*x.Spec.Data, "  "))
				}
			case *model.BootProfile:
				// The Hardware naming it; those its selector picks are
				// the boot policy's to decide (priorities, conflicts).
				refs, err := c.ops(model.KindHardware).list(ctx(cmd), &v1.ListRequest{
					Namespace: x.Namespace, FieldSelector: "spec.bootProfileRef.name=" + x.Name})
				if err != nil {
					return c.explain(err)
				}
				describeBootProfile(w, x, refs, now)
			case *model.WorkflowRuleSet:
				wfs, err := c.ops(model.KindWorkflow).list(ctx(cmd), &v1.ListRequest{Namespace: x.Namespace})
				if err != nil {
					return c.explain(err)
				}
				describeRuleSet(w, x, wfs, now)
			case *model.Machine:
				describeMachine(w, x, now)
			case *model.Job:
				tasks, err := c.ops(model.KindTask).list(ctx(cmd), &v1.ListRequest{
					Namespace: x.Namespace, LabelSelector: model.BMCJobLabel + "=" + x.Name})
				if err != nil {
					return c.explain(err)
				}
				describeBMCJob(w, x, tasks, now)
			case *model.BMCTask:
				describeMeta(w, &x.ObjectMeta, now)
				fmt.Fprintf(w, "Job:         %s\nAction:      %s\n", orDash(x.Labels[model.BMCJobLabel]), x.Spec.Task.Describe())
				describeBMCStatus(w, x.Status.Conditions, x.Status.StartTime, x.Status.CompletionTime)
			case *model.Secret:
				describeMeta(w, &x.ObjectMeta, now)
				fmt.Fprintf(w, "Type:        %s\nData:\n", orDash(x.Type))
				for _, k := range x.Keys {
					fmt.Fprintf(w, "  %s: <redacted>\n", k)
				}
			}
			return nil
		},
	}
	sc.add(cmd, false)
	cmd.Flags().IntVar(&history, "history", 20, "workflow history entries to show (0: all)")
	return cmd
}

func describeMeta(w io.Writer, m *model.ObjectMeta, now time.Time) {
	fmt.Fprintf(w, "Name:        %s\nNamespace:   %s\n", m.Name, m.Namespace)
	if len(m.Labels) > 0 {
		fmt.Fprintf(w, "Labels:      %s\n", formatLabels(m.Labels))
	}
	if m.CreationTimestamp != nil {
		fmt.Fprintf(w, "Created:     %s (%s ago)\n", m.CreationTimestamp.Format(time.RFC3339), humanAge(m.CreationTimestamp, now))
	}
}

func formatLabels(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + l[k]
	}
	return strings.Join(parts, ",")
}

func describeWorkflow(w io.Writer, x *model.Workflow, history int, now time.Time) {
	describeMeta(w, &x.ObjectMeta, now)
	st := &x.Status
	fmt.Fprintf(w, "Template:    %s\nHardware:    %s\nState:       %s\n", x.Spec.TemplateRef, orDash(x.Spec.HardwareRef),
		orDash(st.State))
	if st.StartTime != nil {
		fmt.Fprintf(w, "Started:     %s\nDuration:    %s\n", st.StartTime.Format(time.RFC3339), workflowDuration(x, now))
	}
	if st.GlobalTimeout > 0 {
		fmt.Fprintf(w, "Timeout:     %ds (whole workflow)\n", st.GlobalTimeout)
	}
	if st.CancelRequested != nil {
		fmt.Fprintf(w, "Cancel:      requested %s\n", st.CancelRequested.Format(time.RFC3339))
	}
	if len(st.Tasks) > 0 {
		fmt.Fprintln(w, "Actions:")
		writeActionTable(w, x, now)
	}
	if len(st.Conditions) > 0 {
		fmt.Fprintln(w, "Conditions:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  TYPE\tSTATUS\tREASON\tMESSAGE")
		for _, c := range st.Conditions {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", c.Type, c.Status, orDash(c.Reason), c.Message)
		}
		tw.Flush()
	}
	if len(st.History) > 0 {
		events := st.History
		if history > 0 && len(events) > history {
			events = events[len(events)-history:]
		}
		fmt.Fprintf(w, "History (%d of %d):\n", len(events), int64(len(st.History))+st.HistoryDropped)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, e := range events {
			what := joinNonEmpty("/", e.Task, e.Action)
			if what == "" {
				what = "workflow"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", e.Time.Local().Format("15:04:05.000"), what, orDash(e.State), e.Message)
		}
		tw.Flush()
	}
}

// writeActionTable prints one row per action: state, attempt, duration and
// message (or progress while running).
func writeActionTable(w io.Writer, x *model.Workflow, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  TASK\tACTION\tSTATE\tATTEMPT\tDURATION\tMESSAGE")
	for _, t := range x.Status.Tasks {
		for _, a := range t.Actions {
			msg := a.Message
			if a.State == model.StateRunning && a.Progress != nil {
				msg = formatProgress(a.Progress)
			}
			attempt := "-"
			if a.Attempt > 0 {
				attempt = fmt.Sprint(a.Attempt)
				if a.Retries > 0 {
					attempt += fmt.Sprintf("/%d", a.Retries+1)
				}
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", t.Name, a.Name, orDash(a.State), attempt,
				actionDuration(&a, now), oneLine(msg))
		}
	}
	tw.Flush()
}

func actionDuration(a *model.Action, now time.Time) string {
	switch {
	case a.ExecutionDuration != "":
		return a.ExecutionDuration
	case a.ExecutionStart != nil && a.ExecutionStop != nil:
		return a.ExecutionStop.Sub(*a.ExecutionStart).Round(10 * time.Millisecond).String()
	case a.ExecutionStart != nil:
		return now.Sub(*a.ExecutionStart).Round(100*time.Millisecond).String() + "…"
	}
	return "-"
}

// formatProgress renders bytes, total and rate: "512.0 MiB / 1.0 GiB (50%) at 98.2 MiB/s".
func formatProgress(p *model.Progress) string {
	s := formatBytes(p.Bytes)
	if p.TotalBytes > 0 {
		s += fmt.Sprintf(" / %s (%.0f%%)", formatBytes(p.TotalBytes), 100*float64(p.Bytes)/float64(p.TotalBytes))
	} else if p.Percent > 0 {
		s += fmt.Sprintf(" (%.0f%%)", p.Percent)
	}
	if p.BytesPerSec > 0 {
		s += " at " + formatBytes(int64(p.BytesPerSec)) + "/s"
	}
	return s
}

func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	return s
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}

func describeHardware(w io.Writer, h *model.Hardware, wfs []model.Object, now time.Time) {
	describeMeta(w, &h.ObjectMeta, now)
	if r := h.Spec.BMCRef; r != nil && r.Name != "" {
		fmt.Fprintf(w, "BMC:         machine/%s (anvil power status hardware/%s)\n", r.Name, h.Name)
	}
	if ids := h.AgentIDs(); len(ids) > 0 {
		fmt.Fprintf(w, "Agent IDs:   %s\n", strings.Join(ids, ", "))
	}
	if len(h.Spec.Disks) > 0 {
		var d []string
		for _, disk := range h.Spec.Disks {
			d = append(d, disk.Device)
		}
		fmt.Fprintf(w, "Disks:       %s\n", strings.Join(d, ", "))
	}
	fmt.Fprintln(w, "Interfaces:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  MAC\tIP\tHOSTNAME\tALLOW-PXE\tALLOW-WORKFLOW\tDHCP")
	for _, i := range h.Spec.Interfaces {
		mac, ip, host, pxe, wf, dhcp := "-", "-", "-", "-", "-", "on"
		if d := i.DHCP; d != nil {
			mac, host = orDash(d.MAC), orDash(d.Hostname)
			if d.IP != nil {
				ip = orDash(d.IP.Address)
			}
		}
		if n := i.Netboot; n != nil {
			if n.AllowPXE != nil {
				pxe = fmt.Sprint(*n.AllowPXE)
			}
			if n.AllowWorkflow != nil {
				wf = fmt.Sprint(*n.AllowWorkflow)
			}
		}
		if model.BoolValue(i.DisableDHCP, false) {
			dhcp = "off"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", mac, ip, host, pxe, wf, dhcp)
	}
	tw.Flush()
	if a := h.Status.Attributes; a != nil {
		agent := *a
		agent.OutOfBand = nil
		if !reflect.ValueOf(agent).IsZero() { // the agent has reported
			describeInventory(w, a)
		}
		if a.OutOfBand != nil {
			describeOutOfBand(w, a)
		}
	}
	if c := h.Status.Commissioning; c != nil {
		describeCommissioning(w, c, now)
	}
	if len(wfs) > 0 {
		fmt.Fprintln(w, "Workflows:")
		printObjectsIndented(w, wfs, now)
	}
}

// describeCommissioning shows the machine's commissioning checks, one a
// line (their values: get -o yaml).
func describeCommissioning(w io.Writer, c *model.Commissioning, now time.Time) {
	result := c.Result
	if result == "" {
		result = "running"
	}
	fmt.Fprintf(w, "Commissioning: %s, by workflow %s", result, orDash(c.Workflow))
	if c.UpdatedAt != nil {
		fmt.Fprintf(w, ", %s ago", humanAge(c.UpdatedAt, now))
	}
	fmt.Fprintln(w)
	if c.Message != "" {
		fmt.Fprintf(w, "  %s\n", c.Message)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CHECK\tRESULT\tDETAIL")
	for _, ch := range c.Checks {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", ch.Name, ch.Result, orDash(ch.Detail))
	}
	tw.Flush()
}

func printObjectsIndented(w io.Writer, objs []model.Object, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  "+strings.Join(tableHeader(model.KindWorkflow, false), "\t"))
	for _, o := range objs {
		fmt.Fprintln(tw, "  "+strings.Join(tableRow(o, false, now), "\t"))
	}
	tw.Flush()
}

func describeBootProfile(w io.Writer, x *model.BootProfile, refs []model.Object, now time.Time) {
	describeMeta(w, &x.ObjectMeta, now)
	s := &x.Spec
	if len(s.Selector) == 0 {
		fmt.Fprintln(w, "Selector:    - (only Hardware naming it in spec.bootProfileRef)")
	} else {
		fmt.Fprintln(w, "Selector:    (any of)")
		for _, t := range s.Selector {
			fmt.Fprintf(w, "  %s\n", t)
		}
	}
	fmt.Fprintf(w, "Priority:    %d\nKernel:      %s\n", s.Priority, s.Kernel)
	for i, u := range s.Initrds {
		fmt.Fprintf(w, "Initrd %d:    %s\n", i, u)
	}
	if len(s.KernelArgs) > 0 {
		fmt.Fprintln(w, "Kernel args:")
		for _, a := range s.KernelArgs {
			fmt.Fprintf(w, "  %s\n", a)
		}
	}
	if len(s.Configs) > 0 {
		fmt.Fprintln(w, "Configs:")
		names := make([]string, 0, len(s.Configs))
		for n := range s.Configs {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			c := s.Configs[n]
			fmt.Fprintf(w, "  %s (%s, %d bytes of template)\n", n, c.Format, len(c.Template))
		}
	}
	names := make([]string, 0, len(refs))
	for _, r := range refs {
		names = append(names, r.GetObjectMeta().Name)
	}
	fmt.Fprintf(w, "Hardware naming it (spec.bootProfileRef): %s\n", orDash(strings.Join(names, ", ")))
}

// kindAndName splits "kind/name" (one argument) or "kind name" (two).
func kindAndName(args []string) (string, string, error) {
	if len(args) == 2 {
		return args[0], args[1], nil
	}
	k, n, ok := strings.Cut(args[0], "/")
	if !ok || k == "" || n == "" {
		return "", "", fmt.Errorf("%q: want KIND NAME or KIND/NAME, e.g. job/power-on-node07", args[0])
	}
	return k, n, nil
}

func describeMachine(w io.Writer, x *model.Machine, now time.Time) {
	describeMeta(w, &x.ObjectMeta, now)
	c := x.Spec.Connection
	port := c.Port
	if port == 0 {
		port = model.DefaultIPMIPort
	}
	secretNS := c.AuthSecretRef.Namespace
	if secretNS == "" {
		secretNS = x.Namespace
	}
	fmt.Fprintf(w, "BMC:         %s:%d\nCredentials: Secret %s/%s\nPower:       %s\n", c.Host, port, secretNS, c.AuthSecretRef.Name, orDash(x.Status.PowerState))
	if o := c.ProviderOptions; o != nil && len(o.PreferredOrder) > 0 {
		fmt.Fprintf(w, "Providers:   %s\n", strings.Join(o.PreferredOrder, ", "))
	}
	if o := c.ProviderOptions; o != nil && o.Redfish != nil {
		// What the Machine says; the Redfish provider's defaults (port
		// 443, the only system) are in docs/bmc.md.
		var parts []string
		if r := o.Redfish; r.Port != 0 {
			parts = append(parts, fmt.Sprintf("port %d", r.Port))
		}
		if r := o.Redfish; r.SystemName != "" {
			parts = append(parts, fmt.Sprintf("system %q", r.SystemName))
		}
		if o.Redfish.UseBasicAuth {
			parts = append(parts, "basic auth")
		}
		if len(parts) > 0 {
			fmt.Fprintf(w, "Redfish:     %s\n", strings.Join(parts, ", "))
		}
	}
	if o := c.ProviderOptions; o != nil && o.IntelAMT != nil && (o.IntelAMT.Port != 0 || o.IntelAMT.HostScheme != "") {
		// What the Machine says; the defaults (http, 16992) are in
		// docs/bmc.md.
		var parts []string
		if a := o.IntelAMT; a.Port != 0 {
			parts = append(parts, fmt.Sprintf("port %d", a.Port))
		}
		if a := o.IntelAMT; a.HostScheme != "" {
			parts = append(parts, a.HostScheme)
		}
		fmt.Fprintf(w, "Intel AMT:   %s\n", strings.Join(parts, ", "))
	}
	if len(x.Status.Conditions) > 0 {
		fmt.Fprintln(w, "Conditions:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  TYPE\tSTATUS\tSINCE\tMESSAGE")
		for _, c := range x.Status.Conditions {
			since := "-"
			if c.LastUpdateTime != nil {
				since = c.LastUpdateTime.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", c.Type, c.Status, since, orDash(c.Message))
		}
		tw.Flush()
	}
}

func describeBMCJob(w io.Writer, x *model.Job, tasks []model.Object, now time.Time) {
	describeMeta(w, &x.ObjectMeta, now)
	mns := x.Spec.MachineRef.Namespace
	if mns == "" {
		mns = x.Namespace
	}
	fmt.Fprintf(w, "Machine:     %s/%s\nState:       %s\n", mns, x.Spec.MachineRef.Name, bmcState(x.Status.Conditions))
	byName := map[string]*model.BMCTask{}
	for _, o := range tasks {
		t := o.(*model.BMCTask)
		byName[t.Name] = t
	}
	fmt.Fprintln(w, "Tasks:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tACTION\tSTATE\tDURATION\tMESSAGE")
	for i, a := range x.Spec.Tasks {
		state, dur, msg := "Pending", "-", "-"
		if t := byName[model.TaskName(x.Name, i)]; t != nil {
			state = bmcState(t.Status.Conditions)
			if t.Status.StartTime != nil && t.Status.CompletionTime != nil {
				dur = t.Status.CompletionTime.Sub(*t.Status.StartTime).Round(time.Millisecond).String()
			}
			for _, c := range t.Status.Conditions {
				if c.Message != "" {
					msg = c.Message
				}
			}
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\n", i, a.Describe(), state, dur, msg)
	}
	tw.Flush()
	describeBMCStatus(w, x.Status.Conditions, x.Status.StartTime, x.Status.CompletionTime)
}

// describeBMCStatus writes Rufio's times and conditions of a Job or Task.
func describeBMCStatus(w io.Writer, conds []model.JobCondition, start, done *time.Time) {
	if start != nil {
		fmt.Fprintf(w, "Started:     %s\n", start.Format(time.RFC3339))
	}
	if done != nil {
		fmt.Fprintf(w, "Completed:   %s\n", done.Format(time.RFC3339))
	}
	if len(conds) > 0 {
		fmt.Fprintln(w, "Conditions:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  TYPE\tSTATUS\tMESSAGE")
		for _, c := range conds {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Type, c.Status, orDash(c.Message))
		}
		tw.Flush()
	}
}
