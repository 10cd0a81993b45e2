package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/audit"
	"github.com/anvilproj/anvil/internal/testtool"
)

// readBound is the most a server may read of a body it refused unread:
// its first buffer of the connection (4 KiB, headers included) over
// HTTP/1.1, or up to 256 KiB that net/http drains of a chunked body to
// keep the connection; over HTTP/2, what the client may send before the
// server reads (net/http's stream window: 1 MiB).
const readBound = 3 << 19 // 1.5 MiB

// repeatReader yields its byte forever: a request body of any size that
// the test never holds.
type repeatReader byte

func (b repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

// bigHardware is a valid manifest; padded, it is the request whose
// refusal must leave the store unchanged.
const bigHardware = `apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: big-1}
spec:
  interfaces:
  - dhcp: {mac: "52:54:00:0c:00:01", ip: {address: 10.0.3.11, netmask: 255.255.255.0}}
`

// padded returns bigHardware followed by a YAML comment: size bytes in all.
func padded(size int) string {
	return bigHardware + "#" + strings.Repeat("a", size-len(bigHardware)-2) + "\n"
}

// applyJSON returns a Connect JSON ApplyRequest body whose content is
// bigHardware then a comment of pad bytes, streamed: its length is
// returned too.
func applyJSON(pad int64) (io.Reader, int64) {
	m, _ := json.Marshal(bigHardware + "#")
	head := `{"source":"big.yaml","content":` + strings.TrimSuffix(string(m), `"`)
	tail := `"}`
	return io.MultiReader(strings.NewReader(head), io.LimitReader(repeatReader('a'), pad), strings.NewReader(tail)),
		int64(len(head)) + pad + int64(len(tail))
}

// postApply posts an Apply as Connect JSON (contentType "application/json")
// or binary ("application/proto") over client; length < 0 sends it
// chunked.
func postApply(t *testing.T, client *http.Client, url, token, contentType string, body io.Reader, length int64) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/anvil.v1.ManifestService/Apply", body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = length
	req.Header.Set("Content-Type", contentType)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST Apply: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricValue returns the value of the counter name{labels} in the default
// registry (0 when absent).
func metricValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestUnauthenticatedBodyNotRead is the probe of issue 13: a large
// request without a token must be refused from its headers, before the
// server reads its body — counted at the server's connections — in every
// protocol, with and without a Content-Length.
func TestUnauthenticatedBodyNotRead(t *testing.T) {
	const size = 16 << 20 // under the default limit: only authentication refuses it
	big := &v1.ApplyRequest{Source: "big.yaml", Content: padded(size)}
	binary, err := proto.Marshal(big)
	if err != nil {
		t.Fatal(err)
	}
	h1 := func() *http.Client { return &http.Client{Transport: &http.Transport{}} }
	h2c := func() *http.Client {
		tr := &http.Transport{Protocols: new(http.Protocols)}
		tr.Protocols.SetUnencryptedHTTP2(true)
		return &http.Client{Transport: tr}
	}
	call := func(client *http.Client, url string, opts ...connect.ClientOption) error {
		c := anvilv1connect.NewManifestServiceClient(client, url, opts...)
		_, err := c.Apply(context.Background(), connect.NewRequest(big))
		return err
	}
	tests := []struct {
		name string
		// do makes the call and returns its connect code.
		do func(t *testing.T, url string) connect.Code
	}{
		{"connect JSON, HTTP/1.1, Content-Length", func(t *testing.T, url string) connect.Code {
			body, n := applyJSON(size)
			return httpCode(postApply(t, h1(), url, "", "application/json", body, n))
		}},
		{"connect JSON, HTTP/1.1, chunked", func(t *testing.T, url string) connect.Code {
			body, _ := applyJSON(size)
			return httpCode(postApply(t, h1(), url, "", "application/json", body, -1))
		}},
		{"connect binary, h2c", func(t *testing.T, url string) connect.Code {
			return httpCode(postApply(t, h2c(), url, "", "application/proto", strings.NewReader(string(binary)), int64(len(binary))))
		}},
		{"gRPC, h2c", func(t *testing.T, url string) connect.Code {
			return connect.CodeOf(call(h2c(), url, connect.WithGRPC()))
		}},
		{"gRPC-Web, HTTP/1.1", func(t *testing.T, url string) connect.Code {
			return connect.CodeOf(call(h1(), url, connect.WithGRPCWeb()))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ln *testtool.CountingListener
			e := newEnv(t, envOptions{
				configure: func(c *api.Config) { c.Authenticate = testAuthenticate },
				listener: func(l net.Listener) net.Listener {
					ln = testtool.NewCountingListener(l)
					return ln
				},
			})
			if got := tc.do(t, e.url); got != connect.CodeUnauthenticated {
				t.Errorf("Apply of %d MiB without a token: code %v; want unauthenticated", size>>20, got)
			}
			got := ln.BytesRead()
			if got > readBound {
				t.Errorf("the server read %d bytes of a refused %d MiB request; want at most %d", got, size>>20, readBound)
			}
			t.Logf("the server read %d bytes of the %d MiB request", got, size>>20)
		})
	}
}

// httpCode is the connect code of a Connect unary answer (status and
// JSON body).
func httpCode(status int, body string) connect.Code {
	if status == http.StatusOK {
		return 0
	}
	var e struct{ Code string }
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		return connect.CodeUnknown
	}
	var c connect.Code
	if err := c.UnmarshalText([]byte(e.Code)); err != nil {
		return connect.CodeUnknown
	}
	return c
}

// TestRequestTooLarge runs an admin's requests against a 1 MiB limit: each
// over it is refused RESOURCE_EXHAUSTED naming the limit and the flag — in
// every protocol, whether the size is announced or only found reading —
// counted, audited, and changes nothing; one just under it applies, and a
// client stream may carry more than the limit in messages under it.
func TestRequestTooLarge(t *testing.T) {
	const limit = 1 << 20
	al, err := audit.Open(filepath.Join(t.TempDir(), "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	var ln *testtool.CountingListener
	e := newEnv(t, envOptions{
		configure: func(c *api.Config) {
			c.Authenticate, c.Audit, c.MaxRequestBytes = testAuthenticate, al, limit
		},
		listener: func(l net.Listener) net.Listener {
			ln = testtool.NewCountingListener(l)
			return ln
		},
	})
	ctx := context.Background()
	apply := "/anvil.v1.ManifestService/Apply"
	before := metricValue(t, "anvil_api_request_too_large_total", map[string]string{"procedure": apply})
	wantMsg := func(t *testing.T, what, msg string) {
		t.Helper()
		for _, want := range []string{"larger than this server's limit of 1 MiB", "anvil serve --max-request-mib"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: message %q; want it to contain %q", what, msg, want)
			}
		}
	}
	over := &v1.ApplyRequest{Source: "big.yaml", Content: padded(limit + 1)}
	h1 := &http.Client{Transport: &http.Transport{}}
	defer h1.CloseIdleConnections()
	gRPC := anvilv1connect.NewManifestServiceClient(e.http, e.url, connect.WithGRPC())
	gRPCWeb := anvilv1connect.NewManifestServiceClient(h1, e.url, connect.WithGRPCWeb())

	tests := []struct {
		name string
		// do makes the call and returns its code and message.
		do       func(t *testing.T) (connect.Code, string)
		readMost int64 // the most the server may read of it
	}{
		{"connect JSON, Content-Length: refused unread", func(t *testing.T) (connect.Code, string) {
			body, n := applyJSON(limit)
			status, b := postApply(t, h1, e.url, "admin", "application/json", body, n)
			var m struct{ Message string }
			json.Unmarshal([]byte(b), &m)
			return httpCode(status, b), m.Message
		}, readBound},
		{"connect JSON, chunked: refused at the limit", func(t *testing.T) (connect.Code, string) {
			body, _ := applyJSON(8 * limit)
			status, b := postApply(t, h1, e.url, "admin", "application/json", body, -1)
			var m struct{ Message string }
			json.Unmarshal([]byte(b), &m)
			return httpCode(status, b), m.Message
		}, limit + readBound},
		{"gRPC, h2c", func(t *testing.T) (connect.Code, string) {
			_, err := gRPC.Apply(ctx, as("admin", over))
			return connect.CodeOf(err), errMessage(err)
		}, limit + readBound},
		{"gRPC-Web", func(t *testing.T) (connect.Code, string) {
			_, err := gRPCWeb.Apply(ctx, as("admin", over))
			return connect.CodeOf(err), errMessage(err)
		}, limit + readBound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			read := ln.BytesRead()
			code, msg := tc.do(t)
			if code != connect.CodeResourceExhausted {
				t.Errorf("Apply over the limit: code %v %q; want resource_exhausted", code, msg)
			}
			wantMsg(t, tc.name, msg)
			got := ln.BytesRead() - read
			if got > tc.readMost {
				t.Errorf("the server read %d bytes of it; want at most %d", got, tc.readMost)
			}
			t.Logf("the server read %d bytes; message %q", got, msg)
		})
	}
	if _, err := e.hw.Get(ctx, as("admin", &v1.GetRequest{Name: "big-1"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Get big-1 after the refused Applies: %v; want not_found (nothing applied)", err)
	}
	if got := metricValue(t, "anvil_api_request_too_large_total", map[string]string{"procedure": apply}) - before; got != float64(len(tests)) {
		t.Errorf("anvil_api_request_too_large_total{procedure=%q} went up by %v; want %d", apply, got, len(tests))
	}
	recs, err := al.List(audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, r := range recs {
		if r.Procedure == apply && r.Outcome == "resource_exhausted" && r.Subject == "admin" {
			refused++
			wantMsg(t, "audit record", r.Message)
		}
	}
	if refused != len(tests) {
		t.Errorf("audit log has %d refused Applies by admin; want %d: %+v", refused, len(tests), recs)
	}

	// Other procedures are capped too: a Create, and an agent's report
	// (agent calls carry no bearer token; they are bounded all the same).
	_, err = e.hw.Create(ctx, as("admin", &v1.CreateHardwareRequest{Hardware: &v1.Hardware{
		Metadata: meta("big-2", map[string]string{"pad": strings.Repeat("a", limit)})}}))
	wantCode(t, "Create over the limit", err, connect.CodeResourceExhausted)
	_, err = e.ag.ReportActionStatus(ctx, connect.NewRequest(&v1.ReportActionStatusRequest{
		WorkflowId: "default/w", AgentId: "a", ActionState: v1.ActionState_ACTION_STATE_RUNNING, Message: strings.Repeat("a", limit)}))
	wantCode(t, "ReportActionStatus over the limit", err, connect.CodeResourceExhausted)

	// Just under the limit, the same manifest applies: the server still serves.
	under := padded(limit - 4<<10)
	if _, err := e.man.Apply(ctx, as("admin", &v1.ApplyRequest{Source: "big.yaml", Content: under})); err != nil {
		t.Fatalf("Apply of %d bytes (under the limit): %v", len(under), err)
	}
	if _, err := e.hw.Get(ctx, as("admin", &v1.GetRequest{Name: "big-1"})); err != nil {
		t.Errorf("Get big-1 after the Apply under the limit: %v", err)
	}
}

// TestClientStreamCappedPerMessage: the agent's log stream is capped per
// line, not as a whole: lines adding up to twice the limit are all kept,
// and one line over it is refused.
func TestClientStreamCappedPerMessage(t *testing.T) {
	const limit = 64 << 10
	e := newEnv(t, envOptions{configure: func(c *api.Config) { c.MaxRequestBytes = limit }})
	ctx := context.Background()
	stream := e.ag.StreamLogs(ctx)
	line := strings.Repeat("x", limit/8)
	const lines = 16 // 2 × the limit in all
	for i := range lines {
		if err := stream.Send(&v1.LogLine{WorkflowId: "default/w", AgentId: "a", Line: line}); err != nil {
			t.Fatalf("send line %d: %v", i, err)
		}
	}
	resp, err := stream.CloseAndReceive()
	if err != nil || resp.Msg.GetLinesAccepted() != lines {
		t.Fatalf("StreamLogs of %d lines (%d bytes in all, limit %d): %v, accepted %d; want all", lines, lines*len(line), limit, err, resp.Msg.GetLinesAccepted())
	}

	stream = e.ag.StreamLogs(ctx)
	if err := stream.Send(&v1.LogLine{WorkflowId: "default/w", AgentId: "a", Line: strings.Repeat("x", limit+1)}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("send: %v", err)
	}
	_, err = stream.CloseAndReceive()
	wantCode(t, "StreamLogs of one line over the limit", err, connect.CodeResourceExhausted)
}

func errMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return fmt.Sprint(err)
}
