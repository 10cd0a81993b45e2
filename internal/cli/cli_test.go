package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"

	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/agentsim"
	"github.com/anvilproj/anvil/internal/server"
	"github.com/anvilproj/anvil/internal/testtool"
)

// listenLocal returns a listener on a free 127.0.0.1 port, for
// server.Config.Listeners: the port stays bound from its choice to its use.
func listenLocal(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// startServer runs a real `anvil serve` in-process on a free loopback port
// and returns its address.
func startServer(t *testing.T) string {
	t.Helper()
	return startServerWith(t, nil)
}

// startServerWith is startServer with configure, if not nil, changing the
// server's configuration first.
func startServerWith(t *testing.T, configure func(*server.Config)) string {
	t.Helper()
	ln := listenLocal(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := server.Config{DataDir: t.TempDir(), Bind: "127.0.0.1", InsecureNoAuth: true, DisableGRPC: true,
		Listeners:   server.Listeners{HTTP: ln},
		DisableDHCP: true, DisableTFTP: true, DisableSyslog: true, DisableMetadata: true}
	if configure != nil {
		configure(&cfg)
	}
	go func() { done <- server.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server.Run: %v", err)
		}
	})
	addr := "http://" + ln.Addr().String()
	for i := 0; ; i++ {
		resp, err := http.Get(addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
		if i > 500 {
			t.Fatalf("server never became ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run executes an anvil client command line against server and returns its
// standard output and error.
func run(t *testing.T, server string, args ...string) (string, string, error) {
	t.Helper()
	root := &cobra.Command{Use: "anvil", SilenceUsage: true, SilenceErrors: true}
	root.PersistentFlags().String("server", DefaultServer, "")
	root.AddCommand(Commands()...)
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs(append([]string{"--server", server}, args...))
	err := root.ExecuteContext(context.Background())
	return stdout.String(), stderr.String(), err
}

func mustRun(t *testing.T, server string, args ...string) string {
	t.Helper()
	out, errOut, err := run(t, server, args...)
	if err != nil {
		t.Fatalf("anvil %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return out
}

const examples = "../../examples"

// TestExamplesEndToEnd drives the CLI through the whole life of the
// examples: apply, read back unchanged, rendered tasks, a run to SUCCESS
// with watch and describe, and the netboot toggle.
func TestExamplesEndToEnd(t *testing.T) {
	srv := startServer(t)

	out := mustRun(t, srv, "apply", "-f", examples)
	for _, want := range []string{"hardware/rack1-node07 created", "template/debian-raw created", "workflow/rack1-node07-install created"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply output %q lacks %q", out, want)
		}
	}
	if out := mustRun(t, srv, "apply", "-f", examples); strings.Count(out, "unchanged") != 3 {
		t.Errorf("re-apply output = %q; want 3 unchanged", out)
	}

	// What was applied is what get returns: every spec field of the file.
	raw, err := os.ReadFile(filepath.Join(examples, "hardware.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want, got map[string]any
	if err := yaml.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(mustRun(t, srv, "get", "hardware", "rack1-node07", "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got["spec"], want["spec"]) {
		t.Errorf("get -o json spec = %v\nwant (the applied file) %v", got["spec"], want["spec"])
	}

	// The engine renders the template; get -o yaml shows tasks and actions.
	var wf struct {
		Status struct {
			Tasks []struct {
				Actions []struct {
					Name        string            `json:"name"`
					Environment map[string]string `json:"environment"`
				} `json:"actions"`
			} `json:"tasks"`
		} `json:"status"`
	}
	testtool.WaitFor(t, "the engine to render the workflow", func() bool {
		if err := yaml.Unmarshal([]byte(mustRun(t, srv, "get", "workflow", "rack1-node07-install", "-o", "yaml")), &wf); err != nil {
			t.Fatal(err)
		}
		return len(wf.Status.Tasks) > 0
	})
	acts := wf.Status.Tasks[0].Actions
	if len(acts) != 3 || acts[0].Environment["DEST_DISK"] != "/dev/nvme0n1" || acts[1].Environment["DEST_DISK"] != "/dev/nvme0n1p1" ||
		acts[1].Environment["CONTENTS"] != "rack1-node07" {
		t.Errorf("rendered actions = %+v; want 3 with DEST_DISK /dev/nvme0n1, /dev/nvme0n1p1 and CONTENTS rack1-node07", acts)
	}

	// A machine's agent runs it; watch follows it to the end and exits 0.
	agentDone := make(chan error, 1)
	go func() {
		_, err := agentsim.Run(context.Background(), agentsim.Config{
			Client:  anvilv1connect.NewAgentServiceClient(http.DefaultClient, srv),
			AgentID: "3c:ec:ef:12:34:07", ActionTime: 20 * time.Millisecond, ProgressSteps: 2, StreamLogs: true,
		})
		agentDone <- err
	}()
	out = mustRun(t, srv, "workflow", "watch", "rack1-node07-install")
	if err := <-agentDone; err != nil {
		t.Fatalf("agent: %v", err)
	}
	for _, w := range []string{"install/stream-image", "SUCCESS", "ended SUCCESS"} {
		if !strings.Contains(out, w) {
			t.Errorf("watch output lacks %q:\n%s", w, out)
		}
	}
	out = mustRun(t, srv, "describe", "workflow", "rack1-node07-install")
	for _, w := range []string{"State:       SUCCESS", "stream-image", "hostname", "reboot", "History"} {
		if !strings.Contains(out, w) {
			t.Errorf("describe output lacks %q:\n%s", w, out)
		}
	}
	if out := mustRun(t, srv, "logs", "rack1-node07-install"); !strings.Contains(out, "simulated stream-image starting") {
		t.Errorf("logs output lacks the agent's lines:\n%s", out)
	}
	// toggleAllowNetboot: the next boot goes to disk. The engine turns
	// allowPXE off after it has stored SUCCESS, so watch may end first.
	testtool.WaitFor(t, "allowPXE false after SUCCESS (toggleAllowNetboot)", func() bool {
		return strings.Contains(mustRun(t, srv, "get", "hardware"), "false")
	})
}

func TestApplyRefusesBadFileWhole(t *testing.T) {
	srv := startServer(t)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	content := "apiVersion: tinkerbell.org/v1alpha1\nkind: Template\nmetadata: {name: ok}\nspec: {data: 'x: 1'}\n---\n" +
		"apiVersion: tinkerbell.org/v1alpha1\nkind: Hardware\nmetadata: {name: n1}\nspec:\n  interfaces:\n    - dhcp: {mac: 3c:ec:ef:12:34}\n"
	if err := os.WriteFile(bad, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, err := run(t, srv, "apply", "-f", bad)
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Code != 1 {
		t.Fatalf("apply of a bad file: err = %v; want exit code 1", err)
	}
	if want := "bad.yaml:11: document 2 (Hardware default/n1): spec.interfaces[0].dhcp.mac"; !strings.Contains(errOut, want) {
		t.Errorf("stderr = %q; want it to contain %q", errOut, want)
	}
	if out := mustRun(t, srv, "get", "templates"); !strings.Contains(out, "No template found") {
		t.Errorf("the valid document of a refused file was stored:\n%s", out)
	}
}

// refusingAddr returns a loopback address where connections are refused:
// a TCP socket bound there that never listens holds the port for the test,
// so no other program can start listening on it meanwhile (closing a
// listener would free it).
func refusingAddr(t *testing.T) string {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*unix.SockaddrInet4).Port))
}

func TestUnreachableServer(t *testing.T) {
	addr := refusingAddr(t)
	_, _, err := run(t, "http://"+addr, "get", "hardware")
	if err == nil || !strings.Contains(err.Error(), "cannot reach the Anvil server at http://"+addr) ||
		strings.Contains(err.Error(), "\n") {
		t.Errorf("err = %v; want one line saying the server at %s cannot be reached", err, addr)
	}
}

func TestServerAddressFromEnvironment(t *testing.T) {
	t.Setenv(EnvServer, "10.1.2.3:7080")
	root := &cobra.Command{Use: "anvil"}
	root.PersistentFlags().String("server", DefaultServer, "")
	sub := &cobra.Command{Use: "x"}
	root.AddCommand(sub)
	if got := serverAddress(sub); got != "http://10.1.2.3:7080" {
		t.Errorf("serverAddress with %s set = %q; want http://10.1.2.3:7080", EnvServer, got)
	}
	if err := root.PersistentFlags().Set("server", "http://flag:1"); err != nil {
		t.Fatal(err)
	}
	if got := serverAddress(sub); got != "http://flag:1" {
		t.Errorf("serverAddress with --server = %q; the flag must win over the environment", got)
	}
}
