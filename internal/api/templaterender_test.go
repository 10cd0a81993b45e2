package api_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/audit"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// TestTemplateRender: Render answers what a Reprovision's workflow
// renders to, to callers who may read the namespace, writes nothing and
// is not audited; a template that fails is an answer, with its line.
func TestTemplateRender(t *testing.T) {
	e, al := newAuthEnv(t)
	ctx := context.Background()
	resp, err := e.tpl.Render(ctx, as("acme-viewer", &v1.RenderTemplateRequest{Namespace: "acme", Template: "t1", Hardware: "n1"}))
	if err != nil {
		t.Fatalf("Render as acme's viewer: %v", err)
	}
	m := resp.Msg
	if m.GetError() != "" || m.GetTasks() != 1 || m.GetActions() != 1 || !strings.Contains(m.GetOutput(), `worker: "52:54:00:0a:00:01"`) ||
		m.GetHardwareMap()["device_1"] != "52:54:00:0a:00:01" {
		t.Errorf("Render = %+v; want t1 for n1, its worker n1's MAC", m)
	}

	_, err = e.tpl.Render(ctx, as("globex-op", &v1.RenderTemplateRequest{Namespace: "acme", Template: "t1", Hardware: "n1"}))
	denied(t, "render acme's template", err, connect.CodePermissionDenied)
	_, err = e.tpl.Render(ctx, as("acme-op", &v1.RenderTemplateRequest{Namespace: "acme", Template: "nope", Hardware: "n1"}))
	wantCode(t, "render a missing template", err, connect.CodeNotFound)
	_, err = e.tpl.Render(ctx, as("acme-op", &v1.RenderTemplateRequest{Namespace: "acme", Template: "t1"}))
	wantCode(t, "render without hardware", err, connect.CodeInvalidArgument)

	bad := "version: \"0.1\"\nname: bad\ntasks:\n- name: {{ .nope }}\n"
	if _, err := e.st.Create(ctx, &model.Template{TypeMeta: model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindTemplate},
		ObjectMeta: model.ObjectMeta{Namespace: "acme", Name: "bad"}, Spec: model.TemplateSpec{Data: &bad}}); err != nil {
		t.Fatal(err)
	}
	resp, err = e.tpl.Render(ctx, as("acme-op", &v1.RenderTemplateRequest{Namespace: "acme", Template: "bad", Hardware: "n1"}))
	if err != nil || resp.Msg.GetLine() != 4 || !strings.Contains(resp.Msg.GetError(), `map has no entry for key "nope"`) {
		t.Errorf("Render of a missing key = %+v, %v; want the error at line 4", resp, err)
	}

	if objs, _, err := e.st.List(ctx, model.KindWorkflow, store.ListOptions{}); err != nil || len(objs) != 1 {
		t.Errorf("after Render the store holds %d workflows (%v); want the one applied", len(objs), err)
	}
	recs, err := al.List(audit.Filter{Procedure: "Render"})
	if err != nil || len(recs) != 0 {
		t.Errorf("Render was audited: %v %v", recs, err)
	}
}
