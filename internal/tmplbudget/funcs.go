package tmplbudget

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"text/template"

	"github.com/Masterminds/sprig/v3"
)

// Value bounds: what one function call may take and give.
const (
	// MaxValue bounds the size of every argument and result of a
	// function a template calls: bytes of its strings plus one per list
	// or map element (24 per number or other scalar, an upper bound of
	// its printed size), counted through nested lists and maps. It is the
	// largest output budget Anvil uses (a 4 MiB config): a longer value
	// cannot be written anyway. Checking results stops a chain of calls
	// that doubles a string each step; checking arguments stops a call
	// that concatenates many large ones.
	MaxValue = DefaultOutput
	// MaxItems bounds the lists until, untilStep and seq build: more
	// elements than a range may take steps.
	MaxItems = DefaultSteps
	// maxNesting bounds how deeply lists and maps nest inside a value; a
	// map set into itself counts as deeper than this, so it is refused
	// before a function could follow it forever.
	maxNesting = 32
	// scalarSize is what a number, bool or data struct counts for.
	scalarSize = 24
	// fmtMaxWidth is fmt's own cap on a width or precision (fmt refuses
	// larger ones), used when a verb takes it from an argument ('*').
	fmtMaxWidth = 1e6
)

func valueError(fn, what string, size int) error {
	return &ExceededError{Limit: LimitValue,
		Detail: fmt.Sprintf("%s: %s would be more than %d bytes (about %d)", fn, what, MaxValue, size)}
}

// meter measures a value against MaxValue, stopping as soon as it is over.
type meter struct {
	size int
	deep bool
}

func (m *meter) over() bool { return m.deep || m.size > MaxValue }

func (m *meter) add(v reflect.Value, depth int) {
	if m.over() {
		return
	}
	if depth > maxNesting {
		m.deep = true
		return
	}
	switch v.Kind() {
	case reflect.Invalid:
	case reflect.String:
		m.size += v.Len()
	case reflect.Interface:
		if !v.IsNil() {
			m.add(v.Elem(), depth)
		}
	case reflect.Slice, reflect.Array:
		switch v.Type().Elem().Kind() {
		case reflect.Uint8:
			m.size += v.Len()
			return
		case reflect.String, reflect.Interface, reflect.Slice, reflect.Array, reflect.Map:
		default: // scalars or data: no need to visit each
			m.size += v.Len() * (scalarSize + 1)
			return
		}
		m.size += v.Len()
		for i := 0; i < v.Len() && !m.over(); i++ {
			m.add(v.Index(i), depth+1)
		}
	case reflect.Map:
		m.size += v.Len()
		for it := v.MapRange(); it.Next() && !m.over(); {
			m.add(it.Key(), depth+1)
			m.add(it.Value(), depth+1)
		}
	default:
		// Numbers, bools, and pointers and structs (only the caller's data
		// has those, and its size is the caller's business).
		m.size += scalarSize
	}
}

// checkSize fails when vs together are over MaxValue or nested too deep.
func checkSize(fn, what string, vs ...reflect.Value) error {
	var m meter
	for _, v := range vs {
		m.add(v, 0)
	}
	if m.deep {
		return &ExceededError{Limit: LimitValue, Detail: fmt.Sprintf("%s: %s nests lists or maps more than %d deep", fn, what, maxNesting)}
	}
	if m.size > MaxValue {
		return valueError(fn, what, m.size)
	}
	return nil
}

var errorType = reflect.TypeFor[error]()

// wrap returns fn (a template function) checked: before the call, that
// its run may go on (check) and its arguments are within the value budget;
// after, its result.
func wrap(name string, fn any, check func() error) any {
	v := reflect.ValueOf(fn)
	typ := v.Type()
	if typ.Kind() != reflect.Func {
		return fn // text/template refuses it with its own error
	}
	hasErr := typ.NumOut() == 2 && typ.Out(1) == errorType
	fail := func(err error) []reflect.Value {
		if !hasErr {
			// text/template turns a panic in a function into that
			// function's error.
			panic(err)
		}
		return []reflect.Value{reflect.Zero(typ.Out(0)), reflect.ValueOf(&err).Elem()}
	}
	return reflect.MakeFunc(typ, func(args []reflect.Value) []reflect.Value {
		if err := check(); err != nil {
			return fail(err)
		}
		if err := checkSize(name, "its arguments", args...); err != nil {
			return fail(err)
		}
		var out []reflect.Value
		if typ.IsVariadic() {
			out = v.CallSlice(args)
		} else {
			out = v.Call(args)
		}
		if len(out) > 0 {
			if hasErr && !out[1].IsNil() {
				return out
			}
			if err := checkSize(name, "its result", out[0]); err != nil {
				return fail(err)
			}
		}
		return out
	}).Interface()
}

// builtins replaces text/template's functions that make strings with the
// same functions, so that they are checked like every other (printf's
// widths, js escaping doubles backslashes).
var builtins = template.FuncMap{
	"print":    fmt.Sprint,
	"println":  fmt.Sprintln,
	"printf":   printf,
	"html":     template.HTMLEscaper,
	"js":       template.JSEscaper,
	"urlquery": template.URLQueryEscaper,
}

// sprigFuncs is Sprig's hermetic function set with those whose result can
// be far larger than their arguments (a count, a width, a separator put
// between many elements, a replacement put at many places) checked before
// they run. Execute holds every function to the value budget besides.
var sprigFuncs = sync.OnceValue(func() template.FuncMap {
	f := sprig.HermeticTxtFuncMap()
	bounded := template.FuncMap{
		"repeat":    boundRepeat(f["repeat"].(func(int, string) string)),
		"indent":    boundIndent(f["indent"].(func(int, string) string), 0),
		"nindent":   boundIndent(f["nindent"].(func(int, string) string), 1),
		"replace":   boundReplace(f["replace"].(func(string, string, string) string)),
		"wrapWith":  boundWrapWith(f["wrapWith"].(func(int, string, string) string)),
		"join":      boundJoin(f["join"].(func(string, any) string)),
		"until":     func(n int) ([]int, error) { return untilStep(0, n, sign(n)) },
		"untilStep": untilStep,
		"seq":       seq,
	}
	for _, name := range []string{"regexReplaceAll", "mustRegexReplaceAll", "regexReplaceAllLiteral", "mustRegexReplaceAllLiteral"} {
		bounded[name] = boundRegexReplace(name, f[name], strings.Contains(name, "Literal"))
	}
	for k, v := range bounded {
		f[k] = v
	}
	return f
})

func boundRepeat(orig func(int, string) string) func(int, string) (string, error) {
	return func(n int, s string) (string, error) {
		if n > 0 && len(s) > 0 && n > MaxValue/len(s) {
			return "", valueError("repeat", fmt.Sprintf("%d × %d bytes", n, len(s)), mulCap(n, len(s)))
		}
		return orig(n, s), nil
	}
}

// boundIndent bounds indent and nindent (extra is nindent's newline).
func boundIndent(orig func(int, string) string, extra int) func(int, string) (string, error) {
	return func(n int, s string) (string, error) {
		lines := strings.Count(s, "\n") + 1
		if n > 0 && n > (MaxValue-len(s)-extra)/lines {
			return "", valueError("indent", fmt.Sprintf("%d spaces × %d lines", n, lines), mulCap(n, lines))
		}
		return orig(n, s), nil
	}
}

func boundReplace(orig func(string, string, string) string) func(string, string, string) (string, error) {
	return func(old, repl, s string) (string, error) {
		var n int
		if old == "" {
			n = len(s) + 1 // strings.Replace puts repl between every rune: at most this
		} else {
			n = strings.Count(s, old)
		}
		if grow := len(repl) - len(old); grow > 0 && n > 0 && n > (MaxValue-len(s))/grow {
			return "", valueError("replace", fmt.Sprintf("%d replacements of %d bytes", n, len(repl)), mulCap(n, len(repl)))
		}
		return orig(old, repl, s), nil
	}
}

func boundWrapWith(orig func(int, string, string) string) func(int, string, string) (string, error) {
	return func(width int, sep, s string) (string, error) {
		n := len(s) / max(width, 1) // separators at most, plus one
		if len(sep) > 0 && n+1 > (MaxValue-len(s))/len(sep) {
			return "", valueError("wrapWith", fmt.Sprintf("%d separators of %d bytes", n+1, len(sep)), mulCap(n+1, len(sep)))
		}
		return orig(width, sep, s), nil
	}
}

func boundJoin(orig func(string, any) string) func(string, any) (string, error) {
	return func(sep string, list any) (string, error) {
		n := 1
		if v := reflect.ValueOf(list); v.Kind() == reflect.Slice || v.Kind() == reflect.Array {
			n = v.Len()
		}
		var m meter
		m.add(reflect.ValueOf(list), 0)
		if len(sep) > 0 && n > (MaxValue-m.size)/len(sep) {
			return "", valueError("join", fmt.Sprintf("%d separators of %d bytes", n, len(sep)), mulCap(n, len(sep)))
		}
		return orig(sep, list), nil
	}
}

// boundRegexReplace bounds Sprig's regexReplaceAll* (func(regex, s, repl)):
// each match becomes repl, whose $references expand to at most the match.
func boundRegexReplace(name string, fn any, literal bool) any {
	check := func(regex, s, repl string) error {
		re, err := regexp.Compile(regex)
		if err != nil {
			return nil // Sprig reports it its own way
		}
		idx := re.FindAllStringIndex(s, -1)
		matched := 0
		for _, m := range idx {
			matched += m[1] - m[0]
		}
		refs := 0
		if !literal {
			refs = strings.Count(repl, "$")
		}
		// Result ≤ len(s) + Σ (len(repl) + refs × len(match)).
		size := float64(len(s)) + float64(len(idx))*float64(len(repl)) + float64(refs)*float64(matched)
		if size > MaxValue {
			return valueError(name, fmt.Sprintf("%d replacements of %d bytes", len(idx), len(repl)), int(min(size, math.MaxInt32)))
		}
		return nil
	}
	switch orig := fn.(type) {
	case func(string, string, string) string:
		return func(regex, s, repl string) (string, error) {
			if err := check(regex, s, repl); err != nil {
				return "", err
			}
			return orig(regex, s, repl), nil
		}
	case func(string, string, string) (string, error):
		return func(regex, s, repl string) (string, error) {
			if err := check(regex, s, repl); err != nil {
				return "", err
			}
			return orig(regex, s, repl)
		}
	}
	panic(fmt.Sprintf("tmplbudget: Sprig's %s has an unexpected type %T", name, fn))
}

// mulCap is a × b, saturated (for messages).
func mulCap(a, b int) int {
	if a != 0 && b > math.MaxInt/a {
		return math.MaxInt
	}
	return a * b
}

func sign(n int) int {
	if n < 0 {
		return -1
	}
	return 1
}

// untilStep is Sprig's untilStep (start, start+step, … up to but not
// including stop) refusing more than MaxItems elements. Its elements are
// computed from their count, so a step that would overflow past stop
// cannot loop forever as Sprig's own can.
func untilStep(start, stop, step int) ([]int, error) {
	var n uint64
	switch {
	case step > 0 && stop > start:
		d := uint64(stop) - uint64(start)
		n = d / uint64(step)
		if d%uint64(step) != 0 {
			n++
		}
	case step < 0 && stop < start:
		d, s := uint64(start)-uint64(stop), uint64(-(step+1))+1
		n = d / s
		if d%s != 0 {
			n++
		}
	default:
		return []int{}, nil
	}
	if n > MaxItems {
		return nil, &ExceededError{Limit: LimitValue,
			Detail: fmt.Sprintf("untilStep: %d elements is more than %d", n, MaxItems)}
	}
	v := make([]int, n)
	for i := range v {
		v[i] = start + i*step // within [start, stop): no overflow
	}
	return v, nil
}

// seq is Sprig's seq (like the seq command: "seq 5", "seq 2 5", "seq 1 2
// 9"), bounded like untilStep.
func seq(params ...int) (string, error) {
	var start, end, step, dir int
	switch len(params) {
	case 1:
		start, end = 1, params[0]
		step = 1
		if end < start {
			step = -1
		}
		dir = step
	case 2:
		start, end = params[0], params[1]
		step = 1
		if end < start {
			step = -1
		}
		dir = step
	case 3:
		start, step, end = params[0], params[1], params[2]
		dir = 1
		if end < start {
			dir = -1
			if step > 0 {
				return "", nil
			}
		}
	default:
		return "", nil
	}
	// Sprig stops at end+dir (end included); at the ends of int's range
	// that overflows.
	if (dir > 0 && end == math.MaxInt) || (dir < 0 && end == math.MinInt) {
		return "", errors.New("seq: end is out of range")
	}
	v, err := untilStep(start, end+dir, step)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for i, n := range v {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprint(&b, n)
	}
	return b.String(), nil
}

// printf is fmt.Sprintf, refused when its widths and precisions
// ("%0999999d") could make it larger than MaxValue: the rest of its size
// is the format and the arguments, which the value budget already counts.
func printf(format string, args ...any) (string, error) {
	size := len(format)
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		i++
		for i < len(format) && strings.IndexByte("+-# 0", format[i]) >= 0 {
			i++
		}
		for pass := 0; pass < 2; pass++ { // width, then precision
			if i < len(format) && format[i] == '[' { // explicit argument index
				for i < len(format) && format[i] != ']' {
					i++
				}
				i++
			}
			if i < len(format) && format[i] == '*' {
				size += fmtMaxWidth
				i++
			} else {
				n := 0
				for i < len(format) && format[i] >= '0' && format[i] <= '9' {
					n = min(n*10+int(format[i]-'0'), fmtMaxWidth)
					i++
				}
				size += n
			}
			if pass == 0 {
				if i >= len(format) || format[i] != '.' {
					break
				}
				i++
			}
		}
		if size > MaxValue {
			return "", valueError("printf", "its widths and precisions", size)
		}
	}
	return fmt.Sprintf(format, args...), nil
}
