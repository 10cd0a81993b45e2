// Package tmplbudget runs Go text/templates written by users (workflow
// Templates, boot profile configs and kernel arguments) under a budget, so
// that no template can spin a core, exhaust memory or outlive the request
// or workflow it renders for. It is the one place that decides those
// bounds; every renderer in Anvil parses and executes through it.
//
// text/template cannot be interrupted from outside, and a loop whose body
// writes nothing escapes any output limit, so the bounds are put inside the
// template: Parse walks the parsed tree (with internal/tmplwalk) and puts a
// call at the start of every range body and at the start and end of every
// template body. That call fails — and text/template stops at a function's
// error — once the context is done (deleted workflow, shutdown, finished
// request), the time budget is spent, the range iterations and template
// calls exceed the step budget, or template calls nest deeper than the
// depth budget. Every function call checks the same before it runs (a row
// of slow calls has no range between them) and is held to the value budget
// (funcs.go), and the output goes to a writer that fails past the output
// budget. Execution is synchronous: when Execute returns, nothing of the
// template is left running.
//
// It owns no data and no function of its own beyond the bounded versions of
// Sprig's and text/template's; what a template means and what it is executed
// with is the caller's business.
package tmplbudget

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/anvilproj/anvil/internal/tmplwalk"
)

// Budget bounds one execution of a template. The zero value of each field
// means its default.
type Budget struct {
	// Time bounds the execution's wall time. If 0, uses DefaultTime.
	Time time.Duration
	// Output bounds the bytes written. If 0, uses DefaultOutput.
	Output int
	// Steps bounds the range iterations plus template calls, over the
	// whole execution (nested ranges count together). If 0, uses
	// DefaultSteps.
	Steps int
	// Depth bounds how deeply template calls ({{ template "x" }}) nest.
	// If 0, uses DefaultDepth.
	Depth int
}

// Defaults of Budget's fields.
const (
	// DefaultTime is long enough for any template that does real work
	// (a few ms each) and short enough that a runaway one is cut before
	// anyone waits on it.
	DefaultTime = 5 * time.Second
	// DefaultOutput is 4 MiB, the largest config Anvil serves.
	DefaultOutput = 4 << 20
	// DefaultSteps allows a range over every element of any realistic
	// inventory many times over.
	DefaultSteps = 100000
	// DefaultDepth is far beyond any real use of {{ template }}, and far
	// short of text/template's own limit (100000), whose stack use alone
	// is a problem.
	DefaultDepth = 100
)

func (b Budget) withDefaults() Budget {
	if b.Time <= 0 {
		b.Time = DefaultTime
	}
	if b.Output <= 0 {
		b.Output = DefaultOutput
	}
	if b.Steps <= 0 {
		b.Steps = DefaultSteps
	}
	if b.Depth <= 0 {
		b.Depth = DefaultDepth
	}
	return b
}

// Limits a budget has, as ExceededError.Limit names them.
const (
	LimitTime   = "time"
	LimitOutput = "output"
	LimitSteps  = "steps"
	LimitDepth  = "depth"
	LimitValue  = "value"
)

// ErrExceeded matches (errors.Is) every *ExceededError.
var ErrExceeded = errors.New("template budget exceeded")

// ExceededError is a template that went over one limit of its budget.
type ExceededError struct {
	// Limit is one of LimitTime, LimitOutput, LimitSteps, LimitDepth,
	// LimitValue.
	Limit string
	// Detail says what went over and by how much.
	Detail string
}

func (e *ExceededError) Error() string {
	return fmt.Sprintf("template exceeded its %s budget: %s", e.Limit, e.Detail)
}

// Is makes errors.Is(err, ErrExceeded) true.
func (e *ExceededError) Is(target error) bool { return target == ErrExceeded }

// Metrics, on the Prometheus default registry.
var (
	inProgress = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "anvil_template_renders_in_progress",
		Help: "Template executions (workflow Templates, boot profile configs and kernel arguments) running now.",
	})
	exceeded = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_template_budget_exceeded_total",
		Help: "Template executions and parses stopped by a budget limit: time, output, steps, depth or value.",
	}, []string{"limit"})
)

func init() {
	for _, l := range []string{LimitTime, LimitOutput, LimitSteps, LimitDepth, LimitValue} {
		exceeded.WithLabelValues(l) // every series from the start, at 0
	}
}

// count records err's budget limit, if it is one, and returns err.
func count(err error) error {
	var e *ExceededError
	if errors.As(err, &e) {
		exceeded.WithLabelValues(e.Limit).Inc()
	}
	return err
}

// The functions Parse inserts. The names show in text/template's error
// location ("at <anvil_range_step>"), so they say what they are.
const (
	stepFunc  = "anvil_range_step"
	enterFunc = "anvil_template_enter"
	leaveFunc = "anvil_template_leave"
)

// Options are what Parse needs besides the source.
type Options struct {
	// Budget bounds every execution of the template.
	Budget Budget
	// Sprig adds Sprig's hermetic function set, with its size-taking
	// functions bounded (see funcs.go).
	Sprig bool
	// Funcs are the caller's own functions, added last (so they replace
	// Sprig's of the same name). They are held to the value budget like
	// every other function.
	Funcs template.FuncMap
}

// Template is a parsed, instrumented template. It is safe for concurrent
// use: each Execute runs on its own copy.
type Template struct {
	t      *template.Template
	budget Budget
	// funcs are the functions the template calls (of those Parse was
	// given), unchecked: Execute binds each to its run.
	funcs map[string]any
}

// Parse parses src as the template name (missing map keys are errors),
// refuses a range over an integer literal larger than the step budget (it
// could never finish), and instruments every range and template body. An
// error reads like text/template's own: "template: NAME:LINE:COL: …".
func Parse(name, src string, o Options) (*Template, error) {
	b := o.Budget.withDefaults()
	funcs := template.FuncMap{}
	for k, v := range builtins {
		funcs[k] = v
	}
	if o.Sprig {
		for k, v := range sprigFuncs() {
			funcs[k] = v
		}
	}
	for k, v := range o.Funcs {
		funcs[k] = v
	}
	// Placeholders until Execute binds the real ones: executing the
	// template another way must fail, not run unbounded.
	unbound := func() (string, error) { return "", errors.New("template executed outside tmplbudget") }
	funcs[stepFunc], funcs[enterFunc], funcs[leaveFunc] = unbound, unbound, unbound

	t, err := template.New(name).Option("missingkey=error").Funcs(funcs).Parse(src)
	if err != nil {
		return nil, err
	}
	used := map[string]any{}
	for _, tt := range t.Templates() {
		if tt.Tree == nil || tt.Root == nil {
			continue
		}
		if err := CheckRanges(tt.Tree, b); err != nil {
			return nil, count(err)
		}
		tmplwalk.Walk(tt.Root, func(n parse.Node) bool {
			if id, ok := n.(*parse.IdentifierNode); ok && funcs[id.Ident] != nil {
				used[id.Ident] = funcs[id.Ident]
			}
			return true
		})
		instrument(tt.Tree)
	}
	return &Template{t: t, budget: b, funcs: used}, nil
}

// CheckRanges refuses {{ range N }} over an integer literal beyond b's
// step budget: such a range could never finish. Parse runs it; a caller
// that only parses (to validate at apply time, without the functions) runs
// it on its own tree, with the Budget its renderer uses.
func CheckRanges(tree *parse.Tree, b Budget) error {
	b = b.withDefaults()
	var err error
	tmplwalk.Walk(tree.Root, func(n parse.Node) bool {
		if err != nil {
			return false
		}
		r, ok := n.(*parse.RangeNode)
		if !ok || r.Pipe == nil || len(r.Pipe.Cmds) != 1 || len(r.Pipe.Cmds[0].Args) != 1 {
			return true
		}
		if num, ok := r.Pipe.Cmds[0].Args[0].(*parse.NumberNode); ok && num.IsInt && num.Int64 > int64(b.Steps) {
			loc, _ := tree.ErrorContext(r)
			err = fmt.Errorf("template: %s: %w", loc, &ExceededError{Limit: LimitSteps,
				Detail: fmt.Sprintf("range over %s is more than the %d steps (range iterations and template calls) a template may take", num.Text, b.Steps)})
			return false
		}
		return true
	})
	return err
}

// instrument puts a step call at the start of every range body and enter
// and leave calls around the template's body. The new nodes carry the
// position of the node they guard, so an error points at the range or
// template in the user's source.
func instrument(tree *parse.Tree) {
	tmplwalk.Walk(tree.Root, func(n parse.Node) bool {
		if r, ok := n.(*parse.RangeNode); ok && r.List != nil {
			r.List.Nodes = append([]parse.Node{call(stepFunc, r.Pos, r.Line)}, r.List.Nodes...)
		}
		return true
	})
	root := tree.Root
	nodes := make([]parse.Node, 0, len(root.Nodes)+2)
	nodes = append(nodes, call(enterFunc, root.Pos, 0))
	nodes = append(nodes, root.Nodes...)
	root.Nodes = append(nodes, call(leaveFunc, root.Pos, 0))
}

// call returns the node {{ fn }}. Its tree is left nil: text/template then
// reports errors against the executing template's text, where pos is.
func call(fn string, pos parse.Pos, line int) parse.Node {
	return &parse.ActionNode{NodeType: parse.NodeAction, Pos: pos, Line: line,
		Pipe: &parse.PipeNode{NodeType: parse.NodePipe, Pos: pos, Line: line,
			Cmds: []*parse.CommandNode{{NodeType: parse.NodeCommand, Pos: pos,
				Args: []parse.Node{&parse.IdentifierNode{NodeType: parse.NodeIdentifier, Pos: pos, Ident: fn}}}}}}
}

// Execute runs the template with data and returns what it wrote. It stops
// with an *ExceededError when a budget limit is reached, and with ctx's
// error (wrapped) when ctx ends first. It returns only when the execution
// has stopped.
func (t *Template) Execute(ctx context.Context, data any) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("template not executed: %w", context.Cause(ctx))
	}
	tctx, cancel := context.WithTimeout(ctx, t.budget.Time)
	defer cancel()
	r := &run{ctx: tctx, parent: ctx, b: t.budget}
	c, err := t.t.Clone()
	if err != nil {
		return nil, err
	}
	// Each function the template calls is checked, for this run: a call
	// fails once the run must stop (so straight-line calls to a slow
	// function stop too), and its arguments and result are held to the
	// value budget.
	bound := template.FuncMap{stepFunc: r.step, enterFunc: r.enter, leaveFunc: r.leave}
	for name, fn := range t.funcs {
		bound[name] = wrap(name, fn, r.check)
	}
	c.Funcs(bound)
	inProgress.Inc()
	defer inProgress.Dec()
	w := &limitWriter{max: t.budget.Output}
	if err := c.Execute(w, data); err != nil {
		return nil, count(err)
	}
	return w.buf.Bytes(), nil
}

// run is the state of one execution, read and written only by the
// goroutine executing it.
type run struct {
	ctx, parent context.Context
	b           Budget
	steps       int
	depth       int
}

// check fails once the execution must stop: its caller's context ended,
// or its time budget is spent.
func (r *run) check() error {
	if r.ctx.Err() == nil {
		return nil
	}
	if r.parent.Err() != nil {
		return fmt.Errorf("template execution stopped: %w", context.Cause(r.parent))
	}
	return &ExceededError{Limit: LimitTime, Detail: fmt.Sprintf("still running after %v", r.b.Time)}
}

func (r *run) step() (string, error) {
	if err := r.check(); err != nil {
		return "", err
	}
	r.steps++
	if r.steps > r.b.Steps {
		return "", &ExceededError{Limit: LimitSteps,
			Detail: fmt.Sprintf("more than %d steps (range iterations and template calls)", r.b.Steps)}
	}
	return "", nil
}

func (r *run) enter() (string, error) {
	if _, err := r.step(); err != nil {
		return "", err
	}
	r.depth++
	if r.depth > r.b.Depth {
		return "", &ExceededError{Limit: LimitDepth,
			Detail: fmt.Sprintf("template calls nested more than %d deep", r.b.Depth)}
	}
	return "", nil
}

func (r *run) leave() (string, error) {
	r.depth--
	return "", nil
}

// limitWriter keeps what is written and fails past max bytes.
type limitWriter struct {
	buf bytes.Buffer
	max int
}

func (w *limitWriter) Write(p []byte) (int, error) {
	if w.buf.Len()+len(p) > w.max {
		return 0, &ExceededError{Limit: LimitOutput, Detail: fmt.Sprintf("output is more than %d bytes", w.max)}
	}
	return w.buf.Write(p)
}

// templateErrorRE matches text/template's "template: NAME:LINE[:COL]: MSG",
// which Parse's and Execute's errors follow.
var templateErrorRE = regexp.MustCompile(`^template: .*?:(\d+)(?::(\d+))?: (?s)(.*)$`)

// Position returns the line and column (0 when not given) in the template
// name's source that err, from Parse or Execute, points at, and the message
// without that prefix; ok is false when err names no position.
func Position(err error, name string) (line, col int, msg string, ok bool) {
	s := err.Error()
	// Strip the name first so a name with colons does not confuse the match.
	if rest, found := strings.CutPrefix(s, "template: "+name+":"); found {
		s = "template: x:" + rest
	}
	m := templateErrorRE.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, err.Error(), false
	}
	line, _ = strconv.Atoi(m[1])
	col, _ = strconv.Atoi(m[2])
	return line, col, m[3], true
}
