package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	tinkproto "github.com/anvilproj/anvil/api/proto"
	"github.com/anvilproj/anvil/api/proto/tinkprotoconnect"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/testtool"
)

// listenLocal returns a listener on a free 127.0.0.1 port, for
// Config.Listeners: the port stays bound from its choice to its use.
func listenLocal(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu  chan struct{}
	buf bytes.Buffer
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{mu: make(chan struct{}, 1)} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.String()
}

// start runs Run in the background and waits until /readyz answers ok.
func start(t *testing.T) (httpBase, grpcAddr string, cancel context.CancelFunc, wait func() error, logs *syncBuffer) {
	t.Helper()
	return startWith(t, nil)
}

// startWith is start with a Config changed by change (if not nil) first.
func startWith(t *testing.T, change func(*Config)) (httpBase, grpcAddr string, cancel context.CancelFunc, wait func() error, logs *syncBuffer) {
	t.Helper()
	return startUntil(t, "/readyz", change)
}

// startUntil is startWith waiting until probe (/readyz, or /healthz for a
// server that is not to be ready yet) answers 200.
func startUntil(t *testing.T, probe string, change func(*Config)) (httpBase, grpcAddr string, cancel context.CancelFunc, wait func() error, logs *syncBuffer) {
	t.Helper()
	httpLn, grpcLn := listenLocal(t), listenLocal(t)
	logs = newSyncBuffer()
	cfg := Config{
		DataDir:        t.TempDir(),
		Bind:           "127.0.0.1",
		InsecureNoAuth: true, // authentication has its own test (auth_test.go)
		Listeners:      Listeners{HTTP: httpLn, GRPC: grpcLn},
		Logger:         slog.New(slog.NewTextHandler(logs, nil)),
		// The boot services have their own tests (boot_test.go, test/e2e).
		DisableDHCP: true, DisableTFTP: true, DisableSyslog: true, DisableMetadata: true,
	}
	if change != nil {
		change(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	var runErr error
	wait = func() error { <-runDone; return runErr }
	go func() {
		defer close(runDone)
		runErr = Run(ctx, cfg)
	}()
	httpBase = "http://" + httpLn.Addr().String()
	grpcAddr = grpcLn.Addr().String()
	// Wait for the probe by polling; the listeners exist before Run
	// logs them, so this only waits for startup, never for a fixed time.
	for i := 0; ; i++ {
		resp, err := http.Get(httpBase + probe)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-runDone:
			t.Fatalf("Run ended during startup: %v", runErr)
		case <-time.After(10 * time.Millisecond):
		}
		if i > 3000 {
			t.Fatalf("server did not start (%s)\n%s", probe, logs)
		}
	}
	t.Cleanup(func() {
		cancel()
		<-runDone
	})
	return httpBase, grpcAddr, cancel, wait, logs
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestServe(t *testing.T) {
	base, grpcAddr, cancel, wait, logs := start(t)

	t.Run("healthz", func(t *testing.T) {
		if code, body := get(t, base+"/healthz"); code != http.StatusOK {
			t.Errorf("/healthz = %d %q; want 200", code, body)
		}
	})
	t.Run("readyz", func(t *testing.T) {
		// The engine starts asynchronously; readiness is reached, not timed.
		var code int
		var body string
		for i := 0; i < 500; i++ {
			if code, body = get(t, base+"/readyz"); code == http.StatusOK {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Errorf("/readyz = %d %q; want 200", code, body)
	})
	t.Run("connect JSON on the HTTP port", func(t *testing.T) {
		resp, err := http.Post(base+"/anvil.v1.HardwareService/List", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("POST List = %d; want 200", resp.StatusCode)
		}
	})

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()

	t.Run("grpc-go client", func(t *testing.T) {
		var list v1.HardwareList
		if err := conn.Invoke(ctx, "/anvil.v1.HardwareService/List", &v1.ListRequest{}, &list); err != nil {
			t.Fatalf("List over grpc-go: %v", err)
		}
		var hw v1.Hardware
		err := conn.Invoke(ctx, "/anvil.v1.HardwareService/Get", &v1.GetRequest{Name: "missing"}, &hw)
		if status.Code(err) != codes.NotFound {
			t.Errorf("Get missing over grpc-go = %v; want NotFound", err)
		}
	})
	t.Run("Tinkerbell's WorkflowService on both ports", func(t *testing.T) {
		// A request without an agent ID reaches the service (and is
		// refused by it), where an unserved one would be UNIMPLEMENTED.
		var resp tinkproto.ActionResponse
		err := conn.Invoke(ctx, tinkprotoconnect.WorkflowServiceGetActionProcedure, &tinkproto.ActionRequest{}, &resp)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "missing agent_id") {
			t.Errorf("GetAction over grpc-go on the gRPC port: %v; want InvalidArgument, missing agent_id", err)
		}
		_, err = tinkprotoconnect.NewWorkflowServiceClient(http.DefaultClient, base).GetAction(ctx, connect.NewRequest(&tinkproto.ActionRequest{}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("GetAction over Connect on the HTTP port: %v; want InvalidArgument", err)
		}
	})
	t.Run("reflection", func(t *testing.T) {
		stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
		}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, s := range resp.GetListServicesResponse().GetService() {
			got[s.GetName()] = true
		}
		for _, want := range api.ServiceNames() {
			if !got[want] {
				t.Errorf("reflection lists %v; missing %s", got, want)
			}
		}
	})
	t.Run("metrics", func(t *testing.T) {
		code, body := get(t, base+"/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics = %d", code)
		}
		for _, want := range []string{
			`anvil_api_requests_total{code="ok",procedure="/anvil.v1.HardwareService/List"}`,
			`anvil_api_requests_total{code="not_found",procedure="/anvil.v1.HardwareService/Get"}`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
	t.Run("one log line per listener", func(t *testing.T) {
		for _, want := range []string{"service=http addr=" + strings.TrimPrefix(base, "http://"), "service=grpc addr=" + grpcAddr} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("log lacks %q:\n%s", want, logs)
			}
		}
	})

	// A watch open during shutdown must not hold it up.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	watch, err := conn.NewStream(wctx, &grpc.StreamDesc{ServerStreams: true}, "/anvil.v1.HardwareService/Watch")
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.SendMsg(&v1.WatchRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := watch.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Header(); err != nil {
		t.Fatal(err)
	}

	cancel()
	if err := wait(); err != nil {
		t.Errorf("Run after cancel = %v; want nil", err)
	}
	var ev v1.HardwareEvent
	if err := watch.RecvMsg(&ev); status.Code(err) != codes.Unavailable {
		t.Errorf("open watch after shutdown: %v; want Unavailable", err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("/healthz still answers after shutdown")
	}
	// The stages stop in the reverse of the wiring: nothing that serves
	// calls outlives the engine, nothing that records outlives the
	// machine record writer.
	last := -1
	for _, stage := range []string{"stage=transports", `stage="boot policy"`, "stage=bmc", `stage="workflow engine"`, `stage="machine records"`} {
		i := strings.Index(logs.String(), "msg=stopped "+stage)
		if i < 0 || i < last {
			t.Errorf("stage %s stopped at log offset %d (-1: never), before the one before it (%d); want the reverse of the start order:\n%s", stage, i, last, logs)
		}
		last = i
	}
}

func TestRunErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{name: "no data dir", cfg: Config{Bind: "127.0.0.1"}, want: "data directory"},
		{name: "bad dhcp mode", cfg: Config{Bind: "127.0.0.1", Listeners: Listeners{HTTP: listenLocal(t)}, DisableGRPC: true, DHCPMode: "sometimes"}, want: "--dhcp-mode"},
		{name: "bind not an IP", cfg: Config{Bind: "localhost"}, want: "not an IP address"},
		// Any port: no port of an address not ours can be bound.
		{name: "bind not ours", cfg: Config{Bind: "192.0.2.1"}, want: "is --bind an address of this machine?"},
		{name: "port busy", cfg: Config{Bind: "127.0.0.1", HTTPPort: busyPort, DisableGRPC: true}, want: "--http-port"},
		{name: "bad trusted proxy", cfg: Config{Bind: "127.0.0.1", TrustedProxies: []string{"proxy.lab"}}, want: "--trusted-proxies"},
		{name: "bad path prefix", cfg: Config{Bind: "127.0.0.1", PathPrefix: "/metrics/"}, want: "--path-prefix"},
		{name: "negative limit", cfg: Config{Bind: "127.0.0.1", BootClientRate: -1}, want: "must not be negative"},
		{name: "pool without discovery", cfg: Config{Bind: "127.0.0.1", Listeners: Listeners{HTTP: listenLocal(t)}, DisableGRPC: true,
			DiscoveryPools: []string{"10.0.0.100-10.0.0.199"}}, want: "--discovery-pool: discovery is off (add --discovery)"},
		{name: "pool in proxy mode", cfg: Config{Bind: "127.0.0.1", Listeners: Listeners{HTTP: listenLocal(t)}, DisableGRPC: true,
			DHCPMode: "proxy", Discovery: true, DiscoveryPools: []string{"10.0.0.100-10.0.0.199"}}, want: "which gives no addresses"},
		{name: "bad pool", cfg: Config{Bind: "127.0.0.1", Listeners: Listeners{HTTP: listenLocal(t)}, DisableGRPC: true,
			Discovery: true, DiscoveryPools: []string{"10.0.0.199-10.0.0.100"}}, want: "--discovery-pool: discovery pool \"10.0.0.199-10.0.0.100\""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.DataDir == "" && tc.name != "no data dir" {
				tc.cfg.DataDir = t.TempDir()
			}
			tc.cfg.Logger = quiet
			tc.cfg.DisableMetadata = true // Hegel's fixed port is not free in every test run
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err := Run(ctx, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestDisableListeners(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	logs := newSyncBuffer()
	go func() {
		errc <- Run(ctx, Config{DataDir: t.TempDir(), Bind: "127.0.0.1", DisableHTTP: true, DisableGRPC: true,
			DisableDHCP: true, DisableTFTP: true, DisableSyslog: true, DisableMetadata: true,
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
	}()
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Run with no listeners = %v; want nil", err)
	}
	if strings.Contains(logs.String(), "listening") {
		t.Errorf("a listener was started:\n%s", logs)
	}
}

// failingListener is a listener whose Accept fails once fail is closed,
// as a listener whose socket broke.
type failingListener struct {
	net.Listener
	fail chan struct{}
}

func (l failingListener) Accept() (net.Conn, error) {
	<-l.fail
	return nil, errors.New("accept: socket broke")
}

func TestListenerFailureEndsRun(t *testing.T) {
	ln := failingListener{listenLocal(t), make(chan struct{})}
	grpcLn := listenLocal(t)
	logs := newSyncBuffer()
	errc := make(chan error, 1)
	go func() {
		errc <- Run(context.Background(), Config{DataDir: t.TempDir(), Bind: "127.0.0.1", InsecureNoAuth: true,
			Listeners:   Listeners{HTTP: ln, GRPC: grpcLn},
			DisableDHCP: true, DisableTFTP: true, DisableSyslog: true, DisableMetadata: true,
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
	}()
	// The gRPC listener is the last component started.
	testtool.WaitFor(t, "the gRPC listener to serve", func() bool {
		return strings.Contains(logs.String(), "service=grpc addr=")
	})
	close(ln.fail)
	err := testtool.Receive(t, errc, "Run's end after its HTTP listener failed")
	want := "http listener " + ln.Addr().String() + ": accept: socket broke"
	if err == nil || err.Error() != want {
		t.Errorf("Run = %v; want %q", err, want)
	}
	if !strings.Contains(logs.String(), `msg=stopped stage="machine records"`) {
		t.Errorf("the other components were not stopped:\n%s", logs)
	}
	if _, err := net.Dial("tcp", grpcLn.Addr().String()); err == nil {
		t.Error("the gRPC port still accepts after Run returned")
	}
}
