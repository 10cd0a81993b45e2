package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// profilesYAML is two machines told apart by a label, and two boot
// profiles selecting them: each profile boots Debian's kernel with
// fetchinit as its "OS", whose command line carries the address and the
// Ignition config URL the profile's templated kernel arguments give.
const profilesYAML = `apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata:
  name: worker-1
  labels: {role: worker}
  annotations:
    anvil.dev/inventory-vars: '{"ssh_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIWorkerOneKey worker-1@lab"}'
spec:
  interfaces:
  - dhcp: {mac: "52:54:00:77:00:31", hostname: worker-1, ip: {address: 10.77.0.31, netmask: 255.255.255.0, gateway: 10.77.0.1}}
    netboot: {allowPXE: true}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata:
  name: store-1
  labels: {role: storage}
  annotations:
    anvil.dev/inventory-vars: '{"ssh_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIStoreOneKey store-1@lab"}'
spec:
  interfaces:
  - dhcp: {mac: "52:54:00:77:00:32", hostname: store-1, ip: {address: 10.77.0.32, netmask: 255.255.255.0, gateway: 10.77.0.1}}
    netboot: {allowPXE: true}
---
apiVersion: anvil.dev/v1alpha1
kind: BootProfile
metadata: {name: worker}
spec:
  selector: ["role=worker"]
  kernel: /assets/e2e/vmlinuz
  initrds: [/assets/e2e/initramfs-fetch]
  kernelArgs: ["console=ttyS0", "fetchinit.ip={{ .IP }}/24", "ignition.config.url={{ .ConfigURL \"ignition\" }}"]
  configs:
    ignition:
      format: butane
      template: |
        variant: flatcar
        version: 1.0.0
        passwd:
          users:
            - name: core
              ssh_authorized_keys: ["{{ .Vars.ssh_key }}"]
        storage:
          files:
            - path: /etc/hostname
              mode: 0644
              contents: {inline: "{{ .Hostname }}"}
            - path: /etc/anvil-profile
              contents: {inline: worker}
---
apiVersion: anvil.dev/v1alpha1
kind: BootProfile
metadata: {name: storage}
spec:
  selector: ["role in (storage,db)"]
  kernel: /assets/e2e/vmlinuz
  initrds: [/assets/e2e/initramfs-fetch]
  kernelArgs: ["console=ttyS0", "fetchinit.ip={{ .IP }}/24", "ignition.config.url={{ .ConfigURL \"ignition\" }}"]
  configs:
    ignition:
      format: butane
      template: |
        variant: flatcar
        version: 1.0.0
        passwd:
          users:
            - name: core
              ssh_authorized_keys: ["{{ .Vars.ssh_key }}"]
        storage:
          files:
            - path: /etc/hostname
              mode: 0644
              contents: {inline: "{{ .Hostname }}"}
            - path: /etc/anvil-profile
              contents: {inline: storage}
`

var configLine = regexp.MustCompile(`ANVIL-E2E-CONFIG url=(\S+) sha256=([0-9a-f]{64}) bytes=(\d+)`)

// TestBootProfiles: two machines without workflows, selected by label into
// two profiles, boot the profile's kernel and initramfs; inside the VM the
// initramfs fetches ignition.config.url and prints the digest of what it
// got, which must be the valid Ignition of that host.
func TestBootProfiles(t *testing.T) {
	requireLab(t)
	ns := newNetns(t, "profiles")
	ns.bridge("br0", serverIP+"/24", "fd77::1/64")
	ns.tap("br0", "tap0")
	a := startAnvil(t, ns, serverIP)
	dir := filepath.Join(a.data, "assets", "e2e")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, assets.kernel, filepath.Join(dir, "vmlinuz"))
	copyFile(t, assets.fetchInitrd, filepath.Join(dir, "initramfs-fetch"))
	a.apply(t, profilesYAML)

	for _, m := range []struct{ name, mac, ip, profile, key string }{
		{"worker-1", "52:54:00:77:00:31", "10.77.0.31", "worker", "WorkerOneKey"},
		{"store-1", "52:54:00:77:00:32", "10.77.0.32", "storage", "StoreOneKey"},
	} {
		t.Run(m.name, func(t *testing.T) {
			res := ns.boot(vm{name: m.name, mac: m.mac, tap: "tap0"}, vmTimeout)
			got := configLine.FindStringSubmatch(res.serial)
			if got == nil {
				t.Fatalf("%s printed no config line:\n%s", m.name, tail(res.serial, 40))
			}
			url := fmt.Sprintf("http://%s:7080/configs/%s/ignition", serverIP, m.mac)
			if got[1] != url {
				t.Errorf("the VM fetched %s; want %s", got[1], url)
			}
			// What the server serves for the host, fetched again: the same
			// bytes the VM got, and the host's own Ignition.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			body, err := ns.exec(ctx, "curl", "-fsS", url)
			if err != nil {
				t.Fatalf("curl %s: %v\n%s", url, err, body)
			}
			sum := sha256.Sum256([]byte(body))
			if hex.EncodeToString(sum[:]) != got[2] {
				t.Errorf("the VM's digest %s is not that of the server's config %s", got[2], hex.EncodeToString(sum[:]))
			}
			var ign struct {
				Ignition struct{ Version string } `json:"ignition"`
				Passwd   struct {
					Users []struct {
						Name              string   `json:"name"`
						SSHAuthorizedKeys []string `json:"sshAuthorizedKeys"`
					} `json:"users"`
				} `json:"passwd"`
				Storage struct {
					Files []struct {
						Path     string `json:"path"`
						Contents struct {
							Source string `json:"source"`
						} `json:"contents"`
					} `json:"files"`
				} `json:"storage"`
			}
			if err := json.Unmarshal([]byte(body), &ign); err != nil {
				t.Fatalf("the config is not JSON: %v\n%s", err, body)
			}
			if !strings.HasPrefix(ign.Ignition.Version, "3.") {
				t.Errorf("ignition.version %q; want 3.x", ign.Ignition.Version)
			}
			if len(ign.Passwd.Users) != 1 || len(ign.Passwd.Users[0].SSHAuthorizedKeys) != 1 ||
				!strings.Contains(ign.Passwd.Users[0].SSHAuthorizedKeys[0], m.key) {
				t.Errorf("users %+v; want core with %s's key", ign.Passwd.Users, m.name)
			}
			files := map[string]string{}
			for _, f := range ign.Storage.Files {
				files[f.Path] = f.Contents.Source
			}
			if !strings.Contains(files["/etc/hostname"], m.name) {
				t.Errorf("/etc/hostname source %q; want %s", files["/etc/hostname"], m.name)
			}
			if !strings.Contains(files["/etc/anvil-profile"], m.profile) {
				t.Errorf("/etc/anvil-profile source %q; want profile %s", files["/etc/anvil-profile"], m.profile)
			}
			// The server's record says which profile and why.
			record := a.cli(t, "logs", "hardware/"+m.name)
			assertRecord(t, record, "http", "auto.ipxe", m.profile)
			assertRecord(t, record, "http", "/configs/", "200")
			if !strings.Contains(res.serial, "fetchinit.ip="+m.ip+"/24") && !strings.Contains(record, m.ip) {
				t.Errorf("the profile's templated address %s is not on the command line", m.ip)
			}
		})
	}
}
