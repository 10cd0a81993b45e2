package syslog

import (
	"bytes"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/anvilproj/anvil/internal/machinelog"
)

// FuzzParse feeds arbitrary datagrams to the parser. Properties: it never
// panics; the outcome is one of the known ones; the recorded text is valid
// UTF-8 with no control character but tab; plain text without a PRI is kept
// verbatim; and the fields of an RFC 5424 header built from the input come
// back in the text (the round trip).
func FuzzParse(f *testing.F) {
	seeds := []string{
		// util-linux logger --rfc5424 and --rfc3164, as captured.
		`<13>1 2026-11-22T04:20:56.129128+00:00 vm root - - [timeQuality tzKnown="1" isSynced="0"] hello 5424`,
		`<13>Nov 22 04:20:56 vm root: hello 3164`,
		// RFC 5424 with structured data and a BOM before MSG.
		"<165>1 2003-10-11T22:14:15.003Z host evntslog - ID47 [exampleSDID@32473 iut=\"3\"] \xef\xbb\xbfevent",
		// RFC 5424 nil values only.
		`<13>1 - - - - - -`,
		// busybox: no hostname; tag with a pid.
		`<14>Jan  1 00:00:12 udhcpc[123]: lease obtained`,
		// rsyslog forward format: RFC 3339 time with a fraction.
		`<13>2025-01-02T03:04:05.123456+00:00 node07 anvil: forwarded`,
		// The RFC 3164 machine's quirks: empty MSG, no space after the tag.
		`<13>Nov 22 04:20:56 vm root:`,
		`<38>Nov 22 04:20:56 node07 dropbear[12]:auth`,
		// PRI edge cases: 0, 191, 192, leading zeros, unterminated.
		"<0>x", "<191>x", "<192>x", "<013>x", "<13", "<>", "<1234>x",
		// netconsole, control characters, invalid UTF-8, a C1 control.
		"[   12.345678] e1000e: eth0 NIC Link is Up\n",
		"<13>Nov 22 04:20:56 vm root: a\x00b\nc\r\x1b[0m\x7f",
		"\xff\xfe\xc3", "<13>1 x \u0085 \u009f",
		// Nothing but terminators.
		"", "\n\x00\r",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := newParser(DefaultMaxMessageSize)
		outcome, text := p.parse(data)
		switch outcome {
		case OutcomeReceived, OutcomeUnparsed, OutcomeOversized:
		case outcomeEmpty:
			if text != "" {
				t.Fatalf("parse(%q) = empty with text %q", data, text)
			}
		default:
			t.Fatalf("parse(%q): unknown outcome %q", data, outcome)
		}
		checkText(t, data, text)

		// Plain text is kept as it came.
		trimmed := bytes.TrimRight(data, "\r\n\x00")
		if len(trimmed) > 0 && len(data) <= DefaultMaxMessageSize && trimmed[0] != '<' && isPlain(trimmed) {
			if outcome != OutcomeUnparsed || text != string(trimmed) {
				t.Fatalf("parse(%q) = %s, %q; want unparsed, the text itself", data, outcome, text)
			}
		}

		// Round trip: host, app and a clean message in an RFC 5424 header.
		tok := token(data)
		msg := strings.TrimLeft(machinelog.Sanitize(string(trimmed)), " ")
		if len(msg) > 1000 {
			return
		}
		in := "<14>1 - " + tok + " " + tok + " - - - " + msg
		want := "info " + tok + " " + tok + ":"
		if m := strings.TrimLeft(strings.TrimPrefix(msg, byteOrderMark), " "); m != "" {
			want += " " + m
		}
		if outcome, text := p.parse([]byte(in)); outcome != OutcomeReceived || text != want {
			t.Fatalf("parse(%q) = %s, %q; want received, %q", in, outcome, text, want)
		}
	})
}

func checkText(t *testing.T, data []byte, text string) {
	t.Helper()
	if !utf8.ValidString(text) {
		t.Fatalf("parse(%q) text %q is not valid UTF-8", data, text)
	}
	for _, r := range text {
		if r != '\t' && unicode.IsControl(r) {
			t.Fatalf("parse(%q) text %q holds control character %U", data, text, r)
		}
	}
}

// isPlain reports whether b is valid UTF-8 with no control character but tab.
func isPlain(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if r == utf8.RuneError || r != '\t' && unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// token derives an RFC 5424 HOSTNAME and APP-NAME from data: its letters
// and digits, 1 to 48 of them.
func token(data []byte) string {
	var b strings.Builder
	for _, c := range data {
		if b.Len() == 48 {
			break
		}
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
		}
	}
	if b.Len() == 0 {
		return "x"
	}
	return b.String()
}
