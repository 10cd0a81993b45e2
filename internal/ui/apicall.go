package ui

import (
	"bytes"
	"io"
	"net/http"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
)

// apiBase is the base URL of the in-process API calls; no network is
// involved (inProcess hands the request to Config.API).
const apiBase = "http://anvil-ui.invalid"

// inProcess is a connect.HTTPClient that serves each request with the
// API's own handler, in this process: the UI's mutations pass the API's
// gate (authentication from the Authorization header), its authorization
// and its audit as the CLI's do, without a second path to the store.
// Unary calls only: the answer is buffered whole.
type inProcess struct {
	api    http.Handler
	remote string // the browser's address, for the audit record
}

func (c inProcess) Do(req *http.Request) (*http.Response, error) {
	req.RemoteAddr = c.remote
	rec := &recorder{header: http.Header{}}
	c.api.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return &http.Response{
		Status: http.StatusText(rec.status), StatusCode: rec.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: rec.header, Body: io.NopCloser(&rec.body), ContentLength: int64(rec.body.Len()), Request: req,
	}, nil
}

// recorder is the http.ResponseWriter of an in-process call.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(p)
}

// apiClient is the connect client transport and base URL of the API's
// in-process handler for r: every UI mutation and API read goes through
// it, so the API's gate, authorization and audit see the browser's
// address.
func (u *UI) apiClient(r *request) (connect.HTTPClient, string) {
	return inProcess{api: u.cfg.API, remote: r.RemoteAddr}, apiBase
}

// asCaller wraps msg in a request that carries the session's token, so
// the API authenticates the call as the logged-in caller.
func asCaller[T any](u *UI, r *request, msg *T) *connect.Request[T] {
	req := connect.NewRequest(msg)
	if u.cfg.Authenticate != nil {
		req.Header().Set("Authorization", "Bearer "+r.session.token)
	}
	return req
}

// reprovisionCall asks the API's WorkflowService.Reprovision, as the
// caller whose token the session holds, and returns the new workflow's
// name and the API's warnings.
func (u *UI) reprovisionCall(r *request, ns, hardware, template string) (string, []string, error) {
	client := anvilv1connect.NewWorkflowServiceClient(u.apiClient(r))
	resp, err := client.Reprovision(r.Context(), asCaller(u, r, &v1.ReprovisionRequest{Namespace: ns, Hardware: hardware, Template: template}))
	if err != nil {
		return "", nil, err
	}
	return resp.Msg.GetWorkflow().GetMetadata().GetName(), resp.Msg.GetWarnings(), nil
}
