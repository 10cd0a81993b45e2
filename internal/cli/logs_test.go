package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/bootlog"
	"github.com/anvilproj/anvil/internal/logstore"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/store/bolt"
	"github.com/anvilproj/anvil/internal/syslog"
)

// recordingServer is the API over a store and a log store, with the
// Recorder that anvil serve feeds from its network services; the tests
// feed it directly (and through a real syslog receiver).
type recordingServer struct {
	url string
	rec *bootlog.Recorder
	ls  *logstore.Store
	// getLogs counts GetLogs calls as they arrive: a follower's next poll
	// arrives only once it has printed the answer to the one before.
	getLogs atomic.Int64
}

func startRecordingServer(t *testing.T) *recordingServer {
	t.Helper()
	dir := t.TempDir()
	quiet := slog.New(slog.DiscardHandler)
	st, err := bolt.Open(filepath.Join(dir, "anvil.db"), bolt.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := logstore.Open(logstore.Config{Dir: filepath.Join(dir, "logs"), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	rec := bootlog.New(bootlog.Config{Store: st, Logs: ls, Logger: quiet})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rec.Run(ctx) }()
	svc := api.New(api.Config{Store: st, Logs: ls, Logger: quiet})
	mux := http.NewServeMux()
	svc.Mount(mux)
	s := &recordingServer{rec: rec, ls: ls}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/GetLogs") {
			s.getLogs.Add(1)
		}
		mux.ServeHTTP(w, r)
	}))
	s.url = srv.URL
	t.Cleanup(func() {
		svc.Stop()
		srv.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Recorder.Run: %v", err)
		}
		if err := ls.Close(); err != nil {
			t.Errorf("logstore.Close: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("store.Close: %v", err)
		}
	})
	return s
}

// waitGetLogs waits until n GetLogs calls have arrived, failing the test
// if they do not within 10 s.
func (s *recordingServer) waitGetLogs(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.getLogs.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d GetLogs calls within 10 s; want %d", s.getLogs.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func (s *recordingServer) record(t *testing.T, evs ...machinelog.Event) {
	t.Helper()
	for _, e := range evs {
		s.rec.Record(e)
	}
	if err := s.rec.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// syslogFrom runs a real syslog receiver whose events reach the Recorder
// as if sent from ip (the test sends from loopback), and sends it
// datagrams as a machine's boot environment would.
func (s *recordingServer) syslogFrom(t *testing.T, ip netip.Addr, datagrams ...string) {
	t.Helper()
	var mu sync.Mutex
	got := 0
	recv, err := syslog.New(syslog.Config{Logger: slog.New(slog.DiscardHandler), Events: machinelog.SinkFunc(func(e machinelog.Event) {
		e.IP = ip
		s.rec.Record(e)
		mu.Lock()
		got++
		mu.Unlock()
	})})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- recv.Serve(ctx, conn) }()
	c, err := net.Dial("udp", conn.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, d := range datagrams {
		if _, err := c.Write([]byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; ; i++ {
		mu.Lock()
		n := got
		mu.Unlock()
		if n == len(datagrams) {
			break
		}
		if i > 500 {
			t.Fatalf("syslog receiver got %d of %d datagrams", n, len(datagrams))
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := s.rec.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func mac(t *testing.T, s string) macaddr.MAC {
	t.Helper()
	m, err := macaddr.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// bootRack1Node07 records one network install of the example machine as
// anvil serve records it: DHCP, TFTP and HTTP boot events (their messages
// as those packages write them), syslog from its boot environment, its
// agent's lines, and the next power-on going to disk. A neighbour without
// Hardware tries to boot too. It returns the time of the first event.
func bootRack1Node07(t *testing.T, s *recordingServer) time.Time {
	t.Helper()
	mustRun(t, s.url, "apply", "-f", examples)
	node07 := mac(t, "3c:ec:ef:12:34:07")
	ip07 := netip.MustParseAddr("10.20.0.17")
	base := time.Now().Add(-8 * time.Second).Truncate(time.Second)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	s.record(t,
		machinelog.Event{Time: at(0), Service: "dhcp", MAC: node07, IP: ip07, Outcome: "offered",
			Message: "DISCOVER from 3c:ec:ef:12:34:07 (UEFI x86-64, PXEClient) [default/rack1-node07]: OFFER 10.20.0.17, boot file ipxe.efi via TFTP 10.20.0.1"},
		machinelog.Event{Time: at(4), Service: "dhcp", MAC: node07, IP: ip07, Outcome: "acked",
			Message: "REQUEST from 3c:ec:ef:12:34:07 (UEFI x86-64, PXEClient) [default/rack1-node07]: ACK 10.20.0.17, boot file ipxe.efi via TFTP 10.20.0.1"},
		machinelog.Event{Time: at(310), Service: "tftp", IP: ip07, Outcome: "served",
			Message: "RRQ ipxe.efi from 10.20.0.17:1468: sent 1,050,112 bytes in 0.09 s (blksize 1468, windowsize 16)"},
		machinelog.Event{Time: at(2105), Service: "dhcp", MAC: node07, IP: ip07, Outcome: "offered",
			Message: "DISCOVER from 3c:ec:ef:12:34:07 (UEFI x86-64, iPXE) [default/rack1-node07]: OFFER 10.20.0.17, boot file http://10.20.0.1:7080/ipxe/script/3c:ec:ef:12:34:07/auto.ipxe"},
		machinelog.Event{Time: at(2511), Service: "http", MAC: node07, IP: ip07, Outcome: "served",
			Message: "GET /ipxe/script/3c:ec:ef:12:34:07/auto.ipxe: workflow default/rack1-node07-install is PENDING: boot environment"},
		machinelog.Event{Time: at(2930), Service: "http", IP: ip07, Outcome: "served",
			Message: "GET /bootenv/vmlinuz-x86_64: 200, 11,239,424 bytes"},
		machinelog.Event{Time: at(3402), Service: "http", IP: ip07, Outcome: "served",
			Message: "GET /bootenv/initramfs-x86_64: 200, 48,301,056 bytes"},
		// A neighbour nobody described.
		machinelog.Event{Time: at(5000), Service: "dhcp", MAC: mac(t, "3c:ec:ef:12:34:99"), Outcome: "unknown-mac",
			Message: "DISCOVER from 3c:ec:ef:12:34:99 (BIOS x86, PXEClient): no answer: no Hardware has this MAC"},
	)
	s.syslogFrom(t, ip07,
		"<30>Nov 22 09:14:08 rack1-node07 anvil[1]: agent 3c:ec:ef:12:34:07 up, server 10.20.0.1:42113",
		"<6>Nov 22 09:14:08 rack1-node07 kernel: nvme nvme0: 16/0/0 default/read/poll queues",
	)
	if err := s.ls.Append(
		logstore.Line{WorkflowID: "default/rack1-node07-install", AgentID: "3c:ec:ef:12:34:07", TaskName: "install",
			ActionName: "stream-image", Time: time.Now().Add(time.Second), Stream: "stdout", Line: "streaming http://10.20.0.1:7080/images/debian-12.raw.gz to /dev/nvme0n1"},
		logstore.Line{WorkflowID: "default/rack1-node07-install", AgentID: "3c:ec:ef:12:34:07", TaskName: "install",
			ActionName: "stream-image", Time: time.Now().Add(42 * time.Second), Stream: "stdout", Line: "wrote 2,147,483,648 bytes in 41.2 s"},
	); err != nil {
		t.Fatal(err)
	}
	s.syslogFrom(t, netip.MustParseAddr("10.20.0.99"), "[   12.345678] e1000e 0000:00:19.0 eth0: NIC Link is Up 1000 Mbps Full Duplex")
	s.record(t, machinelog.Event{Time: time.Now().Add(95 * time.Second), Service: "dhcp", MAC: node07, IP: ip07, Outcome: "netboot-not-allowed",
		Message: "DISCOVER from 3c:ec:ef:12:34:07 (UEFI x86-64, PXEClient) [default/rack1-node07]: OFFER 10.20.0.17, netboot not allowed: booting from disk"})
	return base
}

// columns returns the second column of each output line (the source, or
// the task/action of a workflow's line).
func columns(out string) []string {
	var cols []string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			cols = append(cols, f[1])
		}
	}
	return cols
}

func TestLogsOfAMachine(t *testing.T) {
	s := startRecordingServer(t)
	bootRack1Node07(t, s)

	out := mustRun(t, s.url, "logs", "rack1-node07")
	t.Logf("$ anvil logs rack1-node07\n%s", out)
	want := []string{"dhcp", "dhcp", "tftp", "dhcp", "http", "http", "http", "syslog", "syslog", "agent", "agent", "dhcp"}
	if got := columns(out); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("sources of `logs rack1-node07` = %q; want %q\n%s", got, want, out)
	}
	for _, w := range []string{
		"tftp    RRQ ipxe.efi from 10.20.0.17:1468: sent 1,050,112 bytes",
		"syslog  info rack1-node07 anvil[1]: agent 3c:ec:ef:12:34:07 up",
		"agent   install/stream-image  wrote 2,147,483,648 bytes in 41.2 s",
		"dhcp    [netboot-not-allowed] DISCOVER from 3c:ec:ef:12:34:07",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("`logs rack1-node07` lacks %q:\n%s", w, out)
		}
	}
	if !regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d\d\d  dhcp    DISCOVER`).MatchString(out) {
		t.Errorf("today's lines should start with the time of day:\n%s", out)
	}
	if strings.Contains(out, "3c:ec:ef:12:34:99") {
		t.Errorf("the neighbour's events are in rack1-node07's record:\n%s", out)
	}

	tests := []struct {
		name string
		args []string
		want []string // the second column of each line
	}{
		{name: "explicit hardware, tail", args: []string{"logs", "hardware/rack1-node07", "--tail", "3"}, want: []string{"agent", "agent", "dhcp"}},
		{name: "by MAC", args: []string{"logs", "--mac", "3C-EC-EF-12-34-07"}, want: want},
		{name: "by IP", args: []string{"logs", "--ip", "10.20.0.17", "--tail", "1"}, want: []string{"dhcp"}},
		{name: "workflow", args: []string{"logs", "rack1-node07-install"}, want: []string{"install/stream-image", "install/stream-image"}},
		{name: "explicit workflow", args: []string{"logs", "wf/rack1-node07-install"}, want: []string{"install/stream-image", "install/stream-image"}},
		{name: "agent", args: []string{"logs", "--agent", "3c:ec:ef:12:34:07"}, want: []string{"install/stream-image", "install/stream-image"}},
		{name: "unknown MAC", args: []string{"logs", "--mac", "3c:ec:ef:12:34:99"}, want: []string{"dhcp"}},
		{name: "unknown IP", args: []string{"logs", "--ip", "10.20.0.99"}, want: []string{"syslog"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := mustRun(t, s.url, tc.args...)
			if got := columns(out); strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("anvil %s: second column %q; want %q\n%s", strings.Join(tc.args, " "), got, tc.want, out)
			}
		})
	}

	_, errOut, err := run(t, s.url, "logs", "--mac", "3c:ec:ef:12:34:07", "--tail", "1")
	if err != nil || !strings.Contains(errOut, "3c:ec:ef:12:34:07 is hardware default/rack1-node07") {
		t.Errorf("logs --mac of a known machine: stderr %q, %v; want it to name the hardware", errOut, err)
	}
	out = mustRun(t, s.url, "logs", "--ip", "10.20.0.99")
	t.Logf("$ anvil logs --ip 10.20.0.99\n%s", out)
	if !strings.Contains(out, "syslog  [unparsed] [   12.345678] e1000e 0000:00:19.0 eth0: NIC Link is Up") {
		t.Errorf("logs --ip of an unknown machine:\n%s", out)
	}

	out = mustRun(t, s.url, "logs", "--unknown")
	t.Logf("$ anvil logs --unknown\n%s", out)
	rows := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(rows) != 3 || !strings.HasPrefix(rows[0], "MACHINE") || !strings.HasPrefix(rows[1], "10.20.0.99 ") ||
		!strings.HasPrefix(rows[2], "3c:ec:ef:12:34:99 ") || !strings.Contains(rows[2], "[unknown-mac] DISCOVER from 3c:ec:ef:12:34:99") {
		t.Errorf("logs --unknown =\n%s\nwant a header, then 10.20.0.99 and 3c:ec:ef:12:34:99, newest first", out)
	}
	if out := mustRun(t, s.url, "logs", "--unknown", "--tail", "1"); strings.Count(out, "\n") != 2 {
		t.Errorf("logs --unknown --tail 1 =\n%s\nwant the header and one machine", out)
	}
}

func TestLogsOlderLinesShowTheDate(t *testing.T) {
	s := startRecordingServer(t)
	s.record(t, machinelog.Event{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local), Service: "dhcp",
		MAC: mac(t, "02:00:00:00:00:01"), Outcome: "unknown-mac", Message: "DISCOVER"})
	out := mustRun(t, s.url, "logs", "--mac", "02:00:00:00:00:01")
	if want := "2026-01-02 03:04:05.000  dhcp    [unknown-mac] DISCOVER\n"; out != want {
		t.Errorf("logs of an old line = %q; want %q", out, want)
	}
}

func TestLogsErrors(t *testing.T) {
	s := startRecordingServer(t)
	mustRun(t, s.url, "apply", "-f", examples)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "no such name", args: []string{"logs", "nope"}, want: `no workflow or hardware named "nope" in namespace "default"`},
		{name: "no such hardware", args: []string{"logs", "hardware/nope"}, want: "nope"},
		{name: "template", args: []string{"logs", "template/debian-raw"}, want: "templates have no logs"},
		{name: "bad kind", args: []string{"logs", "pod/x"}, want: `unknown kind "pod"`},
		{name: "nothing", args: []string{"logs"}, want: "name a workflow or a hardware"},
		{name: "two selections", args: []string{"logs", "rack1-node07", "--mac", "3c:ec:ef:12:34:07"}, want: "name a workflow or a hardware"},
		{name: "agent without ID", args: []string{"logs", "--agent", "--mac", "3c:ec:ef:12:34:07"}, want: "--agent needs"},
		{name: "unknown and follow", args: []string{"logs", "--unknown", "-f"}, want: "cannot --follow"},
		{name: "bad MAC", args: []string{"logs", "--mac", "zz"}, want: `mac: "zz" is not a MAC address`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := run(t, s.url, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("anvil %s: error %v; want one containing %q", strings.Join(tc.args, " "), err, tc.want)
			}
		})
	}
	if out := mustRun(t, s.url, "logs", "--unknown"); out != "No unknown machine has tried to boot.\n" {
		t.Errorf("logs --unknown with none = %q", out)
	}
}

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestLogsFollow(t *testing.T) {
	s := startRecordingServer(t)
	saved := followInterval
	followInterval = 10 * time.Millisecond
	t.Cleanup(func() { followInterval = saved })
	node := mac(t, "02:00:00:00:00:01")
	t1 := time.Now().Truncate(time.Millisecond)
	s.record(t, machinelog.Event{Time: t1, Service: "dhcp", MAC: node, Outcome: "unknown-mac", Message: "first"})

	root := &cobra.Command{Use: "anvil", SilenceUsage: true, SilenceErrors: true}
	root.PersistentFlags().String("server", DefaultServer, "")
	root.AddCommand(Commands()...)
	var out syncBuffer
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"--server", s.url, "logs", "--mac", node.String(), "-f"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	waitFor := func(want string, n int) {
		t.Helper()
		for i := 0; strings.Count(out.String(), want) < n; i++ {
			if i > 500 {
				t.Fatalf("output never showed %q %d times:\n%s", want, n, out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("first", 1)
	// A line with the same time as the last one printed, and two later
	// ones with one time: each shows once.
	s.record(t,
		machinelog.Event{Time: t1, Service: "tftp", MAC: node, Outcome: "served", Message: "same time"},
		machinelog.Event{Time: t1.Add(time.Second), Service: "http", MAC: node, Outcome: "served", Message: "later"},
		// Same time, different text (identical lines are folded by the
		// recorder, see bootlog's repeatWindow).
		machinelog.Event{Time: t1.Add(time.Second), Service: "http", MAC: node, Outcome: "served", Message: "later, again"},
	)
	waitFor("later", 2)
	// Three more polls answered and printed (a poll is sent only after
	// the previous answer was printed), each returning the lines at the
	// last time printed again: none may be printed twice.
	s.waitGetLogs(t, s.getLogs.Load()+4)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("logs -f: %v", err)
	}
	got := out.String()
	for text, n := range map[string]int{"first": 1, "same time": 1, "later": 2} {
		if c := strings.Count(got, text); c != n {
			t.Errorf("%q printed %d times; want %d:\n%s", text, c, n, got)
		}
	}
}
