package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/wire"
)

// Exit codes of `anvil workflow watch`, so scripts can tell how a workflow
// ended without parsing output.
const (
	ExitWorkflowFailed    = 3
	ExitWorkflowTimeout   = 4
	ExitWorkflowCancelled = 5
)

func newWorkflowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "workflow",
		Aliases: []string{"wf"},
		Short:   "Work with workflows",
	}
	cmd.AddCommand(newWatchCmd(), newWorkflowCancelCmd())
	return cmd
}

func newWatchCmd() *cobra.Command {
	var sc scope
	cmd := &cobra.Command{
		Use:   "watch NAME",
		Short: "Follow a workflow live, action by action, until it ends",
		Long: `Watch prints each action's state changes and progress as the agent reports
them, then a summary table when the workflow ends. It keeps going through
server restarts. Exit code: 0 SUCCESS, 3 FAILED, 4 TIMEOUT, 5 CANCELLED, 1 on
any other error.`,
		Example: `  anvil workflow watch rack1-node07-install`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClients(cmd)
			if err != nil {
				return err
			}
			return watchWorkflow(cmd, c, sc.namespace, args[0])
		},
	}
	sc.add(cmd, false)
	return cmd
}

// watchWorkflow follows one workflow to its end. A lost connection is
// retried with back-off; the watch resumes from the last version seen.
func watchWorkflow(cmd *cobra.Command, c *clients, ns, name string) error {
	out := cmd.OutOrStdout()
	if _, err := c.ops(model.KindWorkflow).get(ctx(cmd), ns, name); err != nil {
		return c.explain(err)
	}
	v := &workflowView{out: out}
	rv := ""
	backoff := time.Second
	for {
		final, lastRV, err := watchOnce(cmd, c, ns, name, rv, v)
		if final != nil {
			return v.finish(final)
		}
		if lastRV != "" {
			rv = lastRV
		}
		var ce *connect.Error
		switch {
		case ctx(cmd).Err() != nil:
			return ctx(cmd).Err()
		case errors.As(err, &ce) && ce.Code() == connect.CodeOutOfRange:
			rv = "" // too far behind: start again from the current state
		case errors.As(err, &ce) && ce.Code() == connect.CodeNotFound:
			return c.explain(err)
		case err != nil && !isNetError(err) && !(errors.As(err, &ce) && ce.Code() == connect.CodeUnavailable):
			return c.explain(err)
		}
		fmt.Fprintf(out, "%s  connection to %s lost; retrying in %s\n", clock(), c.server, backoff)
		select {
		case <-time.After(backoff):
		case <-ctx(cmd).Done():
			return ctx(cmd).Err()
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// watchOnce runs one Watch stream. It returns the workflow once it is final,
// or the last resource version seen and why the stream ended.
func watchOnce(cmd *cobra.Command, c *clients, ns, name, rv string, v *workflowView) (*model.Workflow, string, error) {
	stream, err := c.workflows.Watch(ctx(cmd), connect.NewRequest(&v1.WatchRequest{
		Namespace: ns, FieldSelector: "metadata.name=" + name, ResourceVersion: rv,
	}))
	if err != nil {
		return nil, "", err
	}
	defer stream.Close()
	last := ""
	for stream.Receive() {
		ev := stream.Msg()
		o, err := wire.Decode(model.KindWorkflow, ev.GetWorkflow())
		if err != nil {
			return nil, last, err
		}
		wf := o.(*model.Workflow)
		last = wf.ResourceVersion
		if ev.GetType() == v1.EventType_EVENT_TYPE_DELETED {
			return nil, last, connect.NewError(connect.CodeNotFound, fmt.Errorf("workflow %s/%s was deleted", ns, name))
		}
		v.update(wf)
		if wf.Status.State.IsFinal() {
			return wf, last, nil
		}
	}
	err = stream.Err()
	if err == nil {
		err = connect.NewError(connect.CodeUnavailable, io.ErrUnexpectedEOF)
	}
	return nil, last, err
}

// workflowView prints what changed between two versions of a workflow.
type workflowView struct {
	out     io.Writer
	state   model.State
	actions map[string]actionSeen
}

type actionSeen struct {
	state   model.State
	attempt int
	bytes   int64
}

func clock() string { return time.Now().Format("15:04:05") }

func (v *workflowView) update(wf *model.Workflow) {
	if v.actions == nil {
		v.actions = map[string]actionSeen{}
	}
	state := wf.Status.State
	if state != v.state {
		msg := ""
		for _, c := range wf.Status.Conditions {
			// Say why a PENDING workflow does not start; the other
			// conditions are for `describe`.
			if c.Type == model.WorkflowConditionWaiting && c.Status == "True" && c.Message != "" {
				msg = " — " + c.Message
			}
		}
		fmt.Fprintf(v.out, "%s  workflow %s/%s %s%s\n", clock(), wf.Namespace, wf.Name, orDash(state), msg)
		v.state = state
	}
	for _, t := range wf.Status.Tasks {
		for _, a := range t.Actions {
			key := t.Name + "/" + a.Name
			seen := actionSeen{state: a.State, attempt: a.Attempt}
			if a.Progress != nil {
				seen.bytes = a.Progress.Bytes
			}
			prev, ok := v.actions[key]
			v.actions[key] = seen
			if ok && prev == seen || !ok && seen.state == model.StatePending && seen.attempt == 0 {
				continue
			}
			detail := ""
			switch {
			case seen.state == model.StateRunning && a.Progress != nil && prev.state == model.StateRunning:
				detail = progressBar(a.Progress) + " " + formatProgress(a.Progress)
			case seen.state == model.StateRunning:
				detail = fmt.Sprintf("attempt %d", a.Attempt)
			case seen.state == model.StateSuccess:
				detail = "in " + actionDuration(&a, time.Now())
			case seen.state == model.StatePending && a.RetryAfter != nil:
				detail = fmt.Sprintf("will retry at %s: %s", a.RetryAfter.Local().Format("15:04:05"), oneLine(a.Message))
			default:
				detail = oneLine(a.Message)
			}
			fmt.Fprintf(v.out, "%s  %-32s %-8s %s\n", clock(), key, seen.state, detail)
		}
	}
}

// progressBar draws a 20-cell bar, or nothing when the total is unknown.
func progressBar(p *model.Progress) string {
	frac := p.Percent / 100
	if p.TotalBytes > 0 {
		frac = float64(p.Bytes) / float64(p.TotalBytes)
	}
	if frac <= 0 {
		return ""
	}
	const cells = 20
	n := min(int(frac*cells+0.5), cells)
	bar := make([]byte, cells)
	for i := range bar {
		bar[i] = '.'
		if i < n {
			bar[i] = '#'
		}
	}
	return "[" + string(bar) + "]"
}

// finish prints the summary and maps the final state to an exit code.
func (v *workflowView) finish(wf *model.Workflow) error {
	fmt.Fprintln(v.out)
	writeActionTable(v.out, wf, time.Now())
	state := wf.Status.State
	fmt.Fprintf(v.out, "\nworkflow %s/%s ended %s after %s\n", wf.Namespace, wf.Name, state, workflowDuration(wf, time.Now()))
	switch state {
	case model.StateSuccess:
		return nil
	case model.StateTimeout:
		return &ExitError{Code: ExitWorkflowTimeout, Err: fmt.Errorf("workflow %s timed out", wf.Name)}
	case model.StateCancelled:
		return &ExitError{Code: ExitWorkflowCancelled, Err: fmt.Errorf("workflow %s was cancelled", wf.Name)}
	}
	return &ExitError{Code: ExitWorkflowFailed, Err: fmt.Errorf("workflow %s %s", wf.Name, state)}
}
