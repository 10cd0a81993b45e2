package kmod

// Match reports whether name matches pattern under the rules of fnmatch(3)
// called without flags, which is how modprobe matches a modalias against
// the patterns of modules.alias:
//
//   - '*' matches any run of bytes, '/' and '.' included;
//   - '?' matches any one byte;
//   - '[set]' matches one byte of the set: single bytes and ranges "a-z";
//     '!' or '^' first negates it; a ']' first is a member; '\' inside
//     escapes the next byte. A '[' with no closing ']' matches itself;
//   - '\' makes the next byte literal; a trailing '\' matches nothing.
//
// Matching is on bytes, not runes: modaliases are ASCII. Character
// classes such as [[:digit:]] are not supported (no alias uses them).
func Match(pattern, name string) bool {
	p, n := 0, 0
	// The position after the last '*' seen and the name position it was
	// tried from: on a mismatch the '*' swallows one more byte.
	starP, starN := -1, 0
	for p < len(pattern) || n < len(name) {
		if p < len(pattern) {
			c := pattern[p]
			switch c {
			case '*':
				p++
				starP, starN = p, n
				continue
			case '?':
				if n < len(name) {
					p++
					n++
					continue
				}
			case '[':
				if n < len(name) {
					matched, width := matchSet(pattern[p:], name[n])
					if width == 0 { // no closing ']': a literal '['
						matched, width = name[n] == '[', 1
					}
					if matched {
						p += width
						n++
						continue
					}
				}
			case '\\':
				if p+1 < len(pattern) && n < len(name) && name[n] == pattern[p+1] {
					p += 2
					n++
					continue
				}
			default:
				if n < len(name) && name[n] == c {
					p++
					n++
					continue
				}
			}
		}
		if starP >= 0 && starN < len(name) {
			starN++
			p, n = starP, starN
			continue
		}
		return false
	}
	return true
}

// matchSet matches b against the bracket expression that starts set
// (set[0] == '['). It returns whether b is in it and the expression's
// length, or width 0 when the expression has no closing ']'.
func matchSet(set string, b byte) (matched bool, width int) {
	i := 1
	negate := false
	if i < len(set) && (set[i] == '!' || set[i] == '^') {
		negate = true
		i++
	}
	first := true
	for i < len(set) {
		c := set[i]
		if c == ']' && !first {
			return matched != negate, i + 1
		}
		first = false
		if c == '\\' && i+1 < len(set) {
			i++
			c = set[i]
		}
		i++
		// A range: c-hi, unless the '-' is last in the set.
		if i+1 < len(set) && set[i] == '-' && set[i+1] != ']' {
			hi := set[i+1]
			i += 2
			if hi == '\\' && i < len(set) {
				hi = set[i]
				i++
			}
			if c <= b && b <= hi {
				matched = true
			}
			continue
		}
		if c == b {
			matched = true
		}
	}
	return false, 0
}

// hasMeta reports whether s contains a byte that is special to Match.
func hasMeta(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', '\\':
			return true
		}
	}
	return false
}
