package kmod

import (
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	tests := []struct {
		name, pattern, s string
		want             bool
	}{
		{"literal", "virtio_net", "virtio_net", true},
		{"literal differs", "virtio_net", "virtio_blk", false},
		{"empty both", "", "", true},
		{"empty pattern", "", "x", false},
		{"star empty", "*", "", true},
		{"star all", "*", "pci:v00001AF4d00001000", true},
		{"star crosses slash", "a*b", "a/x/b", true},
		{"virtio_pci alias", "pci:v00001AF4d*sv*sd*bc*sc*i*", "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00", true},
		{"virtio_pci alias wrong vendor", "pci:v00001AF4d*sv*sd*bc*sc*i*", "pci:v00008086d0000100Esv00001AF4sd00001100bc02sc00i00", false},
		{"virtio_net alias", "virtio:d00000001v*", "virtio:d00000001v00001AF4", true},
		{"virtio_net alias blk device", "virtio:d00000001v*", "virtio:d00000002v00001AF4", false},
		{"trailing star needs prefix", "virtio:d00000001v*", "virtio:d00000001", false},
		{"question", "a?c", "abc", true},
		{"question needs a byte", "a?c", "ac", false},
		{"set", "bc0[1-3]", "bc02", true},
		{"set miss", "bc0[1-3]", "bc04", false},
		{"set negated bang", "x[!0-9]", "xa", true},
		{"set negated bang miss", "x[!0-9]", "x5", false},
		{"set negated caret", "x[^a]", "xb", true},
		{"set close bracket first", "[]a]", "]", true},
		{"set negated close bracket first", "[!]]", "]", false},
		{"set dash last", "[a-]", "-", true},
		{"set escaped", `[\]]`, "]", true},
		{"unclosed set is literal", "a[b", "a[b", true},
		{"unclosed set no match", "a[b", "ab", false},
		{"escape star", `a\*`, "a*", true},
		{"escape star not glob", `a\*`, "ab", false},
		{"trailing backslash never matches", `a\`, `a\`, false},
		{"backtracking", "*ab*ab", "xabyabab", true},
		{"backtracking miss", "*ab*ab", "xabyaba", false},
		{"many stars", "**a**", "bab", true},
		{"usb interface alias", "usb:v*p*d*dc*dsc*dp*ic08isc06ip50in*", "usb:v0781p5581d0100dc00dsc00dp00ic08isc06ip50in00", true},
		{"acpi star prefix", "acpi*:PNP0A03:*", "acpi:PNP0A03:", true},
		{"hex range", "pci:v00008086d0000[12]*", "pci:v00008086d00001234", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Match(tc.pattern, tc.s); got != tc.want {
				t.Errorf("Match(%q, %q) = %v; want %v", tc.pattern, tc.s, got, tc.want)
			}
			if got := refMatch(tc.pattern, tc.s); got != tc.want {
				t.Errorf("refMatch(%q, %q) = %v; want %v (the fuzz oracle is wrong)", tc.pattern, tc.s, got, tc.want)
			}
		})
	}
}

// FuzzMatch checks Match against refMatch, a plain recursive matcher
// written from fnmatch(3)'s description, and two properties: "*" matches
// everything, and a string with its metacharacters escaped matches itself.
func FuzzMatch(f *testing.F) {
	// Real alias patterns and modaliases, and the edge cases of sets and
	// escapes.
	f.Add("pci:v00001AF4d*sv*sd*bc*sc*i*", "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00")
	f.Add("virtio:d00000001v*", "virtio:d00000001v00001AF4")
	f.Add("usb:v*p*d*dc*dsc*dp*ic08isc06ip50in*", "usb:v0781p5581d0100dc00dsc00dp00ic08isc06ip50in00")
	f.Add("[!]a-]x", "bx")
	f.Add(`[\]-\]]`, "]")
	f.Add(`a\`, `a\`)
	f.Add("a[b", "a[b")
	f.Add("*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		if len(pattern) > 64 || len(s) > 64 {
			return // refMatch is exponential
		}
		if got, want := Match(pattern, s), refMatch(pattern, s); got != want {
			t.Fatalf("Match(%q, %q) = %v; refMatch says %v", pattern, s, got, want)
		}
		if !Match("*", s) {
			t.Fatalf("Match(\"*\", %q) = false", s)
		}
		if q := quoteMeta(s); !Match(q, s) {
			t.Fatalf("Match(%q, %q) = false for the escaped string", q, s)
		}
	})
}

// refMatch is the fuzz oracle: fnmatch(3) without flags, recursive and
// slow, structured differently from Match on purpose.
func refMatch(p, s string) bool {
	if p == "" {
		return s == ""
	}
	switch p[0] {
	case '*':
		for i := 0; i <= len(s); i++ {
			if refMatch(p[1:], s[i:]) {
				return true
			}
		}
		return false
	case '?':
		return s != "" && refMatch(p[1:], s[1:])
	case '\\':
		return len(p) >= 2 && s != "" && s[0] == p[1] && refMatch(p[2:], s[1:])
	case '[':
		if members, negate, rest, ok := refSet(p[1:]); ok {
			return s != "" && members[s[0]] != negate && refMatch(rest, s[1:])
		}
	}
	return s != "" && s[0] == p[0] && refMatch(p[1:], s[1:])
}

// refSet parses the body of a bracket expression (after '[') into a table
// of members, returning what follows the closing ']', or ok false when
// there is none.
func refSet(body string) (members [256]bool, negate bool, rest string, ok bool) {
	if body != "" && (body[0] == '!' || body[0] == '^') {
		negate, body = true, body[1:]
	}
	// Tokenise first: each element is one byte, escapes resolved.
	type elem struct {
		b       byte
		escaped bool
	}
	var elems []elem
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c == ']' && len(elems) > 0 {
			rest, ok = body[i+1:], true
			break
		}
		if c == '\\' && i+1 < len(body) {
			i++
			elems = append(elems, elem{body[i], true})
			continue
		}
		elems = append(elems, elem{c, false})
	}
	if !ok {
		return members, false, "", false
	}
	for i := 0; i < len(elems); i++ {
		if i+2 < len(elems) && elems[i+1].b == '-' && !elems[i+1].escaped {
			for c := int(elems[i].b); c <= int(elems[i+2].b); c++ {
				members[c] = true
			}
			i += 2
			continue
		}
		members[elems[i].b] = true
	}
	return members, negate, rest, true
}

func quoteMeta(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
