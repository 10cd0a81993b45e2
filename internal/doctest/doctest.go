// Package doctest reads the runnable parts of a Markdown guide, so that a
// test can follow the guide as a user would and a guide cannot drift from
// the code. It owns the directive syntax and the comparison of a command's
// output with the output the guide shows; it runs nothing itself (the
// end-to-end test in test/e2e runs the blocks) and touches no server.
//
// Every fenced code block of a tested guide is preceded (as the last
// non-blank line before its fence) by one HTML comment, invisible when the
// Markdown is rendered, that says what the block is:
//
//	<!-- doctest: run -->                  a shell block, run in order; it must exit 0
//	<!-- doctest: run exit=1 -->           … and must exit 1
//	<!-- doctest: background ready=URL --> a shell block started and left running (a server);
//	                                       the next block waits until URL answers 2xx
//	<!-- doctest: background restart -->   … after stopping the last one started (Ctrl-C)
//	<!-- doctest: file NAME -->            the block is a file the guide tells the user to
//	                                       create: it is written to NAME (relative to the
//	                                       working directory, or absolute)
//	<!-- doctest: output -->               the output (stdout and stderr) the previous run
//	                                       block must print, compared after Normalize; after
//	                                       a background block, what it must print (its log
//	                                       is compared until it matches or a time runs out)
//	<!-- doctest: output log -->           what the last background block (the server) has
//	                                       printed, wherever the block is
//	<!-- doctest: output lines -->         … every line of the block must appear in the
//	                                       output, in order, other lines in between allowed
//	<!-- doctest: console -->              a transcript: each "$ command" line (continued by
//	                                       a trailing backslash) is run and must exit 0, and
//	                                       the lines after it are its output, as for output
//	<!-- doctest: skip REASON -->          not run; REASON says why, for the reader of the
//	                                       Markdown source and the test's log
//
// output and console take normalize="REGEXP" (repeatable): what the
// expression matches is replaced by <x> on both sides before comparing,
// for values a guide cannot know (a generated token, a digest). Within
// output lines, a line "…" or "..." stands for lines left out and is not
// compared.
//
// A block without a directive, a directive not followed by a block, and an
// output with no run block before it are errors: a guide under test says
// of every block whether it runs.
package doctest

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Kind is what a fenced block is to the test.
type Kind int

// The kinds of block, one per directive.
const (
	Run Kind = iota + 1
	Background
	File
	Output
	Console
	Skip
)

var kindNames = map[string]Kind{"run": Run, "background": Background, "file": File, "output": Output, "console": Console, "skip": Skip}

// String returns the directive's name.
func (k Kind) String() string {
	for n, v := range kindNames {
		if v == k {
			return n
		}
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Block is one fenced code block of a guide with its directive.
type Block struct {
	Kind Kind
	// Line is the 1-based line of the block's opening fence.
	Line int
	// Info is the fence's info string (sh, yaml, …).
	Info string
	// Body is the block's content, without the fences and without the
	// indentation of the opening fence; it ends with a newline unless empty.
	Body string
	// Exit is the exit status a Run block must end with.
	Exit int
	// File is the path a File block is written to.
	File string
	// Ready is the URL a Background block is ready at ("" for none).
	Ready string
	// Restart reports whether a Background block first stops the last
	// one started.
	Restart bool
	// Lines reports whether an Output or Console block's expected lines
	// need only appear in order ("output lines").
	Lines bool
	// Log reports whether an Output block is compared with the log of the
	// last Background block rather than with the block before it.
	Log bool
	// Normalize are the extra expressions of an Output or Console block.
	Normalize []*regexp.Regexp
	// Reason says why a Skip block is not run.
	Reason string
}

// Step is one command of a Console block.
type Step struct {
	// Line is the 1-based line of the command in the guide.
	Line int
	// Command is the shell command, continuation lines joined as written.
	Command string
	// Want is the output shown after the command.
	Want string
}

// Steps splits a Console block into its commands.
func (b Block) Steps() []Step {
	var steps []Step
	lines := strings.Split(strings.TrimSuffix(b.Body, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !strings.HasPrefix(l, "$ ") {
			if len(steps) > 0 {
				steps[len(steps)-1].Want += l + "\n"
			}
			continue
		}
		s := Step{Line: b.Line + 1 + i, Command: strings.TrimPrefix(l, "$ ")}
		for strings.HasSuffix(s.Command, `\`) && i+1 < len(lines) {
			i++
			s.Command += "\n" + lines[i]
		}
		steps = append(steps, s)
	}
	return steps
}

// directive is `<!-- doctest: KIND ARGS -->` on one line.
var directive = regexp.MustCompile(`^\s*<!--\s*doctest:\s*(.*?)\s*-->\s*$`)

// Parse returns the fenced blocks of a Markdown document, each with its
// directive, in order. A document without any directive has no blocks to
// test and returns none, whatever its fences. Errors name the line.
func Parse(src string) ([]Block, error) {
	lines := strings.Split(src, "\n")
	var (
		blocks  []Block
		errs    []error
		pending *Block // the directive waiting for its fence
		pendAt  int
		marked  bool
		unmark  []int // fences with no directive
	)
	errorf := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Errorf("line %d: "+format, append([]any{line}, args...)...))
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := directive.FindStringSubmatch(l); m != nil {
			marked = true
			if pending != nil {
				errorf(pendAt, "directive not followed by a fenced block")
			}
			b, err := parseDirective(m[1])
			if err != nil {
				errorf(i+1, "%v", err)
				pending = nil
				continue
			}
			pending, pendAt = &b, i+1
			continue
		}
		indent, fence, info, ok := openFence(l)
		if !ok {
			if strings.TrimSpace(l) != "" && pending != nil {
				errorf(pendAt, "directive not followed by a fenced block")
				pending = nil
			}
			continue
		}
		start := i
		var body []string
		closed := false
		for i++; i < len(lines); i++ {
			if closeFence(lines[i], fence) {
				closed = true
				break
			}
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		if !closed {
			errorf(start+1, "fenced block not closed")
			break
		}
		if pending == nil {
			unmark = append(unmark, start+1)
			continue
		}
		b := *pending
		pending = nil
		b.Line, b.Info = start+1, info
		if len(body) > 0 {
			b.Body = strings.Join(body, "\n") + "\n"
		}
		switch {
		case b.Kind == Output && b.Log:
			if !slices.ContainsFunc(blocks, func(p Block) bool { return p.Kind == Background }) {
				errorf(b.Line, "output log with no background block before it")
			}
		case b.Kind == Output && (len(blocks) == 0 || (blocks[len(blocks)-1].Kind != Run && blocks[len(blocks)-1].Kind != Background)):
			errorf(b.Line, "output block with no run or background block right before it")
		}
		blocks = append(blocks, b)
	}
	if pending != nil {
		errorf(pendAt, "directive not followed by a fenced block")
	}
	if !marked {
		return nil, nil
	}
	for _, l := range unmark {
		errorf(l, "fenced block without a doctest directive (run, background, file, output, console or skip REASON)")
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return blocks, nil
}

// openFence reports whether l opens a fenced block (three or more
// backticks or tildes, indented by up to 3 spaces beyond a list item's
// indentation), returning the indentation, the fence and the info string.
func openFence(l string) (indent, fence, info string, ok bool) {
	t := strings.TrimLeft(l, " ")
	indent = l[:len(l)-len(t)]
	for _, c := range []byte{'`', '~'} {
		n := 0
		for n < len(t) && t[n] == c {
			n++
		}
		if n >= 3 {
			info = strings.TrimSpace(t[n:])
			if c == '`' && strings.Contains(info, "`") {
				return "", "", "", false // an inline code span, not a fence
			}
			return indent, t[:n], info, true
		}
	}
	return "", "", "", false
}

// closeFence reports whether l closes a block opened by fence: the same
// character, at least as many, nothing after but spaces.
func closeFence(l, fence string) bool {
	t := strings.TrimSpace(l)
	if len(t) < len(fence) || strings.Trim(t, fence[:1]) != "" {
		return false
	}
	return true
}

// parseDirective parses what follows "doctest:".
func parseDirective(s string) (Block, error) {
	name, rest, _ := strings.Cut(s, " ")
	kind, ok := kindNames[name]
	if !ok {
		return Block{}, fmt.Errorf("unknown doctest directive %q (want run, background, file, output, console or skip)", name)
	}
	b := Block{Kind: kind}
	rest = strings.TrimSpace(rest)
	if kind == Skip {
		if rest == "" {
			return Block{}, errors.New("skip needs a reason: <!-- doctest: skip WHY -->")
		}
		b.Reason = rest
		return b, nil
	}
	args, err := splitArgs(rest)
	if err != nil {
		return Block{}, err
	}
	for _, a := range args {
		key, val, hasVal := strings.Cut(a, "=")
		switch {
		case kind == Run && key == "exit" && hasVal:
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 || n > 255 {
				return Block{}, fmt.Errorf("exit=%s: want a status 0–255", val)
			}
			b.Exit = n
		case kind == Background && key == "ready" && hasVal && val != "":
			b.Ready = val
		case kind == Background && a == "restart":
			b.Restart = true
		case kind == File && !hasVal && b.File == "":
			b.File = a
		case (kind == Output || kind == Console) && a == "lines":
			b.Lines = true
		case kind == Output && a == "log":
			b.Log = true
		case (kind == Output || kind == Console) && key == "normalize" && hasVal:
			re, err := regexp.Compile(val)
			if err != nil {
				return Block{}, fmt.Errorf("normalize: %v", err)
			}
			b.Normalize = append(b.Normalize, re)
		default:
			return Block{}, fmt.Errorf("%s: unexpected argument %q", name, a)
		}
	}
	if kind == File && b.File == "" {
		return Block{}, errors.New("file needs a name: <!-- doctest: file NAME -->")
	}
	return b, nil
}

// splitArgs splits on spaces; a value may be double-quoted (key="a b"),
// with \" and \\ inside.
func splitArgs(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inArg, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quoted && c == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\'):
			i++
			cur.WriteByte(s[i])
		case c == '"':
			quoted = !quoted
			inArg = true
		case c == ' ' && !quoted:
			if inArg {
				out = append(out, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteByte(c)
			inArg = true
		}
	}
	if quoted {
		return nil, errors.New("unterminated quote")
	}
	if inArg {
		out = append(out, cur.String())
	}
	return out, nil
}

// volatile are the values no guide can show as a run will print them:
// times, dates, ages and durations, UUIDs. They are replaced on both sides.
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?`), "<time>"},
	{regexp.MustCompile(`(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d\d:\d\d:\d\d GMT`), "<time>"},
	// A clock, but not three bytes of a MAC (52:54:00:00:00:01).
	{regexp.MustCompile(`(?m)(^|[^:\w])\d\d:\d\d:\d\d(\.\d+)?([^:\w]|$)`), "${1}<time>${3}"},
	{regexp.MustCompile(`\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`), "<uuid>"},
	{regexp.MustCompile(`\b(\d+(\.\d+)?(h|m|s|ms|µs|us|ns))+\b`), "<duration>"},
	{regexp.MustCompile(`[ \t]+`), " "},
}

// Normalize prepares output for comparison: each of extra's matches
// becomes <x>, then volatile values are replaced, runs of blanks become
// one space (tables re-align to the width of their values), trailing
// blanks and leading and trailing blank lines go.
func Normalize(s string, extra []*regexp.Regexp) string {
	for _, re := range extra {
		s = re.ReplaceAllString(s, "<x>")
	}
	for _, v := range volatile {
		s = v.re.ReplaceAllString(s, v.with)
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \r")
	}
	return strings.Trim(strings.Join(lines, "\n"), "\n")
}

// Compare checks got against the output a guide shows. With lines, every
// line of want but "…" and "..." must appear in got in order; otherwise
// the two must be equal. Both are normalised first. It returns "" when
// they agree, else what differs.
func Compare(got, want string, lines bool, extra []*regexp.Regexp) string {
	g, w := Normalize(got, extra), Normalize(want, extra)
	if !lines {
		if g == w {
			return ""
		}
		return fmt.Sprintf("got (normalised):\n%s\nwant (normalised):\n%s", indent(g), indent(w))
	}
	gl := strings.Split(g, "\n")
	j := 0
	for _, l := range strings.Split(w, "\n") {
		if l == "…" || l == "..." || l == "" {
			continue
		}
		for j < len(gl) && gl[j] != l {
			j++
		}
		if j == len(gl) {
			return fmt.Sprintf("line %q not found (in order) in the output (normalised):\n%s", l, indent(g))
		}
		j++
	}
	return ""
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
