package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/testtool"
)

// paddedManifest is one Hardware named name followed by a YAML comment:
// size bytes in all.
func paddedManifest(name string, size int) string {
	hw := `apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: ` + name + `}
spec:
  interfaces:
  - dhcp: {mac: "52:54:00:0d:00:01"}
`
	return hw + "#" + strings.Repeat("a", size-len(hw)-2) + "\n"
}

// TestRequestLimitGRPCPort drives the gRPC port with grpc-go, counting what
// it writes on the wire: a large Apply without a token is refused having
// sent (so the server having read) next to nothing; an admin's Apply over
// --max-request-mib is refused RESOURCE_EXHAUSTED naming the limit and the
// flag, and changes nothing; one under it applies.
func TestRequestLimitGRPCPort(t *testing.T) {
	const limit = 4 << 20
	data := t.TempDir()
	_, grpcAddr, _, _, _ := startWith(t, func(c *Config) {
		c.InsecureNoAuth = false
		c.DataDir = data
		c.MaxRequestBytes = limit
	})
	tok, err := os.ReadFile(filepath.Join(data, "auth", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	admin := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+string(bytes.TrimSpace(tok)))

	// dial returns a fresh grpc-go connection and, once it is connected,
	// its byte counts.
	dial := func(t *testing.T) (*grpc.ClientConn, *atomic.Pointer[testtool.CountingConn]) {
		t.Helper()
		var counted atomic.Pointer[testtool.CountingConn]
		cc, err := grpc.NewClient(grpcAddr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
				if err != nil {
					return nil, err
				}
				cc := testtool.NewCountingConn(c)
				counted.Store(cc)
				return cc, nil
			}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc, &counted
	}
	apply := func(ctx context.Context, cc *grpc.ClientConn, content string) error {
		return cc.Invoke(ctx, "/anvil.v1.ManifestService/Apply",
			&v1.ApplyRequest{Source: "big.yaml", Content: content}, &v1.ApplyResponse{})
	}
	exists := func(t *testing.T, cc *grpc.ClientConn, name string) bool {
		t.Helper()
		err := cc.Invoke(admin, "/anvil.v1.HardwareService/Get", &v1.GetRequest{Name: name}, &v1.Hardware{})
		if status.Code(err) == codes.NotFound {
			return false
		}
		if err != nil {
			t.Fatalf("Get %s: %v", name, err)
		}
		return true
	}

	t.Run("no token: refused before the body", func(t *testing.T) {
		cc, conn := dial(t)
		const size = 16 << 20
		err := apply(context.Background(), cc, paddedManifest("anon-1", size))
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("Apply of %d MiB without a token: %v; want Unauthenticated", size>>20, err)
		}
		// HTTP/2 flow control: the client may send only what the server's
		// windows allow (1 MiB for a stream) until the server reads.
		if sent := conn.Load().BytesWritten(); sent > 3<<19 {
			t.Errorf("grpc-go sent %d bytes of a refused %d MiB request; want at most 1.5 MiB", sent, size>>20)
		} else {
			t.Logf("grpc-go sent %d bytes of the %d MiB request", sent, size>>20)
		}
	})
	t.Run("admin, over the limit: refused, nothing applied", func(t *testing.T) {
		cc, _ := dial(t)
		err := apply(admin, cc, paddedManifest("over-1", limit+1<<20))
		st, _ := status.FromError(err)
		if st.Code() != codes.ResourceExhausted {
			t.Fatalf("Apply over the limit: %v; want ResourceExhausted", err)
		}
		for _, want := range []string{"limit of 4 MiB", "anvil serve --max-request-mib"} {
			if !strings.Contains(st.Message(), want) {
				t.Errorf("message %q; want it to name %q", st.Message(), want)
			}
		}
		if exists(t, cc, "over-1") {
			t.Error("Hardware over-1 exists after its Apply was refused")
		}
	})
	t.Run("admin, under the limit: applied", func(t *testing.T) {
		cc, _ := dial(t)
		if err := apply(admin, cc, paddedManifest("under-1", limit-64<<10)); err != nil {
			t.Fatalf("Apply under the limit: %v", err)
		}
		if !exists(t, cc, "under-1") {
			t.Error("Hardware under-1 missing after its Apply")
		}
	})
}

// TestDefaultRequestLimitIsTheManifestLimit: the request cap is the one
// limit on a manifest (the parser has none of its own), so with the
// default cap a manifest just under it applies over Connect JSON on the
// HTTP port; and the limit is in the start log.
func TestDefaultRequestLimitIsTheManifestLimit(t *testing.T) {
	base, _, _, _, logs := start(t)
	content := paddedManifest("largest-1", api.DefaultMaxRequestBytes-64<<10)
	body, err := json.Marshal(&struct {
		Source  string `json:"source"`
		Content string `json:"content"`
	}{"largest.yaml", content})
	if err != nil {
		t.Fatal(err)
	}
	code, resp := callJSON(t, base, "/anvil.v1.ManifestService/Apply", "", string(body))
	if code != http.StatusOK || !strings.Contains(resp, `"name":"largest-1"`) {
		t.Errorf("Apply of a %d-byte manifest at the default limit: %d %.300s; want 200 creating largest-1", len(content), code, resp)
	}
	if !strings.Contains(logs.String(), "max_request_bytes=33554432") {
		t.Error("the start log does not state max_request_bytes=33554432")
	}
}
