package server

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fdBase is where the tests put the descriptors a parent would pass (3 on
// in a real child); far above what the test process uses. Each is used
// once: inheritedListeners closes what it takes, and one it did not take
// stays open until the test binary exits (closing it later could close a
// descriptor the process has opened since under the same number).
const fdBase = 300

// passFile puts a duplicate of f's descriptor at fd, as a parent process
// hands a socket over, and closes f.
func passFile(t *testing.T, f *os.File, err error, fd int) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Dup2(int(f.Fd()), fd); err != nil {
		t.Fatal(err)
	}
}

func passListener(t *testing.T, fd int) net.Listener {
	t.Helper()
	ln := listenLocal(t)
	f, err := ln.(*net.TCPListener).File()
	passFile(t, f, err, fd)
	return ln
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestInheritedListeners: sockets passed as systemd passes them serve
// where their names say, and a bad hand-over is refused with the reason.
func TestInheritedListeners(t *testing.T) {
	const pid = 4242
	first, second := passListener(t, fdBase), passListener(t, fdBase+1)
	env := map[string]string{"LISTEN_PID": strconv.Itoa(pid), "LISTEN_FDS": "2", "LISTEN_FDNAMES": "grpc:http"}
	// The order of the names is the order of the descriptors.
	got, err := inheritedListeners(envOf(env), pid, fdBase)
	if err != nil {
		t.Fatal(err)
	}
	defer got.close()
	if got.HTTPS != nil || got.Metadata != nil {
		t.Errorf("listeners not passed were set: %+v", got)
	}
	if got.GRPC.Addr().String() != first.Addr().String() || got.HTTP.Addr().String() != second.Addr().String() {
		t.Errorf("grpc on %v, http on %v; want %v and %v (the names' order)", got.GRPC.Addr(), got.HTTP.Addr(), first.Addr(), second.Addr())
	}
	// The inherited listener serves: a request to the port is accepted by it.
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "inherited") })}
	go srv.Serve(got.HTTP)
	defer srv.Close()
	resp, err := http.Get("http://" + second.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "inherited" {
		t.Errorf("GET through the inherited listener = %q; want %q", body, "inherited")
	}

	// Not for this process (systemd's rule): nothing is taken.
	if got, err := inheritedListeners(envOf(env), pid+1, fdBase); err != nil || got != (Listeners{}) {
		t.Errorf("another process's LISTEN_PID: %+v, %v; want none, nil", got, err)
	}
	if got, err := inheritedListeners(envOf(nil), pid, fdBase); err != nil || got != (Listeners{}) {
		t.Errorf("no activation: %+v, %v; want none, nil", got, err)
	}

	udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	f, err := udp.(*net.UDPConn).File()
	passFile(t, f, err, fdBase+2)
	bound, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(bound, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	passFile(t, os.NewFile(uintptr(bound), "bound"), nil, fdBase+3)
	passListener(t, fdBase+4)
	passListener(t, fdBase+5)
	passListener(t, fdBase+6)
	passListener(t, fdBase+7)

	for _, tc := range []struct {
		name, fds, names string
		first            int
		want             string
	}{
		{"count not a number", "two", "http:grpc", fdBase + 4, "is not a count"},
		{"names missing", "2", "http", fdBase + 4, "names 1"},
		{"unknown name", "2", "http:api", fdBase + 4, `named "api"`},
		{"twice", "2", "http:http", fdBase + 6, `two descriptors are named "http"`},
		{"a UDP socket", "1", "http", fdBase + 2, "not a listening socket"},
		{"bound, not listening", "1", "http", fdBase + 3, "not a listening socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"LISTEN_PID": strconv.Itoa(pid), "LISTEN_FDS": tc.fds, "LISTEN_FDNAMES": tc.names}
			got, err := inheritedListeners(envOf(env), pid, tc.first)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v; want one containing %q", err, tc.want)
			}
			if got != (Listeners{}) {
				t.Errorf("listeners = %+v after an error; want none", got)
			}
		})
	}
}

// TestPassListeners starts a real child the way a harness starts anvil
// serve: it sees LISTEN_PID equal to its own pid, the count, the names in
// order, and the sockets at descriptors 3 and 4.
func TestPassListeners(t *testing.T) {
	httpLn, grpcLn := listenLocal(t), listenLocal(t)
	cmd := exec.Command("/bin/sh", "-c", `echo "$$ $LISTEN_PID $LISTEN_FDS $LISTEN_FDNAMES"; readlink /proc/$$/fd/3 /proc/$$/fd/4`)
	if err := PassListeners(cmd, Listeners{HTTP: httpLn, GRPC: grpcLn}); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 {
		t.Fatalf("child printed %q; want its pid and environment, then two descriptors", out)
	}
	f := strings.Fields(lines[0])
	if len(f) != 4 || f[0] != f[1] || f[2] != "2" || f[3] != "http:grpc" {
		t.Errorf("child's pid, LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES = %q; want its own pid twice, 2, http:grpc", lines[0])
	}
	for _, l := range lines[1:] {
		if !strings.HasPrefix(l, "socket:[") {
			t.Errorf("child's descriptor is %q; want a socket", l)
		}
	}
}
