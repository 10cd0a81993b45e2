package syslog

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	gosyslog "github.com/leodido/go-syslog/v4"
	"github.com/leodido/go-syslog/v4/rfc3164"
	"github.com/leodido/go-syslog/v4/rfc5424"

	"github.com/anvilproj/anvil/internal/machinelog"
)

// Outcomes of one datagram: Event.Outcome and the outcome label of
// anvil_syslog_messages_total.
const (
	// OutcomeReceived: a syslog message (RFC 5424, RFC 3164, or at least a
	// valid PRI followed by text, which RFC 3164 section 4.3.3 still calls
	// a message).
	OutcomeReceived = "received"
	// OutcomeUnparsed: text without a valid PRI (a kernel netconsole line,
	// a misconfigured sender), kept as it came.
	OutcomeUnparsed = "unparsed"
	// OutcomeOversized: longer than Config.MaxMessageSize; kept truncated.
	OutcomeOversized = "oversized"
	// outcomeEmpty: nothing but line ends or NULs; counted, not recorded.
	outcomeEmpty = "empty"
)

// Syntax of the syslog header.
const (
	// maxPRI is the largest PRI value: facility 23 (local7) × 8 + severity 7
	// (RFC 5424 section 6.2.1).
	maxPRI = 191
	// rfc5424Version is the VERSION after the PRI that marks RFC 5424
	// (section 6.2.2); RFC 3164 has a timestamp there instead.
	rfc5424Version = "1 "
	// byteOrderMark may start an RFC 5424 MSG to say it is UTF-8
	// (section 6.4).
	byteOrderMark = "\ufeff"
	// rfc3339Seconds is the length of "2006-01-02T15:04:05", the part of an
	// RFC 3339 timestamp before its optional fraction.
	rfc3339Seconds = len("2006-01-02T15:04:05")
)

// severityNames are the short names of the severities 0–7 (RFC 5424 table
// 2), as syslog.conf spells them.
var severityNames = [8]string{"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"}

// parser parses datagrams. It is not safe for concurrent use: the machines
// keep state; each Serve loop has its own.
type parser struct {
	max     int
	rfc5424 gosyslog.Machine
	rfc3164 gosyslog.Machine
}

func newParser(maxSize int) *parser {
	return &parser{
		max:     maxSize,
		rfc5424: rfc5424.NewMachine(),
		// RFC 3339 timestamps (rsyslog's forward format, docker's syslog
		// driver) and zero-padded days are common in the field.
		rfc3164: rfc3164.NewMachine(rfc3164.WithRFC3339(), rfc3164.WithSecondFractions(), rfc3164.WithLenientDay()),
	}
}

// parse turns one datagram into the outcome and the text recorded for it:
// "<severity> <hostname> <app>[<procid>]: <msg>" with the parts the sender
// gave, or the datagram's text itself if it has no valid PRI. The text is
// valid UTF-8 with no control characters but tab: others are escaped (\n,
// \x00, \u0085) and invalid bytes become U+FFFD. The sender's timestamp is
// not used (machines booting often have no clock yet), nor RFC 5424's MSGID
// and structured data.
func (p *parser) parse(b []byte) (outcome, text string) {
	size := len(b)
	oversized := size > p.max
	if oversized {
		// Cut before a rune that would straddle the limit.
		cut := p.max
		for back := 0; cut > 0 && back < utf8.UTFMax-1 && !utf8.RuneStart(b[cut]); back++ {
			cut--
		}
		b = b[:cut]
	}
	// Senders end datagrams with a line end or a C string's NUL, or both.
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == 0) {
		b = b[:len(b)-1]
	}
	if len(b) == 0 {
		return outcomeEmpty, ""
	}
	// Escape first: the RFC 3164 machine stops at a newline or a NUL and
	// would lose the rest of the message.
	clean := machinelog.Sanitize(string(b))
	outcome, text = OutcomeReceived, ""
	if pri, rest, ok := splitPRI(clean); !ok {
		outcome, text = OutcomeUnparsed, clean
	} else {
		text = p.parseHeader(clean, pri, rest)
	}
	if oversized {
		outcome = OutcomeOversized
		text += fmt.Sprintf(" [truncated: %d bytes, first %d kept]", size, len(b))
	}
	return outcome, machinelog.Sanitize(text)
}

// parseHeader formats a message with a valid PRI. rest follows the PRI.
func (p *parser) parseHeader(clean string, pri int, rest string) string {
	sev := severityNames[pri%8]
	if strings.HasPrefix(rest, rfc5424Version) {
		if m, ok := p.parseWith(p.rfc5424, clean).(*rfc5424.SyslogMessage); ok && m != nil {
			// rsyslog's RFC 5424 template leaves the space that followed
			// a BSD tag at the start of MSG.
			msg := strings.TrimLeft(strings.TrimPrefix(str(m.Message), byteOrderMark), " ")
			return format(sev, str(m.Hostname), str(m.Appname), str(m.ProcID), msg)
		}
	} else if m, ok := p.parseWith(p.rfc3164, "<"+strconv.Itoa(pri)+">"+dropFraction(rest)).(*rfc3164.SyslogMessage); ok && m != nil &&
		(m.Hostname != nil || m.Appname != nil || m.Message != nil) {
		return format(sev, str(m.Hostname), str(m.Appname), str(m.ProcID), msg3164(rest, m))
	}
	// A valid PRI and text that fits neither header: RFC 3164 section 4.3.3
	// treats all of it as the message.
	return format(sev, "", "", "", strings.TrimLeft(rest, " "))
}

// parseWith runs a go-syslog machine, returning nil for anything but a
// complete parse. A panic in the machine (untrusted input reaches it) is
// contained to this datagram.
func (p *parser) parseWith(m gosyslog.Machine, in string) (msg gosyslog.Message) {
	defer func() {
		if recover() != nil {
			msg = nil
		}
	}()
	msg, err := m.Parse([]byte(in))
	if err != nil {
		return nil
	}
	return msg
}

// msg3164 returns an RFC 3164 message's MSG. The machine mistakes an empty
// MSG ("host tag:") for the tag and keeps "<pid>]:" in a MSG with no space
// after the tag ("tag[pid]:msg"), so the MSG is taken from the input after
// the tag when the tag can be found there.
func msg3164(rest string, m *rfc3164.SyslogMessage) string {
	if m.Appname == nil {
		return str(m.Message)
	}
	tag := *m.Appname
	if m.ProcID != nil {
		tag += "[" + *m.ProcID + "]"
	}
	tag += ":"
	if i := strings.Index(rest, " "+tag); i >= 0 {
		return strings.TrimLeft(rest[i+1+len(tag):], " ")
	}
	return str(m.Message)
}

// format builds "<severity> <hostname> <app>[<procid>]: <msg>", leaving
// out what is empty.
func format(sev, host, app, procID, msg string) string {
	var b strings.Builder
	b.WriteString(sev)
	if host != "" {
		b.WriteByte(' ')
		b.WriteString(host)
	}
	if app != "" {
		b.WriteByte(' ')
		b.WriteString(app)
		if procID != "" {
			b.WriteByte('[')
			b.WriteString(procID)
			b.WriteByte(']')
		}
	}
	if host != "" || app != "" {
		b.WriteByte(':')
	}
	if msg != "" {
		b.WriteByte(' ')
		b.WriteString(msg)
	}
	return b.String()
}

// splitPRI parses the "<PRI>" a syslog message starts with: one to three
// digits, at most maxPRI (RFC 5424 section 6.2.1; RFC 3164 section 4.1.1).
func splitPRI(s string) (pri int, rest string, ok bool) {
	if len(s) < 3 || s[0] != '<' {
		return 0, "", false
	}
	end := strings.IndexByte(s, '>')
	if end < 2 || end > 4 {
		return 0, "", false
	}
	for _, c := range s[1:end] {
		if c < '0' || c > '9' {
			return 0, "", false
		}
		pri = pri*10 + int(c-'0')
	}
	if pri > maxPRI {
		return 0, "", false
	}
	return pri, s[end+1:], true
}

// dropFraction removes the fraction of a leading RFC 3339 timestamp
// ("2006-01-02T15:04:05.999999+00:00"), which the RFC 3164 machine accepts
// only without one. The timestamp is not used.
func dropFraction(rest string) string {
	if len(rest) <= rfc3339Seconds || rest[rfc3339Seconds] != '.' ||
		rest[4] != '-' || rest[7] != '-' || rest[10] != 'T' || rest[13] != ':' || rest[16] != ':' {
		return rest
	}
	end := rfc3339Seconds + 1
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	return rest[:rfc3339Seconds] + rest[end:]
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
