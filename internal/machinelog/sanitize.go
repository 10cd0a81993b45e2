package machinelog

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Sanitize returns s as valid UTF-8 with every control character but tab
// escaped: \n and \r as such, other C0 controls and DEL as \xHH, C1
// controls as \uHHHH. Invalid bytes become U+FFFD. Event messages carry
// strings from the network (DHCP options, file names, syslog text); a record
// line must not move an operator's terminal cursor.
func Sanitize(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || r != '\t' && unicode.IsControl(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for _, r := range s {
		switch {
		case r == '\t' || !unicode.IsControl(r):
			b.WriteRune(r) // writes U+FFFD for an invalid byte
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < utf8.RuneSelf:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}
