package server

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store/backend"
	"github.com/anvilproj/anvil/internal/testtool"
)

// TestKubernetesSetNetboot: HardwareService.SetNetboot against `anvil
// serve --store kubernetes` writes the netboot flags asked for and
// nothing else — a field Anvil does not model, a label another tool set
// on the API server a moment before (whether or not this replica's cache
// has seen it yet), the other interface — and a stale resourceVersion is
// refused (ABORTED) without a write.
func TestKubernetesSetNetboot(t *testing.T) {
	c, kubeconfig := kubeCluster(t)
	httpBase, _, _, _, _ := startWith(t, func(cfg *Config) {
		cfg.Store = backend.Config{Kind: backend.Kubernetes, Kubeconfig: kubeconfig}
	})
	hwc := anvilv1connect.NewHardwareServiceClient(http.DefaultClient, httpBase)
	ctx := context.Background()

	c.JSON(t, http.MethodPost, tinkPath+"hardware", map[string]any{
		"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware",
		"metadata": map[string]any{"name": "node08", "namespace": "default", "labels": map[string]any{"rack": "1"}},
		"spec": map[string]any{
			"interfaces": []any{
				map[string]any{"dhcp": map[string]any{"mac": "3c:ec:ef:12:34:08", "ip": map[string]any{"address": "10.20.0.8", "netmask": "255.255.255.0"}},
					"netboot": map[string]any{"allowPXE": true, "allowWorkflow": true}},
				map[string]any{"dhcp": map[string]any{"mac": "3c:ec:ef:12:35:08", "ip": map[string]any{"address": "10.20.0.9", "netmask": "255.255.255.0"}}},
			},
			"vendorSpecific": map[string]any{"rackUnit": "U18"}, // not Anvil's: must survive
		},
	}, http.StatusCreated)
	var seen string
	testtool.WaitFor(t, "Anvil sees the Hardware", func() bool {
		r, err := hwc.Get(ctx, connect.NewRequest(&v1.GetRequest{Name: "node08"}))
		if err == nil {
			seen = r.Msg.GetMetadata().GetResourceVersion()
		}
		return err == nil
	})

	// Another tool labels it on the API server; at once, deny netboot
	// on the first interface.
	if code, b := c.MergePatch(t, tinkPath+"hardware/node08", map[string]any{"metadata": map[string]any{"labels": map[string]any{"owner": "capt"}}}); code != http.StatusOK {
		t.Fatalf("label Hardware: %d %s", code, b)
	}
	resp, err := hwc.SetNetboot(ctx, connect.NewRequest(&v1.SetNetbootRequest{Hardware: "node08", AllowPxe: model.Bool(false), Interfaces: []string{"3c:ec:ef:12:34:08"}}))
	if err != nil {
		t.Fatalf("SetNetboot: %v", err)
	}
	if ch := resp.Msg.GetChanges(); len(ch) != 1 || ch[0].GetField() != "allowPXE" || ch[0].GetAfter() {
		t.Errorf("changes %v; want allowPXE false on the first interface", ch)
	}
	hw := c.JSON(t, http.MethodGet, tinkPath+"hardware/node08", nil, http.StatusOK)
	spec := hw["spec"].(map[string]any)
	ifcs := spec["interfaces"].([]any)
	if nb := ifcs[0].(map[string]any)["netboot"].(map[string]any); nb["allowPXE"] != false || nb["allowWorkflow"] != true {
		t.Errorf("first interface's netboot %v; want allowPXE false, allowWorkflow true", nb)
	}
	if nb, ok := ifcs[1].(map[string]any)["netboot"]; ok {
		t.Errorf("second interface got netboot %v; want none (not asked)", nb)
	}
	if v, _ := spec["vendorSpecific"].(map[string]any); v["rackUnit"] != "U18" {
		t.Errorf("spec.vendorSpecific = %v after SetNetboot; want it kept", spec["vendorSpecific"])
	}
	if l := hw["metadata"].(map[string]any)["labels"].(map[string]any); l["owner"] != "capt" || l["rack"] != "1" {
		t.Errorf("labels %v after SetNetboot; want the other tool's kept", l)
	}

	// With the version read before both writes: refused, nothing written.
	rv := hw["metadata"].(map[string]any)["resourceVersion"]
	_, err = hwc.SetNetboot(ctx, connect.NewRequest(&v1.SetNetbootRequest{Hardware: "node08", AllowPxe: model.Bool(true), ResourceVersion: seen}))
	if connect.CodeOf(err) != connect.CodeAborted {
		t.Errorf("SetNetboot with resourceVersion %s (stale): %v; want ABORTED", seen, err)
	}
	if now := c.JSON(t, http.MethodGet, tinkPath+"hardware/node08", nil, http.StatusOK); now["metadata"].(map[string]any)["resourceVersion"] != rv {
		t.Errorf("a refused SetNetboot wrote the Hardware")
	}
}
