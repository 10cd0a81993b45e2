package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/logstore"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store/bolt"
	"github.com/anvilproj/anvil/internal/workflow"
)

// env is one in-process API server with its clients.
type env struct {
	url  string
	http *http.Client // h2c, for the gRPC protocol
	hw   anvilv1connect.HardwareServiceClient
	tpl  anvilv1connect.TemplateServiceClient
	wf   anvilv1connect.WorkflowServiceClient
	man  anvilv1connect.ManifestServiceClient
	ag   anvilv1connect.AgentServiceClient
	logs anvilv1connect.LogServiceClient
	aud  anvilv1connect.AuditServiceClient
	jobs anvilv1connect.JobServiceClient

	st     *bolt.Store     // the store behind the API
	ls     *logstore.Store // the log store behind the API
	dbPath string          // the store's file
}

type envOptions struct {
	engine       bool
	watchHistory int
	// configure, if set, changes the API's configuration (authentication,
	// agent checks, audit) before the services start.
	configure func(*api.Config)
	// listener, if set, wraps the server's listener (to count what the
	// server reads).
	listener func(net.Listener) net.Listener
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	dir := t.TempDir()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := bolt.Open(filepath.Join(dir, "anvil.db"), bolt.Options{Logger: logger, WatchHistory: o.watchHistory})
	if err != nil {
		t.Fatalf("bolt.Open: %v", err)
	}
	ls, err := logstore.Open(logstore.Config{Dir: filepath.Join(dir, "logs"), Logger: logger})
	if err != nil {
		t.Fatalf("logstore.Open: %v", err)
	}
	cfg := api.Config{Store: st, Logs: ls, Logger: logger}
	ctx, cancel := context.WithCancel(context.Background())
	engineDone := make(chan error, 1)
	if o.engine {
		eng := workflow.New(workflow.Config{Store: st, Logger: logger})
		go func() { engineDone <- eng.Run(ctx) }()
		cfg.Engine = eng
	} else {
		engineDone <- nil
	}
	if o.configure != nil {
		o.configure(&cfg)
	}
	svc := api.New(cfg)
	mux := http.NewServeMux()
	svc.Mount(mux)

	srv := httptest.NewUnstartedServer(mux)
	if o.listener != nil {
		srv.Listener = o.listener(srv.Listener)
	}
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(func() {
		svc.Stop()
		srv.Close()
		cancel()
		if err := <-engineDone; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("engine.Run: %v", err)
		}
		if err := ls.Close(); err != nil {
			t.Errorf("logstore.Close: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("store.Close: %v", err)
		}
	})

	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	grpc := connect.WithGRPC()
	return &env{
		url:    srv.URL,
		http:   h2c,
		hw:     anvilv1connect.NewHardwareServiceClient(h2c, srv.URL, grpc),
		tpl:    anvilv1connect.NewTemplateServiceClient(h2c, srv.URL, grpc),
		wf:     anvilv1connect.NewWorkflowServiceClient(h2c, srv.URL, grpc),
		man:    anvilv1connect.NewManifestServiceClient(h2c, srv.URL, grpc),
		ag:     anvilv1connect.NewAgentServiceClient(h2c, srv.URL, grpc),
		logs:   anvilv1connect.NewLogServiceClient(h2c, srv.URL, grpc),
		aud:    anvilv1connect.NewAuditServiceClient(h2c, srv.URL, grpc),
		jobs:   anvilv1connect.NewJobServiceClient(h2c, srv.URL, grpc),
		st:     st,
		dbPath: filepath.Join(dir, "anvil.db"),
		ls:     ls,
	}
}

func mustStruct(t *testing.T, js string) *structpb.Struct {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		t.Fatalf("bad test JSON %s: %v", js, err)
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func meta(name string, lbls map[string]string) *v1.ObjectMeta {
	return &v1.ObjectMeta{Name: name, Labels: lbls}
}

func wantCode(t *testing.T, what string, err error, want connect.Code) {
	t.Helper()
	if got := connect.CodeOf(err); err == nil || got != want {
		t.Errorf("%s: error %v (code %v); want code %v", what, err, got, want)
	}
}

// crud is one kind's client calls, so the round trip is written once.
type crud[M interface {
	GetMetadata() *v1.ObjectMeta
	GetSpec() *structpb.Struct
}] struct {
	create func(context.Context, M) (M, error)
	get    func(context.Context, string) (M, error)
	update func(context.Context, M) (M, error)
	list   func(context.Context, string) ([]M, error)
	del    func(context.Context, string, string) error
	// obj builds a valid object named name; changed returns a copy of m
	// with a different spec.
	obj     func(name string) M
	changed func(m M) M
}

func roundTrip[M interface {
	GetMetadata() *v1.ObjectMeta
	GetSpec() *structpb.Struct
}](t *testing.T, c crud[M]) {
	ctx := context.Background()
	created, err := c.create(ctx, c.obj("one"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	m := created.GetMetadata()
	if m.GetNamespace() != "default" || m.GetUid() == "" || m.GetResourceVersion() == "" || m.GetCreationTimestamp() == nil {
		t.Errorf("Create returned metadata %v; want namespace default and uid, resourceVersion, creationTimestamp set", m)
	}
	if _, err := c.create(ctx, c.obj("two")); err != nil {
		t.Fatalf("Create two: %v", err)
	}
	got, err := c.get(ctx, "one")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.GetSpec().String() != created.GetSpec().String() {
		t.Errorf("Get spec = %v; want %v", got.GetSpec(), created.GetSpec())
	}
	upd, err := c.update(ctx, c.changed(got))
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if upd.GetMetadata().GetResourceVersion() == m.GetResourceVersion() {
		t.Errorf("Update kept resourceVersion %q", m.GetResourceVersion())
	}
	// Updating with the old version conflicts.
	_, err = c.update(ctx, c.changed(created))
	wantCode(t, "Update with a stale resourceVersion", err, connect.CodeAborted)

	items, err := c.list(ctx, "")
	if err != nil || len(items) != 2 {
		t.Fatalf("List = %d items, %v; want 2", len(items), err)
	}
	items, err = c.list(ctx, "name=one")
	if err != nil || len(items) != 1 || items[0].GetMetadata().GetName() != "one" {
		t.Errorf("List(name=one) = %v, %v; want only one", items, err)
	}
	_, err = c.list(ctx, "bad selector (")
	wantCode(t, "List with a bad selector", err, connect.CodeInvalidArgument)

	_, err = c.create(ctx, c.obj("one"))
	wantCode(t, "Create of an existing name", err, connect.CodeAlreadyExists)
	err = c.del(ctx, "one", "1")
	wantCode(t, "Delete with a stale resourceVersion", err, connect.CodeAborted)
	if err := c.del(ctx, "one", ""); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err = c.get(ctx, "one")
	wantCode(t, "Get after Delete", err, connect.CodeNotFound)
	if err != nil && !strings.Contains(err.Error(), "default/one") {
		t.Errorf("not-found message %q does not name default/one", err)
	}
	err = c.del(ctx, "one", "")
	wantCode(t, "Delete of a missing object", err, connect.CodeNotFound)
	_, err = c.get(ctx, "")
	wantCode(t, "Get with no name", err, connect.CodeInvalidArgument)
}

const (
	hwSpec  = `{"interfaces":[{"dhcp":{"mac":"3c:ec:ef:00:00:01","hostname":"node1","lease_time":86400,"ip":{"address":"10.0.0.10","netmask":"255.255.255.0","gateway":"10.0.0.1"}},"netboot":{"allowPXE":true,"allowWorkflow":true}}]}`
	tplData = "version: \"0.1\"\nname: install\nglobal_timeout: 600\ntasks:\n- name: os\n  worker: \"{{.device_1}}\"\n  actions:\n  - name: write\n    image: writefile\n    timeout: 60\n"
)

func TestHardwareRoundTrip(t *testing.T) {
	e := newEnv(t, envOptions{})
	roundTrip(t, crud[*v1.Hardware]{
		create: func(ctx context.Context, m *v1.Hardware) (*v1.Hardware, error) {
			r, err := e.hw.Create(ctx, connect.NewRequest(&v1.CreateHardwareRequest{Hardware: m}))
			return msgOf(r, err)
		},
		get: func(ctx context.Context, name string) (*v1.Hardware, error) {
			return msgOf(e.hw.Get(ctx, connect.NewRequest(&v1.GetRequest{Name: name})))
		},
		update: func(ctx context.Context, m *v1.Hardware) (*v1.Hardware, error) {
			return msgOf(e.hw.Update(ctx, connect.NewRequest(&v1.UpdateHardwareRequest{Hardware: m})))
		},
		list: func(ctx context.Context, fs string) ([]*v1.Hardware, error) {
			r, err := e.hw.List(ctx, connect.NewRequest(&v1.ListRequest{FieldSelector: fieldSel(fs)}))
			if err != nil {
				return nil, err
			}
			return r.Msg.GetItems(), nil
		},
		del: func(ctx context.Context, name, rv string) error {
			_, err := e.hw.Delete(ctx, connect.NewRequest(&v1.DeleteRequest{Name: name, ResourceVersion: rv}))
			return err
		},
		obj: func(name string) *v1.Hardware {
			spec := strings.ReplaceAll(hwSpec, "node1", name)
			if name == "two" { // a MAC and an address are one Hardware's
				spec = strings.ReplaceAll(strings.ReplaceAll(spec, "00:01", "00:02"), "10.0.0.10", "10.0.0.12")
			}
			return &v1.Hardware{Metadata: meta(name, nil), Spec: mustStruct(t, spec)}
		},
		changed: func(m *v1.Hardware) *v1.Hardware {
			c := &v1.Hardware{Metadata: m.GetMetadata(), Spec: mustStruct(t, strings.ReplaceAll(hwSpec, "86400", "3600"))}
			return c
		},
	})
}

func TestTemplateRoundTrip(t *testing.T) {
	e := newEnv(t, envOptions{})
	spec := func(d string) *structpb.Struct {
		s, err := structpb.NewStruct(map[string]any{"data": d})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	roundTrip(t, crud[*v1.Template]{
		create: func(ctx context.Context, m *v1.Template) (*v1.Template, error) {
			return msgOf(e.tpl.Create(ctx, connect.NewRequest(&v1.CreateTemplateRequest{Template: m})))
		},
		get: func(ctx context.Context, name string) (*v1.Template, error) {
			return msgOf(e.tpl.Get(ctx, connect.NewRequest(&v1.GetRequest{Name: name})))
		},
		update: func(ctx context.Context, m *v1.Template) (*v1.Template, error) {
			return msgOf(e.tpl.Update(ctx, connect.NewRequest(&v1.UpdateTemplateRequest{Template: m})))
		},
		list: func(ctx context.Context, fs string) ([]*v1.Template, error) {
			r, err := e.tpl.List(ctx, connect.NewRequest(&v1.ListRequest{FieldSelector: fieldSel(fs)}))
			if err != nil {
				return nil, err
			}
			return r.Msg.GetItems(), nil
		},
		del: func(ctx context.Context, name, rv string) error {
			_, err := e.tpl.Delete(ctx, connect.NewRequest(&v1.DeleteRequest{Name: name, ResourceVersion: rv}))
			return err
		},
		obj: func(name string) *v1.Template {
			return &v1.Template{Metadata: meta(name, nil), Spec: spec(tplData)}
		},
		changed: func(m *v1.Template) *v1.Template {
			return &v1.Template{Metadata: m.GetMetadata(), Spec: spec(strings.ReplaceAll(tplData, "600", "900"))}
		},
	})
}

func TestWorkflowRoundTrip(t *testing.T) {
	e := newEnv(t, envOptions{})
	roundTrip(t, crud[*v1.Workflow]{
		create: func(ctx context.Context, m *v1.Workflow) (*v1.Workflow, error) {
			return msgOf(e.wf.Create(ctx, connect.NewRequest(&v1.CreateWorkflowRequest{Workflow: m})))
		},
		get: func(ctx context.Context, name string) (*v1.Workflow, error) {
			return msgOf(e.wf.Get(ctx, connect.NewRequest(&v1.GetRequest{Name: name})))
		},
		update: func(ctx context.Context, m *v1.Workflow) (*v1.Workflow, error) {
			return msgOf(e.wf.Update(ctx, connect.NewRequest(&v1.UpdateWorkflowRequest{Workflow: m})))
		},
		list: func(ctx context.Context, fs string) ([]*v1.Workflow, error) {
			r, err := e.wf.List(ctx, connect.NewRequest(&v1.ListRequest{FieldSelector: fieldSel(fs)}))
			if err != nil {
				return nil, err
			}
			return r.Msg.GetItems(), nil
		},
		del: func(ctx context.Context, name, rv string) error {
			_, err := e.wf.Delete(ctx, connect.NewRequest(&v1.DeleteRequest{Name: name, ResourceVersion: rv}))
			return err
		},
		obj: func(name string) *v1.Workflow {
			return &v1.Workflow{Metadata: meta(name, nil), Spec: mustStruct(t, `{"templateRef":"tpl","hardwareRef":"node1"}`)}
		},
		changed: func(m *v1.Workflow) *v1.Workflow {
			return &v1.Workflow{Metadata: m.GetMetadata(), Spec: mustStruct(t, `{"templateRef":"tpl2","hardwareRef":"node1"}`)}
		},
	})
}

// fieldSel turns the test's "name=x" into a field selector.
func fieldSel(s string) string {
	if s == "" {
		return ""
	}
	return "metadata." + s
}

func msgOf[T any](r *connect.Response[T], err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	return r.Msg, nil
}

func TestInvalidObjects(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	tests := []struct {
		name     string
		hw       *v1.Hardware
		wantText string
	}{
		{name: "bad MAC", hw: &v1.Hardware{Metadata: meta("x", nil),
			Spec: mustStruct(t, `{"interfaces":[{"dhcp":{"mac":"nope"}}]}`)}, wantText: "spec.interfaces[0].dhcp.mac"},
		{name: "unknown field", hw: &v1.Hardware{Metadata: meta("x", nil),
			Spec: mustStruct(t, `{"interfacez":[]}`)}, wantText: "interfacez"},
		{name: "wrong type", hw: &v1.Hardware{Metadata: meta("x", nil),
			Spec: mustStruct(t, `{"interfaces":"eth0"}`)}, wantText: "spec"},
		{name: "wrong kind", hw: &v1.Hardware{Kind: "Workflow", Metadata: meta("x", nil),
			Spec: mustStruct(t, hwSpec)}, wantText: "Workflow"},
		{name: "bad name", hw: &v1.Hardware{Metadata: meta("Not_A_Name", nil),
			Spec: mustStruct(t, hwSpec)}, wantText: "metadata.name"},
		{name: "no object", hw: nil, wantText: "Hardware"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.hw.Create(ctx, connect.NewRequest(&v1.CreateHardwareRequest{Hardware: tc.hw}))
			wantCode(t, "Create", err, connect.CodeInvalidArgument)
			if err != nil && !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("Create error %q does not mention %q", err, tc.wantText)
			}
		})
	}
}

// TestConnectJSON calls the API the way curl does: HTTP/1.1 POST with a JSON
// body (the Connect protocol).
func TestConnectJSON(t *testing.T) {
	e := newEnv(t, envOptions{})
	post := func(path, body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(e.url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("POST %s: decode: %v", path, err)
		}
		return resp.StatusCode, out
	}
	code, out := post("/anvil.v1.HardwareService/Create", `{"hardware":{"metadata":{"name":"node1","labels":{"rack":"a"}},"spec":`+hwSpec+`}}`)
	if code != http.StatusOK {
		t.Fatalf("Create = %d %v; want 200", code, out)
	}
	code, out = post("/anvil.v1.HardwareService/Get", `{"name":"node1"}`)
	if code != http.StatusOK {
		t.Fatalf("Get = %d %v; want 200", code, out)
	}
	md, _ := out["metadata"].(map[string]any)
	spec, _ := out["spec"].(map[string]any)
	if md["name"] != "node1" || md["namespace"] != "default" || out["kind"] != "Hardware" || out["apiVersion"] != "tinkerbell.org/v1alpha1" {
		t.Errorf("Get = %v; want Hardware default/node1", out)
	}
	ifaces, _ := spec["interfaces"].([]any)
	if len(ifaces) != 1 {
		t.Fatalf("Get spec = %v; want one interface", spec)
	}
	dhcp := ifaces[0].(map[string]any)["dhcp"].(map[string]any)
	if dhcp["mac"] != "3c:ec:ef:00:00:01" || dhcp["lease_time"] != float64(86400) {
		t.Errorf("Get dhcp = %v; want the manifest's field names and values", dhcp)
	}
	code, out = post("/anvil.v1.HardwareService/List", `{"labelSelector":"rack=a"}`)
	if items, _ := out["items"].([]any); code != http.StatusOK || len(items) != 1 {
		t.Errorf("List(rack=a) = %d %v; want one item", code, out)
	}
	code, out = post("/anvil.v1.HardwareService/Get", `{"name":"missing"}`)
	if code != http.StatusNotFound || out["code"] != "not_found" {
		t.Errorf("Get missing = %d %v; want 404 not_found", code, out)
	}
}

func TestWatch(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := e.hw.Watch(ctx, connect.NewRequest(&v1.WatchRequest{}))
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer stream.Close()
	next := func() *v1.HardwareEvent {
		t.Helper()
		if !stream.Receive() {
			t.Fatalf("Watch ended: %v", stream.Err())
		}
		return stream.Msg()
	}
	hw := &v1.Hardware{Metadata: meta("node1", nil), Spec: mustStruct(t, hwSpec)}
	created, err := msgOf(e.hw.Create(ctx, connect.NewRequest(&v1.CreateHardwareRequest{Hardware: hw})))
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.GetType() != v1.EventType_EVENT_TYPE_ADDED || ev.GetHardware().GetMetadata().GetName() != "node1" {
		t.Fatalf("first event = %v; want ADDED node1", ev)
	}
	created.Metadata.Labels = map[string]string{"rack": "b"}
	if _, err := e.hw.Update(ctx, connect.NewRequest(&v1.UpdateHardwareRequest{Hardware: created})); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.GetType() != v1.EventType_EVENT_TYPE_MODIFIED || ev.GetHardware().GetMetadata().GetLabels()["rack"] != "b" {
		t.Fatalf("second event = %v; want MODIFIED with rack=b", ev)
	}
	if _, err := e.hw.Delete(ctx, connect.NewRequest(&v1.DeleteRequest{Name: "node1"})); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.GetType() != v1.EventType_EVENT_TYPE_DELETED {
		t.Fatalf("third event = %v; want DELETED", ev)
	}
}

func TestWatchTooOld(t *testing.T) {
	e := newEnv(t, envOptions{watchHistory: 1})
	ctx := context.Background()
	var first string
	for _, mac := range []string{"01", "02", "03", "04"} {
		spec := strings.ReplaceAll(strings.ReplaceAll(hwSpec, "00:01", "00:"+mac), "10.0.0.10", "10.0.0.1"+mac)
		hw := &v1.Hardware{Metadata: meta("n"+mac, nil), Spec: mustStruct(t, spec)}
		got, err := msgOf(e.hw.Create(ctx, connect.NewRequest(&v1.CreateHardwareRequest{Hardware: hw})))
		if err != nil {
			t.Fatal(err)
		}
		if first == "" {
			first = got.GetMetadata().GetResourceVersion()
		}
	}
	stream, err := e.hw.Watch(ctx, connect.NewRequest(&v1.WatchRequest{ResourceVersion: first}))
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer stream.Close()
	for stream.Receive() {
	}
	wantCode(t, "Watch from a forgotten version", stream.Err(), connect.CodeOutOfRange)
}

const manifest = `apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata:
  name: node1
spec:
  interfaces:
  - dhcp:
      mac: "3c:ec:ef:00:00:01"
      hostname: node1
      ip: {address: 10.0.0.10, netmask: 255.255.255.0, gateway: 10.0.0.1}
    netboot: {allowPXE: true, allowWorkflow: true}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata:
  name: install
spec:
  data: |
    version: "0.1"
    name: install
    global_timeout: 600
    tasks:
    - name: os
      worker: "{{.device_1}}"
      actions:
      - name: write
        image: writefile
        timeout: 60
      - name: reboot
        image: reboot
        timeout: 30
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata:
  name: wf1
spec:
  templateRef: install
  hardwareRef: node1
  hardwareMap:
    device_1: "3c:ec:ef:00:00:01"
`

func apply(e *env, content string, dryRun bool) (*v1.ApplyResponse, error) {
	return msgOf(e.man.Apply(context.Background(), connect.NewRequest(&v1.ApplyRequest{Source: "test.yaml", Content: content, DryRun: dryRun})))
}

func actions(r *v1.ApplyResponse) string {
	var parts []string
	for _, o := range r.GetObjects() {
		parts = append(parts, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()+" "+o.GetAction())
	}
	return strings.Join(parts, "; ")
}

func TestApply(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	count := func() int {
		n := 0
		for _, l := range []func() (int, error){
			func() (int, error) {
				r, err := e.hw.List(ctx, connect.NewRequest(&v1.ListRequest{}))
				return len(r.Msg.GetItems()), err
			},
			func() (int, error) {
				r, err := e.tpl.List(ctx, connect.NewRequest(&v1.ListRequest{}))
				return len(r.Msg.GetItems()), err
			},
			func() (int, error) {
				r, err := e.wf.List(ctx, connect.NewRequest(&v1.ListRequest{}))
				return len(r.Msg.GetItems()), err
			},
		} {
			k, err := l()
			if err != nil {
				t.Fatal(err)
			}
			n += k
		}
		return n
	}

	t.Run("one bad document stores nothing", func(t *testing.T) {
		bad := manifest + "---\napiVersion: tinkerbell.org/v1alpha1\nkind: Hardware\nmetadata: {name: node2}\nspec:\n  interfaces:\n  - dhcp: {mac: not-a-mac}\n"
		_, err := apply(e, bad, false)
		wantCode(t, "Apply", err, connect.CodeInvalidArgument)
		if err != nil && !strings.Contains(err.Error(), "test.yaml:") {
			t.Errorf("Apply error %q does not name the file and line", err)
		}
		if n := count(); n != 0 {
			t.Errorf("after a failed Apply the store holds %d objects; want 0", n)
		}
	})
	t.Run("missing reference stores nothing", func(t *testing.T) {
		wfOnly := manifest[strings.LastIndex(manifest, "---"):]
		_, err := apply(e, wfOnly, false)
		wantCode(t, "Apply", err, connect.CodeInvalidArgument)
		if err != nil && !strings.Contains(err.Error(), "spec.templateRef") {
			t.Errorf("Apply error %q does not name spec.templateRef", err)
		}
	})
	t.Run("duplicate action names store nothing", func(t *testing.T) {
		// Lines: 1 apiVersion, 2 kind, 3 metadata, 4 spec, 5 data, then the
		// data's own lines; the second "a" is data line 6, file line 11.
		dup := "apiVersion: tinkerbell.org/v1alpha1\nkind: Template\nmetadata: {name: dup}\nspec:\n  data: |\n" +
			"    tasks:\n      - name: t\n        worker: \"{{.device_1}}\"\n        actions:\n" +
			"          - {name: a, image: x}\n          - {name: a, image: y}\n"
		_, err := apply(e, dup, false)
		wantCode(t, "Apply", err, connect.CodeInvalidArgument)
		if err != nil && (!strings.Contains(err.Error(), "test.yaml:11:") || !strings.Contains(err.Error(), `duplicate action name "a"`)) {
			t.Errorf("Apply error %q does not name the duplicate and its file line 11", err)
		}
		if n := count(); n != 0 {
			t.Errorf("after a failed Apply the store holds %d objects; want 0", n)
		}
	})
	t.Run("dry run stores nothing", func(t *testing.T) {
		r, err := apply(e, manifest, true)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := actions(r), "Hardware default/node1 created; Template default/install created; Workflow default/wf1 created"; got != want {
			t.Errorf("dry run = %q; want %q", got, want)
		}
		if n := count(); n != 0 {
			t.Errorf("after a dry run the store holds %d objects; want 0", n)
		}
	})
	t.Run("create", func(t *testing.T) {
		r, err := apply(e, manifest, false)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := actions(r), "Hardware default/node1 created; Template default/install created; Workflow default/wf1 created"; got != want {
			t.Errorf("Apply = %q; want %q", got, want)
		}
		if n := count(); n != 3 {
			t.Errorf("store holds %d objects; want 3", n)
		}
	})
	t.Run("reapply is unchanged", func(t *testing.T) {
		before, err := e.hw.Get(ctx, connect.NewRequest(&v1.GetRequest{Name: "node1"}))
		if err != nil {
			t.Fatal(err)
		}
		r, err := apply(e, manifest, false)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := actions(r), "Hardware default/node1 unchanged; Template default/install unchanged; Workflow default/wf1 unchanged"; got != want {
			t.Errorf("re-Apply = %q; want %q", got, want)
		}
		after, err := e.hw.Get(ctx, connect.NewRequest(&v1.GetRequest{Name: "node1"}))
		if err != nil {
			t.Fatal(err)
		}
		if a, b := before.Msg.GetMetadata().GetResourceVersion(), after.Msg.GetMetadata().GetResourceVersion(); a != b {
			t.Errorf("unchanged object was written: resourceVersion %s -> %s", a, b)
		}
	})
	t.Run("change is configured", func(t *testing.T) {
		r, err := apply(e, strings.Replace(manifest, "hostname: node1", "hostname: node1-new", 1), false)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := actions(r), "Hardware default/node1 configured; Template default/install unchanged; Workflow default/wf1 unchanged"; got != want {
			t.Errorf("Apply = %q; want %q", got, want)
		}
	})
	t.Run("warnings", func(t *testing.T) {
		r, err := apply(e, strings.Replace(manifest, "  hardwareRef: node1", "  hardwareRef: node1\n  colour: blue", 1), false)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.GetWarnings()) != 1 || !strings.Contains(r.GetWarnings()[0], "colour") {
			t.Errorf("warnings = %q; want one about colour", r.GetWarnings())
		}
	})
}

// TestAgentFlow drives a workflow through the API end to end: apply, let
// the engine render it, fetch and report each action, stream logs.
func TestAgentFlow(t *testing.T) {
	e := newEnv(t, envOptions{engine: true})
	ctx := context.Background()
	if _, err := apply(e, manifest, false); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	const agent = "3c:ec:ef:00:00:01"

	getAction := func() *v1.GetActionResponse {
		t.Helper()
		// The engine renders the workflow asynchronously; the long poll
		// returns as soon as an action is ready. Retry a bounded number of
		// times rather than asserting on time.
		for i := 0; i < 20; i++ {
			r, err := e.ag.GetAction(ctx, connect.NewRequest(&v1.GetActionRequest{AgentId: agent, Wait: durationpb.New(5 * time.Second)}))
			if connect.CodeOf(err) == connect.CodeNotFound {
				continue
			}
			if err != nil {
				t.Fatalf("GetAction: %v", err)
			}
			return r.Msg
		}
		t.Fatal("GetAction: no action after 20 polls")
		return nil
	}
	report := func(a *v1.GetActionResponse, st v1.ActionState) string {
		t.Helper()
		r, err := e.ag.ReportActionStatus(ctx, connect.NewRequest(&v1.ReportActionStatusRequest{
			WorkflowId: a.GetWorkflowId(), AgentId: agent, TaskId: a.GetTaskId(), ActionId: a.GetActionId(),
			ActionName: a.GetName(), ActionState: st, ExecutionStart: timestamppb.Now(), Message: "test",
		}))
		if err != nil {
			t.Fatalf("ReportActionStatus(%s, %v): %v", a.GetName(), st, err)
		}
		return r.Msg.GetWorkflowState()
	}

	var state string
	for _, want := range []string{"write", "reboot"} {
		a := getAction()
		if a.GetName() != want || a.GetWorkflowId() != "default/wf1" || a.GetAttempt() != 1 {
			t.Fatalf("GetAction = %v; want action %q of default/wf1, attempt 1", a, want)
		}
		report(a, v1.ActionState_ACTION_STATE_RUNNING)
		state = report(a, v1.ActionState_ACTION_STATE_SUCCESS)
	}
	if state != "SUCCESS" {
		t.Errorf("workflow state after the last action = %q; want SUCCESS", state)
	}
	wf, err := e.wf.Get(ctx, connect.NewRequest(&v1.GetRequest{Name: "wf1"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := wf.Msg.GetStatus().GetFields()["state"].GetStringValue(); got != "SUCCESS" {
		t.Errorf("stored workflow state = %q; want SUCCESS", got)
	}

	_, err = e.ag.GetAction(ctx, connect.NewRequest(&v1.GetActionRequest{AgentId: agent}))
	wantCode(t, "GetAction after the workflow ended", err, connect.CodeNotFound)
	_, err = e.ag.ReportActionStatus(ctx, connect.NewRequest(&v1.ReportActionStatusRequest{
		WorkflowId: "default/nope", AgentId: agent, ActionState: v1.ActionState_ACTION_STATE_RUNNING}))
	wantCode(t, "report on an unknown workflow", err, connect.CodeNotFound)
	_, err = e.ag.ReportActionStatus(ctx, connect.NewRequest(&v1.ReportActionStatusRequest{
		WorkflowId: "default/wf1", AgentId: agent, ActionName: "write", ActionState: v1.ActionState_ACTION_STATE_RUNNING}))
	wantCode(t, "report on an ended workflow", err, connect.CodeFailedPrecondition)
}

func TestLogs(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	stream := e.ag.StreamLogs(ctx)
	for i, line := range []string{"one", "two", "three"} {
		if err := stream.Send(&v1.LogLine{WorkflowId: "default/wf1", AgentId: "agent-1", ActionName: "write",
			Time: timestamppb.New(time.Unix(int64(i), 0)), Stream: "stdout", Line: line}); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	resp, err := stream.CloseAndReceive()
	if err != nil {
		t.Fatalf("StreamLogs: %v", err)
	}
	if n := resp.Msg.GetLinesAccepted(); n != 3 {
		t.Errorf("lines_accepted = %d; want 3", n)
	}
	tests := []struct {
		name string
		req  *v1.GetLogsRequest
		want string
	}{
		{name: "workflow", req: &v1.GetLogsRequest{WorkflowId: "default/wf1"}, want: "one two three"},
		{name: "agent", req: &v1.GetLogsRequest{AgentId: "agent-1"}, want: "one two three"},
		{name: "tail", req: &v1.GetLogsRequest{WorkflowId: "default/wf1", Tail: 2}, want: "two three"},
		{name: "unknown", req: &v1.GetLogsRequest{WorkflowId: "default/none"}, want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := e.logs.GetLogs(ctx, connect.NewRequest(tc.req))
			if err != nil {
				t.Fatalf("GetLogs: %v", err)
			}
			var got []string
			for _, l := range r.Msg.GetLines() {
				got = append(got, l.GetLine())
			}
			if strings.Join(got, " ") != tc.want {
				t.Errorf("GetLogs(%v) = %q; want %q", tc.req, got, tc.want)
			}
		})
	}
	_, err = e.logs.GetLogs(ctx, connect.NewRequest(&v1.GetLogsRequest{}))
	wantCode(t, "GetLogs with no IDs", err, connect.CodeInvalidArgument)

	bad := e.ag.StreamLogs(ctx)
	if err := bad.Send(&v1.LogLine{Line: "anonymous"}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("Send: %v", err)
	}
	_, err = bad.CloseAndReceive()
	wantCode(t, "StreamLogs of a line with no IDs", err, connect.CodeInvalidArgument)
}

// The inventory Anvil's agent sends with GetAction becomes its Hardware's
// status.attributes once an action is handed out; one that is not a JSON
// object, or is over the cap, leaves the stored one as it is.
func TestAgentInventory(t *testing.T) {
	e := newEnv(t, envOptions{engine: true})
	ctx := context.Background()
	if _, err := apply(e, manifest, false); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	const agent = "3c:ec:ef:00:00:01"
	inventory, err := os.ReadFile("../hwinfo/testdata/qemu-q35.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	getAction := func(inv []byte) {
		t.Helper()
		for range 20 { // the engine renders the workflow asynchronously
			_, err := e.ag.GetAction(ctx, connect.NewRequest(&v1.GetActionRequest{AgentId: agent,
				AgentAttributes: &v1.AgentAttributes{Inventory: inv}, Wait: durationpb.New(5 * time.Second)}))
			if connect.CodeOf(err) == connect.CodeNotFound {
				continue
			}
			if err != nil {
				t.Fatalf("GetAction: %v", err)
			}
			return
		}
		t.Fatal("GetAction: no action after 20 polls")
	}
	stored := func() *model.Attributes {
		t.Helper()
		obj, err := e.st.Get(ctx, model.KindHardware, "default", "node1")
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*model.Hardware).Status.Attributes
	}

	getAction(inventory)
	a := stored()
	if a == nil || a.Product == nil || a.Product.SerialNumber != "anvil-qemu-0001" || a.CPU.TotalThreads != 2 ||
		len(a.BlockDevices) != 2 || a.BlockDevices[1].SerialNumber != "anvil-disk-0001" || a.Anvil == nil || a.Anvil.MemoryBytes != 2014136<<10 {
		t.Fatalf("status.attributes = %+v; want the QEMU VM's inventory", a)
	}
	for _, bad := range [][]byte{[]byte(`["not", "an", "object"]`), []byte(`{"product": {"name": "` + strings.Repeat("x", 70<<10) + `"}}`)} {
		getAction(bad)
		if got := stored(); got == nil || got.Product == nil || got.Product.SerialNumber != "anvil-qemu-0001" {
			t.Errorf("after an inventory of %d bytes that is not kept, status.attributes = %+v; want the last good one", len(bad), got)
		}
	}
}

// The agent's inventory replaces the attributes but outOfBand, which the
// BMC poller wrote: it survives each report, and an outOfBand the agent
// sends (it has no say there) is dropped.
func TestAgentInventoryKeepsOutOfBand(t *testing.T) {
	e := newEnv(t, envOptions{engine: true})
	ctx := context.Background()
	if _, err := apply(e, manifest, false); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	const agent = "3c:ec:ef:00:00:01"
	hardware := func() *model.Hardware {
		t.Helper()
		obj, err := e.st.Get(ctx, model.KindHardware, "default", "node1")
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*model.Hardware)
	}
	oob := &model.OutOfBand{Source: model.OutOfBandSource{Machine: "bmc-node1", Provider: model.ProviderRedfish,
		ReadAt: time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)}, SerialNumber: "anvil-qemu-0001", Model: "PowerEdge R640"}
	hw := hardware()
	hw.Status.Attributes = &model.Attributes{Product: &model.Product{Name: "old"}, OutOfBand: oob}
	if _, err := e.st.Update(ctx, hw); err != nil {
		t.Fatal(err)
	}
	inventory, err := os.ReadFile("../hwinfo/testdata/qemu-q35.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	forged := bytes.Replace(inventory, []byte("{"), []byte(`{"outOfBand": {"source": {"machine": "forged"}, "serialNumber": "forged"},`), 1)
	for _, inv := range [][]byte{inventory, forged} {
		for range 20 { // the engine renders the workflow asynchronously
			_, err = e.ag.GetAction(ctx, connect.NewRequest(&v1.GetActionRequest{AgentId: agent,
				AgentAttributes: &v1.AgentAttributes{Inventory: inv}, Wait: durationpb.New(5 * time.Second)}))
			if connect.CodeOf(err) != connect.CodeNotFound {
				break
			}
		}
		if err != nil {
			t.Fatalf("GetAction: %v", err)
		}
		a := hardware().Status.Attributes
		if a == nil || a.Product == nil || a.Product.SerialNumber != "anvil-qemu-0001" {
			t.Fatalf("the agent's report not kept: %+v", a)
		}
		if !reflect.DeepEqual(a.OutOfBand, oob) {
			t.Errorf("outOfBand after the agent's report = %+v; want the BMC's %+v", a.OutOfBand, oob)
		}
	}
}
