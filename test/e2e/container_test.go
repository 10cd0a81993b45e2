package e2e

import (
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/oci/ocitest"
)

// containerInstallYAML is installYAML with its writefile action run as
// Tinkerbell runs it: the upstream image, in a container (runtime:
// container; Anvil also implements writefile natively), with the
// environment upstream's writefile requires. The template keeps its
// upstream image name: the server's mirror setting redirects it.
func containerInstallYAML(name, mac, ip, server, imageURL string) string {
	y := installYAML(name, mac, ip, server, imageURL)
	const native = "            image: quay.io/tinkerbell/actions/writefile:v1.0.0\n            timeout: 60\n            environment:\n"
	container := "            image: quay.io/tinkerbell/actions/writefile:v1.0.0\n            runtime: container\n            timeout: 120\n" +
		"            environment:\n              UID: \"0\"\n              GID: \"0\"\n              DIRMODE: \"0755\"\n"
	if !strings.Contains(y, native) {
		panic("installYAML's writefile action changed")
	}
	return strings.Replace(y, native, container, 1)
}

// TestInstallContainerAction: a machine is installed with one action that
// the boot environment's agent pulls from a registry inside the lab (the
// upstream writefile program, rebuilt FROM scratch and pushed under its
// quay.io name; the server's --registry-mirror sends quay.io there) and
// runs in a container on the machine: the action writes the installed
// OS's boot configuration, the workflow ends SUCCESS, the installed OS
// boots, and the container's output and the choice are in `anvil logs`.
func TestInstallContainerAction(t *testing.T) {
	requireLab(t)
	prepareInstall(t)
	ns := newNetns(t, "oci")
	ns.bridge("br0", serverIP+"/24", "fd77::1/64")
	ns.tap("br0", "tap0")

	// One registry, two listeners on its storage: loopback for the test
	// to push to, and the lab's network for the machine.
	reg := ocitest.NewRegistry(t)
	reg.Push(t, reg.Ref("tinkerbell/actions/writefile:v1.0.0"), ocitest.UpstreamImage(t, "writefile"))
	labRegistry := listenInNetns(t, ns, serverIP+":5000", reg.Server.Config.Handler)

	a := startAnvil(t, ns, serverIP, "--bootenv-dir", installLab.bootEnv, "--images-dir", installLab.images,
		"--registry-mirror", "quay.io=http://"+labRegistry)
	name, mac, ip := "node-oci", "52:54:00:77:01:30", "10.77.0.130"
	a.apply(t, containerInstallYAML(name, mac, ip, serverIP, "http://"+serverIP+":7080/images/os.raw.zst"))

	run := runInstall(t, ns, a, name, mac, nil)
	assertInstalled(t, a, run, name, mac, ip)
	if reg.Requests("GET /v2/tinkerbell/actions/writefile/manifests/v1.0.0") == 0 {
		t.Error("the machine never asked the lab's registry for the image")
	}
	logs := a.cli(t, "logs", "workflow/"+name+"-install")
	for _, want := range []string{
		"running quay.io/tinkerbell/actions/writefile:v1.0.0 (attempt 1) in a container (runtime: container)",
		"pulling quay.io/tinkerbell/actions/writefile:v1.0.0 from mirror http://" + labRegistry,
		`running ["/usr/bin/writefile"] in a container of quay.io/tinkerbell/actions/writefile:v1.0.0`,
		`msg="Successfully wrote file" filePath=/syslinux.cfg blockDevice=/dev/vda1`, // upstream writefile's own line
		"running quay.io/tinkerbell/actions/image2disk:v1.0.0 (attempt 1) natively (native image2disk)",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("`anvil logs workflow/%s-install` lacks %q:\n%s", name, want, logs)
		}
	}
}
