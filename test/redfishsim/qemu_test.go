package redfishsim

import (
	"strings"
	"testing"
)

// TestParseReply: QEMU's three kinds of line.
func TestParseReply(t *testing.T) {
	for _, tc := range []struct {
		line, ret, err string
		event          bool
	}{
		{`{"return": {"status": "running", "running": true}}`, `{"status": "running", "running": true}`, "", false},
		{`{"return": {}}`, `{}`, "", false},
		{`{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "RESET", "data": {"guest": false}}`, "", "", true},
		{`{"error": {"class": "DeviceNotFound", "desc": "Device 'cd9' not found"}}`, "", "DeviceNotFound: Device 'cd9' not found", false},
		{`{"id": 1}`, "", "has neither return nor error", false},
		{`{"return"`, "", "bad reply", false},
	} {
		ret, event, err := parseReply([]byte(tc.line))
		if string(ret) != tc.ret || event != tc.event || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: got %s %v %v; want %s %v %q", tc.line, ret, event, err, tc.ret, tc.event, tc.err)
		}
	}
}

// FuzzParseReply: any line QEMU (or garbage on the socket) sends yields a
// value, an event or an error, never a panic, and never two of them.
func FuzzParseReply(f *testing.F) {
	for _, s := range []string{`{"return": {}}`, `{"event": "STOP"}`, `{"error": {"class": "X", "desc": "y"}}`, `{"return": null}`, `[]`, `"x"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		ret, event, err := parseReply(line)
		n := 0
		if ret != nil {
			n++
		}
		if event {
			n++
		}
		if err != nil {
			n++
		}
		if n != 1 {
			t.Fatalf("%q: ret %s, event %v, err %v: want exactly one", line, ret, event, err)
		}
	})
}
