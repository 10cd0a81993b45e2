package actions

import (
	"fmt"
	"strconv"
	"strings"
)

// grubEntry is a GRUB menu entry that boots Linux, as kexec needs it.
type grubEntry struct {
	// Path is the entry's place in GRUB's numbering: "0", or "1>2" for
	// the third entry of the second top-level item (a submenu).
	Path    string
	Title   string
	Kernel  string
	Initrds []string
	Args    string
}

// grubItem is a menuentry or submenu of a grub.cfg.
type grubItem struct {
	title, id string
	submenu   bool
	children  []*grubItem
	kernel    string
	initrds   []string
	args      []string
}

// grubDefault finds the entry GRUB boots by default in a grub.cfg: the
// last `set default=` whose value is not a variable (grub-mkconfig sets
// it to "${next_entry}" or "${saved_entry}" in a branch and to the
// configured value in the other; the variables live in grubenv, which is
// not read), as GRUB reads it: an index counting menuentries and
// submenus alike, a title or an --id, or a path of them through submenus
// ("1>2"). No default is entry 0; a submenu chosen is its first entry.
// Upstream's kexec reads the same file; unlike it, entries are numbered as
// GRUB numbers them (upstream counts only entries with an initrd, in a
// flat list) and an entry without an initrd is allowed.
func grubDefault(cfg string) (grubEntry, error) {
	top, def, err := parseGrub(cfg)
	if err != nil {
		return grubEntry{}, err
	}
	if len(top) == 0 {
		return grubEntry{}, fmt.Errorf("no menuentry")
	}
	if def == "" {
		def = "0"
	}
	items, path := top, []string{}
	var it *grubItem
	for _, part := range strings.Split(def, ">") {
		if it != nil {
			items = it.children
		}
		i := grubFind(items, part)
		if i < 0 {
			return grubEntry{}, fmt.Errorf("default entry %q: no entry %q", def, part)
		}
		it = items[i]
		path = append(path, strconv.Itoa(i))
	}
	for it.submenu {
		if len(it.children) == 0 {
			return grubEntry{}, fmt.Errorf("default entry %q is an empty submenu", def)
		}
		it = it.children[0]
		path = append(path, "0")
	}
	e := grubEntry{Path: strings.Join(path, ">"), Title: it.title, Kernel: it.kernel, Initrds: it.initrds, Args: strings.Join(it.args, " ")}
	if e.Kernel == "" {
		return grubEntry{}, fmt.Errorf("default entry %s (%q) has no linux line", e.Path, e.Title)
	}
	return e, nil
}

// grubFind is the index of the item named by s: a number, a title or an
// id.
func grubFind(items []*grubItem, s string) int {
	if n, err := strconv.Atoi(s); err == nil {
		if n >= 0 && n < len(items) {
			return n
		}
		return -1
	}
	for i, it := range items {
		if it.title == s || (it.id != "" && it.id == s) {
			return i
		}
	}
	return -1
}

// maxGrubDepth bounds nested blocks, so a hostile file cannot make the
// parser's stack grow without bound.
const maxGrubDepth = 64

// parseGrub reads a grub.cfg's menu and its default.
func parseGrub(cfg string) (top []*grubItem, def string, err error) {
	// stack holds the open blocks: a menu item, or nil for a block that
	// is not one (a function).
	var stack []*grubItem
	current := func() *grubItem {
		if len(stack) == 0 {
			return nil
		}
		return stack[len(stack)-1]
	}
	for n, line := range strings.Split(cfg, "\n") {
		words := grubWords(line)
		if len(words) == 0 {
			continue
		}
		switch cmd := words[0]; {
		case cmd == "}":
			if len(stack) == 0 {
				return nil, "", fmt.Errorf("line %d: } closes no block", n+1)
			}
			stack = stack[:len(stack)-1]
		case cmd == "menuentry" || cmd == "submenu":
			if words[len(words)-1] != "{" || len(words) < 3 {
				return nil, "", fmt.Errorf("line %d: %s without a title and {", n+1, cmd)
			}
			it := &grubItem{title: words[1], submenu: cmd == "submenu"}
			for i := 2; i < len(words)-2; i++ {
				if words[i] == "--id" || words[i] == "$menuentry_id_option" || words[i] == "${menuentry_id_option}" {
					it.id = words[i+1]
				}
			}
			parent := current()
			switch {
			case parent == nil && len(stack) == 0:
				top = append(top, it)
			case parent != nil && parent.submenu:
				parent.children = append(parent.children, it)
			}
			// An entry inside a function or a menuentry is not a menu
			// item (GRUB defines it only when that code runs).
			if len(stack) >= maxGrubDepth {
				return nil, "", fmt.Errorf("line %d: blocks nested more than %d deep", n+1, maxGrubDepth)
			}
			stack = append(stack, it)
		case words[len(words)-1] == "{":
			if len(stack) >= maxGrubDepth {
				return nil, "", fmt.Errorf("line %d: blocks nested more than %d deep", n+1, maxGrubDepth)
			}
			stack = append(stack, nil)
		case cmd == "set" && len(stack) == 0:
			for _, w := range words[1:] {
				if v, ok := strings.CutPrefix(w, "default="); ok && !strings.Contains(v, "$") {
					def = v
				}
			}
		case cmd == "linux" || cmd == "linux16" || cmd == "linuxefi":
			if it := current(); it != nil && !it.submenu && len(words) >= 2 {
				it.kernel = words[1]
				it.args = it.args[:0]
				for _, a := range words[2:] {
					// An argument that is only a variable ($vt_handoff)
					// is set by GRUB's own script: nothing to pass on.
					if !strings.HasPrefix(a, "$") {
						it.args = append(it.args, a)
					}
				}
			}
		case cmd == "initrd" || cmd == "initrd16" || cmd == "initrdefi":
			if it := current(); it != nil && !it.submenu {
				it.initrds = append([]string(nil), words[1:]...)
			}
		}
	}
	return top, def, nil
}

// grubWords splits a grub.cfg line into words as GRUB's shell does for
// the commands kexec reads: whitespace separates, 'single' and "double"
// quotes group, a backslash escapes the next character, # at a word's
// start begins a comment, and ; ends a command (only the first command of
// a line is kept: menu entries and linux lines stand alone). A quote
// left open ends with the line: GRUB would read on, but no line kexec
// needs is in a string that spans lines.
func grubWords(line string) []string {
	var (
		words []string
		cur   strings.Builder
		in    bool // in a word
		quote byte
	)
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case quote == '\'':
			if ch == '\'' {
				quote = 0
			} else {
				cur.WriteByte(ch)
			}
		case quote == '"':
			switch {
			case ch == '"':
				quote = 0
			case ch == '\\' && i+1 < len(line) && strings.IndexByte(`$"\`, line[i+1]) >= 0:
				i++
				cur.WriteByte(line[i])
			default:
				cur.WriteByte(ch)
			}
		case ch == '\\':
			if i+1 < len(line) {
				i++
				cur.WriteByte(line[i])
			}
			in = true
		case ch == '\'' || ch == '"':
			quote, in = ch, true
		case ch == ' ' || ch == '\t' || ch == '\r':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case ch == '#' && !in:
			i = len(line)
		case ch == ';':
			if in {
				words = append(words, cur.String())
			}
			return words
		default:
			cur.WriteByte(ch)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}
