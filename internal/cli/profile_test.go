package cli

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestBootProfilesEndToEnd: the profile example applies (dry run first,
// then for real, then unchanged), get and describe show it, and a machine
// it selects gets its kernel with the per-machine Ignition URL from the
// real server's script route.
func TestBootProfilesEndToEnd(t *testing.T) {
	srv := startServer(t)
	const file = examples + "/profiles/flatcar.yaml"

	out := mustRun(t, srv, "apply", "--dry-run", "-f", file)
	if !strings.Contains(out, "bootprofile/flatcar-worker created") {
		t.Errorf("dry run output %q lacks bootprofile/flatcar-worker created", out)
	}
	if out := mustRun(t, srv, "get", "bootprofiles"); !strings.Contains(out, "No bootprofile found") {
		t.Errorf("after a dry run, get bootprofiles = %q; want none", out)
	}
	mustRun(t, srv, "apply", "-f", file)
	if out := mustRun(t, srv, "apply", "-f", file); strings.Count(out, "unchanged") != 3 {
		t.Errorf("re-apply output = %q; want 3 unchanged", out)
	}
	out = mustRun(t, srv, "get", "bp", "-o", "wide")
	for _, w := range []string{"SELECTOR", "flatcar-worker", "role=worker | role in (gpu,storage),site=lab", "/assets/flatcar/flatcar_production_pxe.vmlinuz", "ignition,user-data"} {
		if !strings.Contains(out, w) {
			t.Errorf("get bp -o wide lacks %q:\n%s", w, out)
		}
	}
	out = mustRun(t, srv, "describe", "bootprofile", "flatcar-worker")
	for _, w := range []string{"Priority:    0", "ignition (butane,", "ignition.config.url={{ .ConfigURL \"ignition\" }}", "spec.bootProfileRef): worker-02"} {
		if !strings.Contains(out, w) {
			t.Errorf("describe bootprofile lacks %q:\n%s", w, out)
		}
	}

	for mac, reason := range map[string]string{
		"52:54:00:6a:00:01": "boot profile flatcar-worker (selected by role=worker)",
		"52:54:00:6a:00:02": "boot profile flatcar-worker (named by spec.bootProfileRef)",
	} {
		resp, err := http.Get(srv + "/ipxe/script/" + mac + "/auto.ipxe")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, w := range []string{reason, srv + "/assets/flatcar/flatcar_production_pxe.vmlinuz", "ignition.config.url=" + srv + "/configs/" + mac + "/ignition",
			"initrd " + srv + "/assets/flatcar/flatcar_production_pxe_image.cpio.gz"} {
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), w) {
				t.Errorf("script of %s (%d) lacks %q:\n%s", mac, resp.StatusCode, w, body)
			}
		}
	}
}
