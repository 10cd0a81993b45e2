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
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/wire"
)

func newJobCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "job",
		Short: "Provision devices and follow, list and cancel their jobs",
		Long: `A job is a Workflow started through the JobService, the API an orchestrator
uses: provision a device (by Hardware name, MAC or instance ID) from a
template, follow the job, cancel it. JOB is the ID provision prints
("namespace/name"); a bare name is taken in --namespace.`,
	}
	cmd.AddCommand(newJobProvisionCmd(), newJobStatusCmd(), newJobListCmd(), newJobCancelCmd())
	return cmd
}

// jobID is the job a JOB argument names: "namespace/name" as given, or a
// name in namespace ns.
func jobID(ns, arg string) string {
	if strings.Contains(arg, "/") {
		return arg
	}
	return ns + "/" + arg
}

// checkOutput accepts "" (text) and "json".
func checkOutput(output string) error {
	if output != "" && output != "json" {
		return fmt.Errorf("unknown output format %q (want json)", output)
	}
	return nil
}

// printJSON writes m in the Connect protocol's JSON, one object.
func printJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func newJobProvisionCmd() *cobra.Command {
	var namespace, template, key, output string
	var params []string
	cmd := &cobra.Command{
		Use:   "provision DEVICE --template TEMPLATE",
		Short: "Start a job: a workflow for a device from a template, and netboot allowed",
		Long: `provision starts a job on DEVICE — a Hardware's name, one of its MACs or its
instance ID — from TEMPLATE, and sets allowPXE on the Hardware's interfaces
so that its next network boot runs the job. Each --param key=value is a
top-level name in the template ({{.key}}), as a Workflow's hardwareMap.

With --idempotency-key, a repeated call (a retry after a timeout, a second
run of a script) answers the job the first call created instead of making
another; the same key with other arguments is refused.`,
		Example: `  anvil job provision rack1-node07 --template debian-raw
  anvil job provision 3C-EC-EF-12-34-07 -t debian-raw --param image=http://10.0.0.2/debian.raw.zst \
      --idempotency-key order-4711`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if template == "" {
				return fmt.Errorf("--template is required: the Template the job runs (anvil get templates lists them)")
			}
			if err := checkOutput(output); err != nil {
				return err
			}
			pm := map[string]string{}
			for _, p := range params {
				k, v, ok := strings.Cut(p, "=")
				if !ok || k == "" {
					return fmt.Errorf("--param %q: want key=value", p)
				}
				pm[k] = v
			}
			c, err := newClients(cmd)
			if err != nil {
				return err
			}
			resp, err := c.jobs.ProvisionDevice(ctx(cmd), connect.NewRequest(&v1.ProvisionDeviceRequest{
				DeviceId: args[0], Template: template, Parameters: pm, IdempotencyKey: key, Namespace: namespace,
			}))
			if err != nil {
				return c.explain(err)
			}
			r := resp.Msg
			out := cmd.OutOrStdout()
			if output == "json" {
				return printJSON(out, r)
			}
			for _, w := range r.GetWarnings() {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
			}
			fmt.Fprintf(out, "job %s %s\n", r.GetJobId(), stateName(r.GetStatus()))
			fmt.Fprintln(out, r.GetMessage())
			fmt.Fprintf(out, "follow it: anvil job status %s\n", r.GetJobId())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&namespace, "namespace", "n", model.DefaultNamespace, "namespace of the device, the template and the job")
	f.StringVarP(&template, "template", "t", "", "the Template the job runs (required)")
	f.StringArrayVarP(&params, "param", "p", nil, "template data key=value (repeatable)")
	f.StringVar(&key, "idempotency-key", "", "a retry with the same key answers the same job")
	f.StringVarP(&output, "output", "o", "", "output format: json")
	return cmd
}

func newJobStatusCmd() *cobra.Command {
	var namespace, output string
	cmd := &cobra.Command{
		Use:     "status JOB",
		Short:   "Show a job: its state, the current action and its progress, every action's result",
		Example: `  anvil job status default/rack1-node07-3f9a1c02be`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			c, err := newClients(cmd)
			if err != nil {
				return err
			}
			resp, err := c.jobs.GetJobStatus(ctx(cmd), connect.NewRequest(&v1.GetJobStatusRequest{JobId: jobID(namespace, args[0])}))
			if err != nil {
				return c.explain(err)
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), resp.Msg)
			}
			describeJob(cmd.OutOrStdout(), resp.Msg, time.Now())
			return nil
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", model.DefaultNamespace, "namespace of a JOB given by name")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json")
	return cmd
}

func newJobListCmd() *cobra.Command {
	var namespace, device, state, output string
	var all bool
	var limit int32
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List jobs, newest first",
		Example: `  anvil job list
  anvil job list -A --state running
  anvil job list --device 3c:ec:ef:12:34:07 --limit 5`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			req := &v1.ListJobsRequest{Namespace: namespace, DeviceId: device, Limit: limit}
			if all {
				req.Namespace = ""
			}
			if state != "" {
				s, ok := v1.JobState_value["JOB_STATE_"+strings.ToUpper(state)]
				if !ok || s == 0 {
					return fmt.Errorf("--state %q: want one of %s", state, strings.Join(stateNames(), ", "))
				}
				req.State = v1.JobState(s)
			}
			c, err := newClients(cmd)
			if err != nil {
				return err
			}
			resp, err := c.jobs.ListJobs(ctx(cmd), connect.NewRequest(req))
			if err != nil {
				return c.explain(err)
			}
			out := cmd.OutOrStdout()
			if output == "json" {
				return printJSON(out, resp.Msg)
			}
			jobs := resp.Msg.GetJobs()
			if len(jobs) == 0 {
				fmt.Fprintln(out, "No jobs found.")
				return nil
			}
			now := time.Now()
			tw := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
			fmt.Fprintln(tw, "JOB\tSTATE\tDEVICE\tTEMPLATE\tCURRENT\tAGE")
			for _, j := range jobs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", j.GetJobId(), stateName(j.GetState()), orDash(j.GetDevice()),
					j.GetTemplate(), orDash(currentOf(j)), humanAge(wire.TimeFromProto(j.GetCreated()), now))
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVarP(&namespace, "namespace", "n", model.DefaultNamespace, "namespace")
	f.BoolVarP(&all, "all-namespaces", "A", false, "list across all namespaces")
	f.StringVar(&device, "device", "", "only this device's jobs (name, MAC or instance ID)")
	f.StringVar(&state, "state", "", "only jobs in this state: "+strings.Join(stateNames(), ", "))
	f.Int32Var(&limit, "limit", 0, "at most this many, the newest (0: all)")
	f.StringVarP(&output, "output", "o", "", "output format: json")
	return cmd
}

func newJobCancelCmd() *cobra.Command {
	var o cancelOptions
	cmd := &cobra.Command{
		Use:   "cancel JOB",
		Short: "Cancel a job: at once if it is not running, else after its running action",
		Long: `cancel stops a job. One not yet running is CANCELLED at once. A running one
is CANCELLING: its agent is handed no further action, and the job becomes
CANCELLED when the running action ends (its result is kept). --force does
not wait for that action: for a machine that is gone. The Hardware's
allowPXE is left as it is.`,
		Example: `  anvil job cancel default/rack1-node07-3f9a1c02be --reason "wrong image"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCancel(cmd, jobID(o.namespace, args[0]), o)
		},
	}
	o.add(cmd, "namespace of a JOB given by name")
	return cmd
}

// newWorkflowCancelCmd is `anvil workflow cancel`: CancelJob on a workflow
// named as the other workflow commands name it.
func newWorkflowCancelCmd() *cobra.Command {
	var o cancelOptions
	cmd := &cobra.Command{
		Use:   "cancel NAME",
		Short: "Cancel a workflow: at once if it is not running, else after its running action",
		Long: `cancel is anvil job cancel for a workflow named in --namespace: a workflow not
yet running is CANCELLED at once; a running one after its running action
ends (--force: at once).`,
		Example: `  anvil workflow cancel rack1-node07-install`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCancel(cmd, o.namespace+"/"+args[0], o)
		},
	}
	o.add(cmd, "namespace")
	return cmd
}

type cancelOptions struct {
	namespace, reason string
	force             bool
}

func (o *cancelOptions) add(cmd *cobra.Command, nsUsage string) {
	f := cmd.Flags()
	f.StringVarP(&o.namespace, "namespace", "n", model.DefaultNamespace, nsUsage)
	f.BoolVar(&o.force, "force", false, "do not wait for the running action to end")
	f.StringVar(&o.reason, "reason", "", "why, for the job's history")
}

func runCancel(cmd *cobra.Command, id string, o cancelOptions) error {
	c, err := newClients(cmd)
	if err != nil {
		return err
	}
	resp, err := c.jobs.CancelJob(ctx(cmd), connect.NewRequest(&v1.CancelJobRequest{JobId: id, Force: o.force, Reason: o.reason}))
	if err != nil {
		return c.explain(err)
	}
	j := resp.Msg.GetJob()
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "job %s %s\n", j.GetJobId(), stateName(j.GetState()))
	if m := j.GetMessage(); m != "" {
		fmt.Fprintln(out, m)
	}
	return nil
}

// describeJob prints a job for people.
func describeJob(w io.Writer, j *v1.JobStatus, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("Job", j.GetJobId())
	state := stateName(j.GetState())
	if ws := j.GetWorkflowState(); ws != "" && ws != state {
		state += " (workflow " + ws + ")"
	}
	row("State", state)
	row("Device", orDash(j.GetDevice()))
	row("Template", j.GetTemplate())
	for _, t := range []struct {
		k  string
		ts *timestamppb.Timestamp
	}{{"Created", j.GetCreated()}, {"Started", j.GetStarted()}, {"Cancel requested", j.GetCancelRequested()}, {"Completed", j.GetCompleted()}} {
		if t.ts != nil {
			row(t.k, fmt.Sprintf("%s (%s ago)", t.ts.AsTime().Local().Format(time.DateTime), humanAge(wire.TimeFromProto(t.ts), now)))
		}
	}
	if cur := currentOf(j); cur != "" {
		if p := j.GetProgress(); p != nil {
			cur += "  " + formatProgress(wire.ProgressFromProto(p))
		}
		row("Current", cur)
	}
	if m := j.GetMessage(); m != "" {
		row("Message", oneLine(m))
	}
	if k := j.GetIdempotencyKey(); k != "" {
		row("Idempotency key", k)
	}
	if p := j.GetParameters(); len(p) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(p)) {
			kv = append(kv, k+"="+p[k])
		}
		row("Parameters", strings.Join(kv, " "))
	}
	tw.Flush()
	if len(j.GetActions()) == 0 {
		return
	}
	fmt.Fprintln(w, "Actions:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  TASK\tACTION\tSTATE\tATTEMPT\tDURATION\tMESSAGE")
	for _, a := range j.GetActions() {
		attempt, dur := "-", "-"
		if a.GetAttempt() > 0 {
			attempt = fmt.Sprint(a.GetAttempt())
		}
		switch {
		case a.GetStarted() != nil && a.GetEnded() != nil:
			dur = a.GetEnded().AsTime().Sub(a.GetStarted().AsTime()).Round(10 * time.Millisecond).String()
		case a.GetStarted() != nil:
			dur = now.Sub(a.GetStarted().AsTime()).Round(100*time.Millisecond).String() + "…"
		}
		msg := a.GetMessage()
		if model.ParseState(a.GetState()) == model.StateRunning && a.GetProgress() != nil {
			msg = formatProgress(wire.ProgressFromProto(a.GetProgress()))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", a.GetTask(), a.GetName(), orDash(a.GetState()), attempt, dur, oneLine(msg))
	}
	tw.Flush()
}

// stateName is a JobState without its prefix: "RUNNING".
func stateName(s v1.JobState) string { return strings.TrimPrefix(s.String(), "JOB_STATE_") }

// stateNames lists the JobStates --state accepts, lower case.
func stateNames() []string {
	var out []string
	for i := int32(1); ; i++ {
		name, ok := v1.JobState_name[i]
		if !ok {
			return out
		}
		out = append(out, strings.ToLower(strings.TrimPrefix(name, "JOB_STATE_")))
	}
}

// currentOf is "task/action" of a job's current action, or "".
func currentOf(j *v1.JobStatus) string {
	if j.GetCurrentAction() == "" {
		return ""
	}
	return j.GetCurrentTask() + "/" + j.GetCurrentAction()
}
