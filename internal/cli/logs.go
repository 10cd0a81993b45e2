package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
)

// followInterval is how often `logs -f` asks for new lines.
var followInterval = time.Second

// Time formats of the first column: the time of day for today's lines, the
// date as well for anything older.
const (
	timeOfDay = "15:04:05.000"
	dateTime  = "2006-01-02 15:04:05.000"
)

type logsOptions struct {
	namespace string
	tail      int
	agent     bool
	mac, ip   string
	unknown   bool
	follow    bool
}

func newLogsCmd() *cobra.Command {
	var o logsOptions
	cmd := &cobra.Command{
		Use:   "logs [workflow/|hardware/]NAME | --mac MAC | --ip IP | --unknown",
		Short: "Show a workflow's agent output, or a machine's record: what DHCP, TFTP, HTTP boot, syslog and its agent did",
		Long: `Show the lines kept for a workflow or a machine.

A NAME is a workflow if one has that name, else a Hardware; say which with
workflow/NAME or hardware/NAME. A workflow shows what its agents streamed.
A Hardware shows its machine record — every DHCP, TFTP, HTTP boot and syslog
event about it, and what its MACs did before the Hardware existed —
interleaved by time with its agent's lines; the second column says where
each line comes from.

A machine no Hardware describes is recorded under its MAC (or its IP when
only that was seen): --unknown lists them, --mac or --ip shows one.`,
		Example: `  anvil logs rack1-node07-install           # a workflow
  anvil logs rack1-node07 -f                 # a Hardware, following new lines
  anvil logs hardware/rack1-node07 --tail 20
  anvil logs --unknown                       # machines that tried to boot unknown
  anvil logs --mac 3c:ec:ef:12:34:99
  anvil logs --agent 3c:ec:ef:12:34:07 --tail 50`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runLogs(cmd, o, args)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.namespace, "namespace", "n", model.DefaultNamespace, "namespace of the workflow or hardware")
	f.IntVar(&o.tail, "tail", 0, "only the newest N lines (0: all that are kept)")
	f.BoolVar(&o.agent, "agent", false, "the argument is an agent ID (usually a MAC), not a workflow")
	f.StringVar(&o.mac, "mac", "", "the machine with this MAC address, known or not")
	f.StringVar(&o.ip, "ip", "", "the machine at this IP address, known or not")
	f.BoolVar(&o.unknown, "unknown", false, "list the machines no Hardware describes that tried to boot, with their last line")
	f.BoolVarP(&o.follow, "follow", "f", false, "keep printing new lines until interrupted")
	return cmd
}

func runLogs(cmd *cobra.Command, o logsOptions, args []string) error {
	c, err := newClients(cmd)
	if err != nil {
		return err
	}
	given := 0
	for _, set := range []bool{len(args) == 1, o.mac != "", o.ip != "", o.unknown} {
		if set {
			given++
		}
	}
	switch {
	case given != 1:
		return errors.New("name a workflow or a hardware, or give one of --mac, --ip or --unknown")
	case o.agent && len(args) == 0:
		return errors.New("--agent needs the agent ID as argument")
	case o.tail < 0:
		return fmt.Errorf("--tail %d: want 0 (all) or more", o.tail)
	case o.unknown:
		if o.follow {
			return errors.New("--unknown lists machines; it cannot --follow")
		}
		return listUnknown(cmd, c, o.tail)
	}

	req := &v1.GetLogsRequest{Tail: int32(o.tail)}
	machine := true // a machine's view: a source column
	switch {
	case o.mac != "":
		req.Mac = o.mac
	case o.ip != "":
		req.Ip = o.ip
	case o.agent:
		req.AgentId, machine = args[0], false
	default:
		kind, name, err := c.logTarget(ctx(cmd), o.namespace, args[0])
		if err != nil {
			return err
		}
		if kind == model.KindWorkflow {
			req.WorkflowId, machine = o.namespace+"/"+name, false
		} else {
			req.Hardware, req.Namespace = name, o.namespace
		}
	}
	resp, err := c.logs.GetLogs(ctx(cmd), connect.NewRequest(req))
	if err != nil {
		return c.explain(err)
	}
	warnUnanswered(cmd.ErrOrStderr(), resp.Header())
	lines := resp.Msg.GetLines()
	if hw := resp.Msg.GetHardware(); hw != "" && req.Hardware == "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "%s%s is hardware %s\n", o.mac, o.ip, hw)
	}
	p := &logPrinter{w: cmd.OutOrStdout(), machine: machine, format: timeFormat(lines, time.Now())}
	p.print(lines)
	if !o.follow {
		if len(lines) == 0 {
			fmt.Fprintln(cmd.ErrOrStderr(), "No lines recorded.")
		}
		return nil
	}
	return followLogs(ctx(cmd), c, req, p, lines)
}

// logTarget resolves a logs argument to a workflow or a Hardware: an
// explicit "kind/name", else the workflow of that name if there is one,
// else the Hardware.
func (c *clients) logTarget(ctx context.Context, ns, arg string) (kind, name string, err error) {
	if k, n, ok := strings.Cut(arg, "/"); ok {
		kind, err := model.ParseKind(k)
		if err != nil {
			return "", "", err
		}
		switch kind {
		case model.KindTemplate:
			return "", "", errors.New("templates have no logs; name a workflow or a hardware")
		case model.KindBootProfile:
			return "", "", errors.New("boot profiles have no logs; name a workflow or a hardware")
		case model.KindWorkflow, model.KindHardware:
		default:
			return "", "", fmt.Errorf("%s objects have no logs; name a workflow or a hardware (a BMC job's progress is in `anvil describe job NAME`)", strings.ToLower(kind))
		}
		return kind, n, nil
	}
	get := connect.NewRequest(&v1.GetRequest{Namespace: ns, Name: arg})
	_, err = c.workflows.Get(ctx, get)
	if err == nil {
		return model.KindWorkflow, arg, nil
	}
	if connect.CodeOf(err) != connect.CodeNotFound {
		return "", "", c.explain(err)
	}
	_, err = c.hardware.Get(ctx, connect.NewRequest(&v1.GetRequest{Namespace: ns, Name: arg}))
	if err == nil {
		return model.KindHardware, arg, nil
	}
	if connect.CodeOf(err) != connect.CodeNotFound {
		return "", "", c.explain(err)
	}
	return "", "", fmt.Errorf("no workflow or hardware named %q in namespace %q", arg, ns)
}

// followLogs polls for lines newer than those printed until ctx ends. A
// line whose time is older than the newest printed (an agent with a late
// clock) is not shown.
func followLogs(ctx context.Context, c *clients, req *v1.GetLogsRequest, p *logPrinter, printed []*v1.LogLine) error {
	var cur logCursor
	cur.advance(printed)
	t := time.NewTicker(followInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		next := proto.CloneOf(req)
		next.Tail = 0
		if !cur.last.IsZero() {
			next.Since = timestamppb.New(cur.last)
		}
		resp, err := c.logs.GetLogs(ctx, connect.NewRequest(next))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return c.explain(err)
		}
		fresh := cur.fresh(resp.Msg.GetLines())
		cur.advance(fresh)
		p.print(fresh)
	}
}

// logCursor remembers the newest time printed and how many times each line
// with exactly that time was printed, since a poll "since" that time
// returns them again.
type logCursor struct {
	last time.Time
	seen map[string]int
}

// fresh returns the lines not printed yet.
func (c *logCursor) fresh(lines []*v1.LogLine) []*v1.LogLine {
	var out []*v1.LogLine
	again := map[string]int{}
	for _, l := range lines {
		t := l.GetTime().AsTime()
		if t.Before(c.last) {
			continue
		}
		if t.Equal(c.last) {
			k := lineKey(l)
			again[k]++
			if again[k] <= c.seen[k] {
				continue
			}
		}
		out = append(out, l)
	}
	return out
}

// advance records lines as printed.
func (c *logCursor) advance(lines []*v1.LogLine) {
	for _, l := range lines {
		t := l.GetTime().AsTime()
		switch {
		case t.After(c.last):
			c.last, c.seen = t, map[string]int{lineKey(l): 1}
		case t.Equal(c.last):
			c.seen[lineKey(l)]++
		}
	}
}

func lineKey(l *v1.LogLine) string {
	return strings.Join([]string{l.GetHardware(), l.GetMachine(), l.GetWorkflowId(), l.GetAgentId(),
		l.GetTaskName(), l.GetActionName(), l.GetStream(), l.GetLine()}, "\x00")
}

// logPrinter writes lines: time, then for a workflow the task/action, for
// a machine the source (dhcp, tftp, http, syslog or agent).
type logPrinter struct {
	w       io.Writer
	machine bool
	format  string
}

func (p *logPrinter) print(lines []*v1.LogLine) {
	for _, l := range lines {
		when := l.GetTime().AsTime().Local().Format(p.format)
		step := joinNonEmpty("/", l.GetTaskName(), l.GetActionName())
		switch {
		case !p.machine:
			fmt.Fprintf(p.w, "%s  %-24s %s\n", when, step, l.GetLine())
		case l.GetHardware() != "" || l.GetMachine() != "":
			fmt.Fprintf(p.w, "%s  %-6s  %s\n", when, l.GetStream(), l.GetLine())
		case step != "":
			fmt.Fprintf(p.w, "%s  %-6s  %s  %s\n", when, "agent", step, l.GetLine())
		default:
			fmt.Fprintf(p.w, "%s  %-6s  %s\n", when, "agent", l.GetLine())
		}
	}
}

// timeFormat is the time of day when every line is from today, else the
// date and time.
func timeFormat(lines []*v1.LogLine, now time.Time) string {
	today := now.Local().Format(time.DateOnly)
	for _, l := range lines {
		if l.GetTime().AsTime().Local().Format(time.DateOnly) != today {
			return dateTime
		}
	}
	return timeOfDay
}

// listUnknown prints the unknown machines, most recently heard from first.
func listUnknown(cmd *cobra.Command, c *clients, limit int) error {
	resp, err := c.logs.ListUnknownMachines(ctx(cmd), connect.NewRequest(&v1.ListUnknownMachinesRequest{Limit: int32(limit)}))
	if err != nil {
		return c.explain(err)
	}
	warnUnanswered(cmd.ErrOrStderr(), resp.Header())
	ms := resp.Msg.GetMachines()
	if len(ms) == 0 {
		fmt.Fprintln(cmd.OutOrStdout(), "No unknown machine has tried to boot.")
		return nil
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "MACHINE\tLAST SEEN\tSOURCE\tLAST LINE")
	now := time.Now()
	for _, m := range ms {
		last := m.GetLast()
		seen := last.GetTime().AsTime()
		fmt.Fprintf(tw, "%s\t%s ago\t%s\t%s\n", m.GetMachine(), humanAge(&seen, now), last.GetStream(), last.GetLine())
	}
	return tw.Flush()
}

// warnUnanswered names the replicas (Kubernetes mode) whose part of a
// merged read is missing: they did not answer the replica that was asked.
func warnUnanswered(w io.Writer, h http.Header) {
	for _, u := range h.Values(v1.PeersUnansweredHeader) {
		fmt.Fprintf(w, "warning: not every replica answered, a part may be missing: %s\n", u)
	}
}
