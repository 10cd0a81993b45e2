package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/anvilproj/anvil/deploy/crds"
	"github.com/anvilproj/anvil/deploy/crds/crdstest"
	"github.com/anvilproj/anvil/internal/kubetest"
)

// TestKubernetesModeInstall is TestInstall with Anvil's store a real
// kube-apiserver and etcd (`anvil serve --store kubernetes`): the
// Hardware, Template and Workflow are created as Kubernetes objects
// through the API server, as kubectl would, never through Anvil; a blank
// BIOS machine PXE boots, runs the workflow to the installed OS and boots
// it from disk. The Workflow read back from the API server is SUCCESS with
// every action SUCCESS and timed, and the Hardware there has allowPXE off
// (the template's toggleAllowNetboot), which is what sent the second boot
// to the disk.
func TestKubernetesModeInstall(t *testing.T) {
	requireLab(t)
	kubetest.Binaries(t) // before the boot environment is built: skip (or fail in CI) early
	prepareInstall(t)
	ns := newNetns(t, "kube")
	ns.bridge("br0", serverIP+"/24", "fd77::1/64")
	ns.tap("br0", "tap0")
	// The API server runs on the host (the test starts it and speaks to
	// it) and listens on the host's end of a veth into the lab, which the
	// Anvil inside reaches: neither side reaches the other's loopback.
	apiIP := ns.hostLink()
	c := kubetest.StartOn(t, apiIP)
	defs, err := crds.All()
	if err != nil {
		t.Fatal(err)
	}
	crdstest.Install(t, c, defs)
	kubeconfig := c.WriteKubeconfig(t, t.TempDir())
	a := startAnvil(t, ns, serverIP, "--bootenv-dir", installLab.bootEnv, "--images-dir", installLab.images,
		"--store", "kubernetes", "--kubeconfig", kubeconfig)

	name, mac, ip := "node-kube", "52:54:00:77:01:30", "10.77.0.130"
	paths := kubeCreate(t, c, defs, installYAML(name, mac, ip, serverIP, "http://"+serverIP+":7080/images/os.raw.zst"))

	run := runInstall(t, ns, a, name, mac, nil)
	// What kubectl get would show: the objects as the API server holds them.
	wf := assertInstalledFrom(t, a, run, name, mac, ip, func() storedWorkflow {
		var wf storedWorkflow
		kubeGet(t, c, paths["Workflow"]+"/"+name+"-install", &wf)
		return wf
	})
	var hw struct {
		Spec struct {
			Interfaces []struct {
				Netboot struct {
					AllowPXE *bool `json:"allowPXE"`
				} `json:"netboot"`
			} `json:"interfaces"`
		} `json:"spec"`
	}
	kubeGet(t, c, paths["Hardware"]+"/"+name, &hw)
	if len(hw.Spec.Interfaces) != 1 || hw.Spec.Interfaces[0].Netboot.AllowPXE == nil || *hw.Spec.Interfaces[0].Netboot.AllowPXE {
		t.Errorf("after the install, the Hardware in the API server does not have allowPXE false: %+v", hw.Spec.Interfaces)
	}
	x := timings(0, run, wf)
	t.Logf("Kubernetes mode install: QEMU start → agent %.1fs, → workflow SUCCESS %.1fs (image write %.1fs), → installed OS %.1fs",
		x.agent.Seconds(), x.success.Seconds(), x.write.Seconds(), x.installed.Seconds())
	record := a.cli(t, "logs", "hardware/"+name)
	assertRecord(t, record, "http", "os.raw.zst", "200")
}

// kubeCreate creates each object of the YAML manifest in the namespace
// default, as `kubectl create -f` does (a POST to its kind's collection),
// and returns each kind's collection path.
func kubeCreate(t *testing.T, c *kubetest.Cluster, defs []crds.Definition, manifest string) map[string]string {
	t.Helper()
	paths := map[string]string{}
	for _, d := range defs {
		paths[d.Kind] = d.Path("default")
	}
	for _, doc := range strings.Split(manifest, "\n---\n") {
		obj, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("manifest: %v\n%s", err, doc)
		}
		var head struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(obj, &head); err != nil {
			t.Fatal(err)
		}
		path, ok := paths[head.Kind]
		if !ok {
			t.Fatalf("manifest: no CRD for kind %q", head.Kind)
		}
		c.JSON(t, http.MethodPost, path, obj, http.StatusCreated)
	}
	return paths
}

// kubeGet reads the object at path from the API server into out.
func kubeGet(t *testing.T, c *kubetest.Cluster, path string, out any) {
	t.Helper()
	code, b := c.Do(t, http.MethodGet, path, nil, "application/json")
	if code != http.StatusOK {
		t.Fatalf("GET %s: status %d: %s", path, code, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("GET %s: %v in %.300q", path, err, b)
	}
}
