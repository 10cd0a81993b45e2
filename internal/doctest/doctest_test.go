package doctest

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
)

const guide = "# A guide\n\n" +
	"Start it:\n\n" +
	"<!-- doctest: background ready=http://127.0.0.1:7080/readyz -->\n" +
	"```sh\nanvil serve --bind 127.0.0.1\n```\n\n" +
	"<!-- doctest: file lab.yaml -->\n" +
	"```yaml\nall: {}\n```\n\n" +
	"1. A list item:\n\n" +
	"   <!-- doctest: run exit=1 -->\n" +
	"   ```sh\n   anvil apply -f broken.yaml\n     indented\n   ```\n" +
	"   <!-- doctest: output lines normalize=\"[a-z0-9]{6}\\.[a-z0-9]{16}\" -->\n" +
	"   ```\n   error\n   ```\n\n" +
	"<!-- doctest: skip it downloads from the internet -->\n" +
	"~~~~sh\ncurl -O https://example.org/x\n```\n~~~~\n\n" +
	"<!-- doctest: console -->\n" +
	"```console\n$ echo a \\\n  b\na b\n$ true\n```\n" +
	"<!-- doctest: background restart -->\n" +
	"```sh\nanvil serve\n```\n" +
	"<!-- doctest: output lines -->\n" +
	"```\nlistening\n```\n"

func TestParse(t *testing.T) {
	blocks, err := Parse(guide)
	if err != nil {
		t.Fatal(err)
	}
	type short struct {
		Kind                Kind
		Restart             bool
		Line                int
		Info, Body          string
		Exit                int
		File, Ready, Reason string
		Lines               bool
		Normalize           int
	}
	var got []short
	for _, b := range blocks {
		got = append(got, short{b.Kind, b.Restart, b.Line, b.Info, b.Body, b.Exit, b.File, b.Ready, b.Reason, b.Lines, len(b.Normalize)})
	}
	want := []short{
		{Kind: Background, Line: 6, Info: "sh", Body: "anvil serve --bind 127.0.0.1\n", Ready: "http://127.0.0.1:7080/readyz"},
		{Kind: File, Line: 11, Info: "yaml", Body: "all: {}\n", File: "lab.yaml"},
		{Kind: Run, Line: 18, Info: "sh", Body: "anvil apply -f broken.yaml\n  indented\n", Exit: 1},
		{Kind: Output, Line: 23, Body: "error\n", Lines: true, Normalize: 1},
		{Kind: Skip, Line: 28, Info: "sh", Body: "curl -O https://example.org/x\n```\n", Reason: "it downloads from the internet"},
		{Kind: Console, Line: 34, Info: "console", Body: "$ echo a \\\n  b\na b\n$ true\n"},
		{Kind: Background, Restart: true, Line: 41, Info: "sh", Body: "anvil serve\n"},
		{Kind: Output, Line: 45, Body: "listening\n", Lines: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse =\n%+v\nwant\n%+v", got, want)
	}
	steps := blocks[5].Steps()
	wantSteps := []Step{{Line: 35, Command: "echo a \\\n  b", Want: "a b\n"}, {Line: 38, Command: "true"}}
	if !reflect.DeepEqual(steps, wantSteps) {
		t.Errorf("Steps = %+v; want %+v", steps, wantSteps)
	}
}

func TestParseNoDirectives(t *testing.T) {
	blocks, err := Parse("# Reference\n\n```sh\nanything\n```\n")
	if err != nil || blocks != nil {
		t.Errorf("Parse of a page without directives = %v, %v; want nothing", blocks, err)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"unmarked block", "<!-- doctest: run -->\n```sh\nx\n```\n\n```sh\ny\n```\n", "line 6: fenced block without a doctest directive"},
		{"directive then text", "<!-- doctest: run -->\ntext\n```sh\nx\n```\n", "line 1: directive not followed by a fenced block"},
		{"directive at the end", "<!-- doctest: run -->\n", "line 1: directive not followed by a fenced block"},
		{"two directives", "<!-- doctest: run -->\n<!-- doctest: skip why -->\n```sh\nx\n```\n", "line 1: directive not followed by a fenced block"},
		{"unknown kind", "<!-- doctest: runn -->\n```sh\nx\n```\n", `line 1: unknown doctest directive "runn"`},
		{"skip without reason", "<!-- doctest: skip -->\n```sh\nx\n```\n", "line 1: skip needs a reason"},
		{"file without name", "<!-- doctest: file -->\n```sh\nx\n```\n", "line 1: file needs a name"},
		{"bad exit", "<!-- doctest: run exit=x -->\n```sh\nx\n```\n", "line 1: exit=x: want a status"},
		{"bad argument", "<!-- doctest: run ready=x -->\n```sh\nx\n```\n", `line 1: run: unexpected argument "ready=x"`},
		{"bad regexp", "<!-- doctest: console normalize=\"(\" -->\n```sh\nx\n```\n", "line 1: normalize: error parsing regexp"},
		{"unterminated quote", "<!-- doctest: console normalize=\"( -->\n```sh\nx\n```\n", "line 1: unterminated quote"},
		{"output first", "<!-- doctest: output -->\n```\nx\n```\n", "line 2: output block with no run or background block right before it"},
		{"log without a server", "<!-- doctest: run -->\n```sh\nx\n```\n<!-- doctest: output log -->\n```\nx\n```\n", "line 6: output log with no background block before it"},
		{"not closed", "<!-- doctest: run -->\n```sh\nx\n", "line 2: fenced block not closed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse(%q) error = %v; want %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestCompare(t *testing.T) {
	token := regexp.MustCompile(`[a-z0-9]{6}\.[a-z0-9]{16}`)
	tests := []struct {
		name      string
		got, want string
		lines     bool
		extra     []*regexp.Regexp
		ok        bool
	}{
		{name: "equal", got: "a\nb\n", want: "a\nb", ok: true},
		{name: "differs", got: "a\nb\n", want: "a\nc", ok: false},
		{name: "table re-aligned", got: "NAME     AGE\nnode-10  3s\n", want: "NAME    AGE\nnode-10 0s", ok: true},
		{name: "times and uuids", got: "created 2026-11-25T09:31:42.802909404Z uid f0445ae2-b6ff-4819-b8d2-2db531aac56e at 09:31:42.802\n",
			want: "created 2026-11-23T12:12:35Z uid 11111111-2222-3333-4444-555555555555 at 05:03:38.939", ok: true},
		{name: "http date", got: "Date: Tue, 25 Nov 2026 09:00:00 GMT", want: "Date: Mon, 23 Nov 2026 12:12:42 GMT", ok: true},
		{name: "a MAC is not a clock", got: "52:54:00:00:00:02", want: "52:54:00:00:00:01", ok: false},
		{name: "durations", got: "SUCCESS in 1m2.5s", want: "SUCCESS in 523ms", ok: true},
		{name: "extra", got: "--token abcdef.0123456789abcdef", want: "--token 19yvq5.6iojsz14w4gv155y", extra: []*regexp.Regexp{token}, ok: true},
		{name: "extra needed", got: "--token abcdef.0123456789abcdef", want: "--token 19yvq5.6iojsz14w4gv155y", ok: false},
		{name: "lines in order", got: "a\nx\nb\nc\n", want: "a\n…\nc", lines: true, ok: true},
		{name: "lines out of order", got: "a\nb\nc\n", want: "c\na", lines: true, ok: false},
		{name: "lines missing", got: "a\nb\n", want: "a\nd", lines: true, ok: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			diff := Compare(tc.got, tc.want, tc.lines, tc.extra)
			if (diff == "") != tc.ok {
				t.Errorf("Compare(%q, %q) = %q; want ok=%v", tc.got, tc.want, diff, tc.ok)
			}
		})
	}
}
