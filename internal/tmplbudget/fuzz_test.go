package tmplbudget

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzExecute runs arbitrary template sources under a small budget.
// Properties: Parse and Execute never panic; Execute returns (the fuzzer's
// own hang detection is the bound); what it writes is within the output
// budget; an error that names a budget limit is an *ExceededError with a
// known limit; and when it returns no template execution is left running.
func FuzzExecute(f *testing.F) {
	for _, s := range []string{
		// The probes: endless, nested and recursive loops, huge counts.
		`{{ range .n }}{{ end }}`,
		`{{ range 1000 }}{{ range 1000 }}x{{ end }}{{ end }}`,
		`{{ define "r" }}{{ template "r" . }}{{ end }}{{ template "r" . }}`,
		`{{ repeat 1000000000 "x" }}{{ until 100000000 }}{{ seq 1 3 100000000 }}`,
		// Growth: doubling, escaping, widths, replacements.
		`{{ $s := "ab" }}{{ range 40 }}{{ $s = cat $s $s }}{{ end }}{{ len $s }}`,
		`{{ js (js (js (repeat 1000 "\\"))) }}{{ printf "%0900000d" 1 }}`,
		`{{ replace "" "xy" (repeat 5000 "a") }}{{ regexReplaceAll "a" "aaaa" "$0$0$0" }}`,
		// Ordinary use.
		`{{ range $i, $d := .list }}{{ $i }}={{ $d | upper }} {{ else }}none{{ end }}`,
		`{{ with .m }}{{ toJson . }}{{ end }}{{ dict "a" 1 | keys | join "," }}`,
	} {
		f.Add(s)
	}
	data := map[string]any{"n": 1 << 40, "list": []string{"a", "b"}, "m": map[string]any{"k": []any{1, "x"}}}
	b := Budget{Time: 500 * time.Millisecond, Output: 4096, Steps: 2000, Depth: 20}
	f.Fuzz(func(t *testing.T, src string) {
		tm, err := Parse("t", src, Options{Sprig: true, Budget: b})
		if err != nil {
			return
		}
		out, err := tm.Execute(context.Background(), data)
		if len(out) > b.Output {
			t.Fatalf("Execute(%q) wrote %d bytes; the budget is %d", src, len(out), b.Output)
		}
		if err != nil && out != nil {
			t.Fatalf("Execute(%q) returned %d bytes with error %v", src, len(out), err)
		}
		var e *ExceededError
		if errors.As(err, &e) {
			switch e.Limit {
			case LimitTime, LimitOutput, LimitSteps, LimitDepth, LimitValue:
			default:
				t.Fatalf("Execute(%q): unknown limit %q in %v", src, e.Limit, err)
			}
		} else if err != nil && strings.Contains(err.Error(), "budget") && !strings.Contains(src, "budget") {
			t.Fatalf("Execute(%q) = %v: names a budget but is not an *ExceededError", src, err)
		}
		if g := executing(); len(g) > 0 {
			t.Fatalf("Execute(%q) returned with a template still executing:\n%s", src, strings.Join(g, "\n\n"))
		}
	})
}
