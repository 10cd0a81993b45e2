package systemd

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// FuzzEnv feeds the parsers of systemd's variables any text: they never
// panic, a watchdog interval is half of a positive WATCHDOG_USEC or 0,
// and a notify socket is taken only as a path or an abstract name.
func FuzzEnv(f *testing.F) {
	f.Add("30000000", "", "/run/systemd/notify", "8:1234")
	f.Add("1", "42", "@/org/freedesktop/systemd1/notify/1", "0:0")
	f.Add("-5", "x", "vsock:2:1", "1:2:3")
	f.Add("18446744073709551615", "0", "", ":")
	dir := f.TempDir()
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { stderr.Close() })
	f.Fuzz(func(t *testing.T, usec, pid, socket, stream string) {
		every, err := WatchdogEvery(usec, pid, 42)
		if err == nil && every != 0 {
			n, perr := strconv.ParseUint(usec, 10, 63)
			if perr != nil || every != time.Duration(n)*time.Microsecond/2 {
				t.Errorf("WatchdogEvery(%q, %q) = %v", usec, pid, every)
			}
		}
		if err != nil && every != 0 {
			t.Errorf("WatchdogEvery(%q, %q) = %v with error %v", usec, pid, every, err)
		}
		n, err := NewNotifier(socket)
		if err == nil && n != nil && socket[0] != '/' && socket[0] != '@' {
			t.Errorf("NewNotifier(%q) accepted", socket)
		}
		_ = matchesJournalStream(stream, stderr)
	})
}
