package syslog

import (
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/machinelog"
)

// TestParse runs datagrams as real senders emit them through the parser.
// The util-linux lines were captured from logger(1) 2.38 on Debian 12; the
// others follow the formats of the named senders.
func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		outcome string
		text    string
	}{
		// RFC 5424.
		{
			name:    "util-linux logger --rfc5424",
			in:      `<13>1 2026-11-22T04:20:56.129128+00:00 vm root - - [timeQuality tzKnown="1" isSynced="0"] hello 5424`,
			outcome: OutcomeReceived, text: "notice vm root: hello 5424",
		},
		{
			name:    "util-linux logger --rfc5424 with pid, msgid and structured data",
			in:      `<27>1 2026-11-22T04:20:56.144841+00:00 vm anvil-agent 16230 ACT [timeQuality tzKnown="1" isSynced="0"][x@1 a="b"] with sd`,
			outcome: OutcomeReceived, text: "err vm anvil-agent[16230]: with sd",
		},
		{
			name:    "util-linux logger --rfc5424=notime,nohost",
			in:      `<13>1 - - root - - - notime`,
			outcome: OutcomeReceived, text: "notice root: notime",
		},
		{
			name:    "RFC 5424 example 1, no structured data",
			in:      `<34>1 2003-10-11T22:14:15.003Z mymachine.example.com su - ID47 - 'su root' failed for lonvick on /dev/pts/8`,
			outcome: OutcomeReceived, text: "crit mymachine.example.com su: 'su root' failed for lonvick on /dev/pts/8",
		},
		{
			name:    "RFC 5424 example 3, structured data and a BOM before MSG",
			in:      "<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut=\"3\" eventSource=\"Application\" eventID=\"1011\"] \xef\xbb\xbfAn application event log entry...",
			outcome: OutcomeReceived, text: "notice mymachine.example.com evntslog: An application event log entry...",
		},
		{
			name:    "RFC 5424 without MSG",
			in:      `<13>1 2003-10-11T22:14:15.003Z node07 app - - -`,
			outcome: OutcomeReceived, text: "notice node07 app:",
		},
		{
			name:    "rsyslog RSYSLOG_SyslogProtocol23Format, newline-terminated",
			in:      "<30>1 2025-01-02T03:04:05.123456+00:00 node07 sshd 812 - -  Accepted publickey for root\n",
			outcome: OutcomeReceived, text: "info node07 sshd[812]: Accepted publickey for root",
		},
		{
			name:    "RFC 5424 version with a broken header is still a message",
			in:      `<13>1 bad header`,
			outcome: OutcomeReceived, text: "notice 1 bad header",
		},

		// RFC 3164 (BSD).
		{
			name:    "util-linux logger --rfc3164",
			in:      `<13>Nov 22 04:20:56 vm root: hello 3164`,
			outcome: OutcomeReceived, text: "notice vm root: hello 3164",
		},
		{
			name:    "util-linux logger --rfc3164, message with a newline",
			in:      "<12>Nov 22 04:20:56 vm kernel: multi\nline",
			outcome: OutcomeReceived, text: `warning vm kernel: multi\nline`,
		},
		{
			name:    "busybox syslogd -R forwarding busybox logger (no hostname)",
			in:      `<13>Jan  1 00:00:12 root: hello from busybox`,
			outcome: OutcomeReceived, text: "notice root: hello from busybox",
		},
		{
			name:    "busybox udhcpc through syslog(3)",
			in:      `<14>Jan  1 00:00:12 udhcpc[123]: lease of 10.0.0.7 obtained, lease time 86400`,
			outcome: OutcomeReceived, text: "info udhcpc[123]: lease of 10.0.0.7 obtained, lease time 86400",
		},
		{
			name:    "kernel line through busybox klogd and syslogd -R",
			in:      `<6>Jan  1 00:00:12 kernel: [    1.234567] e1000e 0000:00:19.0 eth0: NIC Link is Up 1000 Mbps Full Duplex`,
			outcome: OutcomeReceived, text: "info kernel: [    1.234567] e1000e 0000:00:19.0 eth0: NIC Link is Up 1000 Mbps Full Duplex",
		},
		{
			name:    "kernel panic, priority 0",
			in:      `<0>Nov 22 04:20:56 node07 kernel: Kernel panic - not syncing: VFS: Unable to mount root fs`,
			outcome: OutcomeReceived, text: "emerg node07 kernel: Kernel panic - not syncing: VFS: Unable to mount root fs",
		},
		{
			name:    "rsyslog RSYSLOG_TraditionalForwardFormat",
			in:      `<30>Jan  2 03:04:05 node07 systemd[1]: Started Journal Service.`,
			outcome: OutcomeReceived, text: "info node07 systemd[1]: Started Journal Service.",
		},
		{
			name:    "rsyslog RSYSLOG_ForwardFormat, RFC 3339 time with microseconds",
			in:      `<13>2025-01-02T03:04:05.123456+00:00 node07 anvil: forwarded`,
			outcome: OutcomeReceived, text: "notice node07 anvil: forwarded",
		},
		{
			name:    "docker syslog driver, zero-padded day",
			in:      `<30>Jan 02 03:04:05 node07 docker/abc123[99]: container line`,
			outcome: OutcomeReceived, text: "info node07 docker/abc123[99]: container line",
		},
		{
			name:    "dropbear, no space after the tag",
			in:      `<38>Nov 22 04:20:56 node07 dropbear[12]:Password auth succeeded for 'root'`,
			outcome: OutcomeReceived, text: "info node07 dropbear[12]: Password auth succeeded for 'root'",
		},
		{
			name:    "tag with an empty message",
			in:      `<13>Nov 22 04:20:56 vm root:`,
			outcome: OutcomeReceived, text: "notice vm root:",
		},
		{
			name:    "old BMC: PRI and text only (RFC 3164 4.3.3)",
			in:      `<13>hello world`,
			outcome: OutcomeReceived, text: "notice hello world",
		},
		{
			name:    "C string with its NUL terminator and a newline",
			in:      "<13>Nov 22 04:20:56 vm root: hello\n\x00",
			outcome: OutcomeReceived, text: "notice vm root: hello",
		},
		{
			name:    "NUL inside the message",
			in:      "<13>Nov 22 04:20:56 vm root: a\x00b",
			outcome: OutcomeReceived, text: `notice vm root: a\x00b`,
		},
		{
			name:    "invalid UTF-8, C1 control and a tab",
			in:      "<13>Nov 22 04:20:56 vm root: caf\xc3\xa9 \xff next\u0085line\tcol",
			outcome: OutcomeReceived, text: "notice vm root: café \ufffd next\\u0085line\tcol",
		},

		// Not syslog.
		{
			name:    "netconsole",
			in:      "[   12.345678] e1000e 0000:00:19.0 eth0: NIC Link is Up\n",
			outcome: OutcomeUnparsed, text: "[   12.345678] e1000e 0000:00:19.0 eth0: NIC Link is Up",
		},
		{
			name:    "netconsole extended format",
			in:      "6,123,456789,-;e1000e: eth0 NIC Link is Up",
			outcome: OutcomeUnparsed, text: "6,123,456789,-;e1000e: eth0 NIC Link is Up",
		},
		{
			name:    "PRI out of range",
			in:      `<192>Nov 22 04:20:56 vm root: bad pri`,
			outcome: OutcomeUnparsed, text: "<192>Nov 22 04:20:56 vm root: bad pri",
		},
		{
			name:    "binary garbage",
			in:      "\x00\x01\xfe\xff\x1b[31mred\x7f",
			outcome: OutcomeUnparsed, text: `\x00\x01` + "\ufffd\ufffd" + `\x1b[31mred\x7f`,
		},
		{name: "empty", in: "", outcome: outcomeEmpty},
		{name: "only line ends and NULs", in: "\r\n\x00", outcome: outcomeEmpty},
	}
	p := newParser(DefaultMaxMessageSize)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			outcome, text := p.parse([]byte(tc.in))
			if outcome != tc.outcome || text != tc.text {
				t.Errorf("parse(%q) = %s, %q; want %s, %q", tc.in, outcome, text, tc.outcome, tc.text)
			}
		})
	}
}

func TestParseOversized(t *testing.T) {
	msg := strings.Repeat("x", 100)
	tests := []struct {
		name string
		in   string
		text string
	}{
		{
			name: "syslog header kept",
			in:   "<13>Nov 22 04:20:56 vm root: " + msg,
			text: "notice vm root: " + msg[:35] + " [truncated: 129 bytes, first 64 kept]",
		},
		{
			// 63 bytes of text, then a 3-byte rune straddling the limit.
			name: "cut before a rune, not inside it",
			in:   strings.Repeat("y", 63) + "€" + msg,
			text: strings.Repeat("y", 63) + " [truncated: 166 bytes, first 63 kept]",
		},
	}
	p := newParser(64)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			outcome, text := p.parse([]byte(tc.in))
			if outcome != OutcomeOversized || text != tc.text {
				t.Errorf("parse(%q) = %s, %q; want %s, %q", tc.in, outcome, text, OutcomeOversized, tc.text)
			}
		})
	}
	if outcome, _ := p.parse([]byte("<13>" + strings.Repeat("z", 60))); outcome != OutcomeReceived {
		t.Errorf("a 64-byte message with max 64: outcome %s; want %s", outcome, OutcomeReceived)
	}
}

func TestSanitizeIdempotent(t *testing.T) {
	for _, in := range []string{"plain", "a\x00b\nc\r", "\xff\xfe", "tab\tok", "\u0085\u009f", `already \x00 escaped`} {
		once := machinelog.Sanitize(in)
		if twice := machinelog.Sanitize(once); twice != once {
			t.Errorf("machinelog.Sanitize(machinelog.Sanitize(%q)) = %q; want %q", in, twice, once)
		}
	}
}
