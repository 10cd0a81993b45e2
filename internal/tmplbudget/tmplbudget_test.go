package tmplbudget

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"text/template"
	"time"
)

// executing returns the stacks of goroutines that are inside a template
// execution: after Execute returns there must be none.
func executing() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "text/template.(*state)") {
			out = append(out, g)
		}
	}
	return out
}

func TestOrdinaryTemplatesRender(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"range", `a{{ range 3 }}b{{ end }}c`, "abbbc"},
		{"range with else", `{{ range .Empty }}x{{ else }}none{{ end }}`, "none"},
		{"break and continue", `{{ range $i := 10 }}{{ if eq $i 1 }}{{ continue }}{{ end }}{{ if eq $i 3 }}{{ break }}{{ end }}{{ $i }}{{ end }}`, "02"},
		{"define and template", `{{ define "d" }}<{{ . }}>{{ end }}{{ range .List }}{{ template "d" . }}{{ end }}`, "<x><y>"},
		{"sprig", `{{ repeat 3 "ab" }} {{ until 3 | join "," }} {{ seq 3 }} {{ "a b" | replace " " "-" }} {{ indent 2 "x" }}`, "ababab 0,1,2 1 2 3 a-b   x"},
		{"seq forms", `{{ seq 3 1 }}|{{ seq 2 4 }}|{{ seq 1 2 7 }}|{{ seq 5 -2 1 }}|{{ seq 5 2 1 }}`, "3 2 1|2 3 4|1 3 5 7|5 3 1|"},
		{"untilStep", `{{ untilStep 0 10 3 }} {{ untilStep 5 0 -2 }} {{ untilStep 0 10 -1 }}`, "[0 3 6 9] [5 3 1] []"},
		{"printf", `{{ printf "%05d|%-4s|%.2f|%%|%[1]d" 42 "ab" 3.14159 }}`, "00042|ab  |3.14|%|42"},
		{"regexReplaceAll", `{{ regexReplaceAll "a(x*)b" "-ab-axxb-" "${1}W" }}`, "-W-xxW-"},
	}
	data := map[string]any{"Empty": []string{}, "List": []string{"x", "y"}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tm, err := Parse("t", c.src, Options{Sprig: true})
			if err != nil {
				t.Fatal(err)
			}
			got, err := tm.Execute(context.Background(), data)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("Execute(%q) = %q; want %q", c.src, got, c.want)
			}
		})
	}
}

// TestProbes runs the inputs that spun a core forever (or exhausted
// memory) before templates had a budget: each must stop with an error
// naming the limit it hit, and leave nothing running.
func TestProbes(t *testing.T) {
	huge := map[string]any{"n": 1000000000000, "s": "x"}
	cases := []struct {
		name   string
		src    string
		budget Budget
		limit  string
		where  string // expected in the message: the template's location
	}{
		{name: "range over a huge computed count", src: "ok\n{{ range .n }}{{ end }}", limit: LimitSteps, where: "t:2:"},
		{name: "nested ranges", src: `{{ range 1000 }}{{ range 1000 }}{{ end }}{{ end }}`, budget: Budget{Steps: 5000}, limit: LimitSteps},
		{name: "repeat", src: `{{ repeat 1000000000000 "x" }}`, limit: LimitValue},
		{name: "repeat of a variable in a range", src: `{{ range 1000 }}{{ $_ := repeat 100000000 $.s }}{{ end }}`, limit: LimitValue},
		{name: "until", src: `{{ range until 1000000000000 }}{{ end }}`, limit: LimitValue},
		{name: "untilStep", src: `{{ untilStep 0 1000000000000 1 }}`, limit: LimitValue},
		{name: "untilStep that sprig would overflow", src: `{{ untilStep 0 9223372036854775807 4611686018427387905 | len }}`, limit: ""},
		{name: "seq", src: `{{ seq 1000000000000 }}`, limit: LimitValue},
		{name: "recursive template", src: `{{ define "r" }}{{ template "r" . }}{{ end }}{{ template "r" . }}`, limit: LimitDepth},
		{name: "branching recursion", src: `{{ define "r" }}{{ if lt (len .) 30 }}{{ template "r" (append . 1) }}{{ template "r" (append . 1) }}{{ end }}{{ end }}{{ template "r" list }}`,
			budget: Budget{Steps: 1000}, limit: LimitSteps},
		{name: "doubling a string", src: `{{ $s := "x" }}{{ range 100 }}{{ $s = cat $s $s }}{{ end }}`, limit: LimitValue},
		{name: "doubling a list", src: `{{ $l := list 1 }}{{ range 100 }}{{ $l = concat $l $l }}{{ end }}`, limit: LimitValue},
		{name: "a map set into itself", src: `{{ $d := dict }}{{ $_ := set $d "a" $d }}{{ toJson $d }}`, limit: LimitValue},
		{name: "replace of the empty string", src: `{{ $s := repeat 1000000 "x" }}{{ replace "" $s $s }}`, limit: LimitValue},
		{name: "regexReplaceAll with references", src: `{{ $s := repeat 10000 "x" }}{{ regexReplaceAll "x" $s (repeat 512 "$0") }}`, limit: LimitValue},
		{name: "wrapWith", src: `{{ $s := repeat 1000000 "x" }}{{ wrapWith 1 $s $s }}`, limit: LimitValue},
		{name: "join", src: `{{ join (repeat 1000000 "x") (until 100) }}`, limit: LimitValue},
		{name: "indent", src: `{{ indent 1000000000 "a\nb" }}`, limit: LimitValue},
		{name: "printf width", src: `{{ printf "%0999999d%0999999d%0999999d%0999999d%0999999d" 1 2 3 4 5 }}`, limit: LimitValue},
		{name: "js escaping doubles backslashes", src: `{{ $s := repeat 300000 "\\" }}{{ js (js (js (js $s))) }}`, limit: LimitValue},
		{name: "output", src: `{{ range 100000 }}xxxxxxxxxx{{ end }}`, budget: Budget{Output: 1000}, limit: LimitOutput},
		{name: "time", src: `{{ range .n }}{{ end }}`, budget: Budget{Time: time.Millisecond, Steps: 1 << 62}, limit: LimitTime},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.budget
			if b.Time == 0 {
				// Not the limit under test: a race-instrumented run on a
				// busy machine must not reach it first.
				b.Time = time.Hour
			}
			tm, err := Parse("t", c.src, Options{Sprig: true, Budget: b})
			if err != nil {
				t.Fatal(err)
			}
			out, err := tm.Execute(context.Background(), huge)
			if g := executing(); len(g) > 0 {
				t.Errorf("a template execution is still running after Execute returned:\n%s", strings.Join(g, "\n\n"))
			}
			if c.limit == "" {
				if err != nil {
					t.Fatalf("Execute: %v", err)
				}
				return
			}
			var e *ExceededError
			if !errors.As(err, &e) || e.Limit != c.limit || !errors.Is(err, ErrExceeded) {
				t.Fatalf("Execute = %d bytes, %v; want the %s budget exceeded", len(out), err, c.limit)
			}
			if !strings.Contains(err.Error(), c.limit+" budget") || !strings.Contains(err.Error(), c.where) {
				t.Errorf("error %q does not name the %s budget (and %q)", err, c.limit, c.where)
			}
		})
	}
}

// TestRangeLiteralRefusedAtParse: a range that could never finish is
// refused before any execution, with its line.
func TestRangeLiteralRefusedAtParse(t *testing.T) {
	_, err := Parse("t", "a\nb {{ range 1000000000000 }}{{ end }}", Options{})
	var e *ExceededError
	if !errors.As(err, &e) || e.Limit != LimitSteps || !strings.Contains(err.Error(), "template: t:2:") ||
		!strings.Contains(err.Error(), "1000000000000") {
		t.Fatalf("Parse = %v; want the step budget exceeded at t:2, naming the count", err)
	}
	if _, err := Parse("t", `{{ range 100000 }}{{ end }}`, Options{}); err != nil {
		t.Errorf("a range within the budget: %v", err)
	}
}

// TestCancel: an execution stops when its context ends, with the
// context's error, and leaves nothing running.
func TestCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := 0
	tm, err := Parse("t", `{{ range .n }}{{ started }}{{ end }}`, Options{
		Budget: Budget{Steps: 1 << 62, Time: time.Hour},
		Funcs: template.FuncMap{"started": func() string {
			// The caller's context ends while the loop runs (a deleted
			// workflow, a shutdown).
			if started++; started == 3 {
				cancel()
			}
			return ""
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tm.Execute(ctx, map[string]any{"n": 1000000000000})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrExceeded) {
		t.Fatalf("Execute = %v; want context.Canceled", err)
	}
	if started != 3 {
		t.Errorf("the loop ran %d iterations; want it stopped at the first after the cancel (3)", started)
	}
	if g := executing(); len(g) > 0 {
		t.Errorf("still executing:\n%s", strings.Join(g, "\n\n"))
	}
	if _, err := tm.Execute(ctx, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Execute with an ended context = %v; want context.Canceled", err)
	}
}

// TestConcurrentExecute: a Template is shared by concurrent executions,
// each with its own steps.
func TestConcurrentExecute(t *testing.T) {
	tm, err := Parse("t", `{{ range .n }}.{{ end }}`, Options{Budget: Budget{Steps: 10}})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			_, err := tm.Execute(context.Background(), map[string]any{"n": 5 + i%2*10})
			errs <- err
		}()
	}
	var failed int
	for range 8 {
		if err := <-errs; err != nil {
			if !errors.Is(err, ErrExceeded) {
				t.Errorf("Execute: %v", err)
			}
			failed++
		}
	}
	if failed != 4 {
		t.Errorf("%d executions went over 10 steps; want the 4 that ranged over 15", failed)
	}
}

// TestUnboundExecution: the parsed template cannot be run around the
// budget.
func TestUnboundExecution(t *testing.T) {
	tm, err := Parse("t", `{{ range 3 }}x{{ end }}`, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tm.t.Execute(&strings.Builder{}, nil); err == nil || !strings.Contains(err.Error(), "outside tmplbudget") {
		t.Errorf("executing the template directly = %v; want refused", err)
	}
}

// BenchmarkSteps measures a range iteration with its budget check.
func BenchmarkSteps(b *testing.B) {
	tm, err := Parse("t", `{{ range .n }}{{ end }}`, Options{Budget: Budget{Steps: 1 << 62, Time: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := tm.Execute(context.Background(), map[string]any{"n": b.N}); err != nil {
		b.Fatal(err)
	}
}

// TestStraightLineCallsStop: calls in a row with no range between them
// (each maybe slow: a key generated, a large hash) stop once the run must:
// each call checks first.
func TestStraightLineCallsStop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	tm, err := Parse("t", strings.Repeat(`{{ slow }}`, 100), Options{Funcs: template.FuncMap{"slow": func() string {
		if calls++; calls == 2 {
			cancel() // the workflow is deleted while the second call runs
		}
		return ""
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tm.Execute(ctx, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Execute = %v; want context.Canceled", err)
	}
	if calls != 2 {
		t.Errorf("%d calls ran; want the 2 before the cancel was seen", calls)
	}
}
