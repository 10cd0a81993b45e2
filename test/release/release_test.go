package release

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// buildRelease runs scripts/release.sh into a new directory under umask,
// and returns the directory. version is the same for both builds, asked
// of git once: a tree edited while the test runs is another release.
func buildRelease(t *testing.T, root, version, umask string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "dist-"+umask)
	cmd := exec.Command("bash", "-c", "umask "+umask+" && exec scripts/release.sh")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "OUT="+out, "VERSION="+version)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release.sh (umask %s): %v\n%s", umask, err, b)
	}
	return out
}

func list(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestRelease builds the release twice and checks it is reproducible and
// complete. Cold (no Go build cache) it compiles everything for two
// architectures; warm it links and packages (docs/install.md has both
// costs).
func TestRelease(t *testing.T) {
	testtool.RequireBinary(t, "dpkg-deb", "dpkg")
	testtool.RequireBinary(t, "sha256sum", "coreutils")
	if runtime.GOOS != "linux" {
		testtool.Need(t, "linux (the release is built on Linux)")
	}
	root := testtool.ModuleRoot(t)
	v, err := exec.Command("git", "-C", root, "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		t.Fatalf("git describe: %v", err)
	}
	version := strings.TrimSpace(string(v))
	a := buildRelease(t, root, version, "022")
	b := buildRelease(t, root, version, "077")

	names := list(t, a)
	if got := list(t, b); !slices.Equal(names, got) {
		t.Fatalf("the two builds made different files:\n%q\n%q", names, got)
	}
	for _, n := range names {
		x, err := os.ReadFile(filepath.Join(a, n))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(filepath.Join(b, n))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between two builds of one commit", n)
		}
	}

	// Every artefact, per architecture, with its SBOM.
	var debs []string
	for _, arch := range []string{"amd64", "arm64"} {
		deb := ""
		for _, n := range names {
			if strings.HasPrefix(n, "anvil_") && strings.HasSuffix(n, "_"+arch+".deb") {
				deb = n
				debs = append(debs, filepath.Join(a, n))
			}
		}
		if deb == "" {
			t.Errorf("no .deb for %s in %q", arch, names)
		}
		for _, n := range []string{"anvil-linux-" + arch, "anvil-agent-linux-" + arch, "anvil-image-linux-" + arch + ".tar", deb} {
			for _, f := range []string{n, n + ".cdx.json"} {
				if !slices.Contains(names, f) {
					t.Errorf("release lacks %s", f)
				}
			}
		}
	}

	// SHA256SUMS covers every other file and is right.
	sums, err := os.ReadFile(filepath.Join(a, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Count(string(sums), "\n"), len(names)-1; got != want {
		t.Errorf("SHA256SUMS has %d lines; want %d (every artefact but itself)", got, want)
	}
	check := exec.Command("sha256sum", "--check", "--strict", "SHA256SUMS")
	check.Dir = a
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("sha256sum --check: %v\n%s", err, out)
	}

	t.Run("deb", func(t *testing.T) { checkDeb(t, debs[0]) })
	t.Run("sbom", func(t *testing.T) { checkSBOM(t, a, names) })
	t.Run("binary", func(t *testing.T) { checkBinary(t, root, filepath.Join(a, "anvil-linux-"+runtime.GOARCH)) })
}

// checkDeb: the package's files where docs/install.md says, owned by root
// with their modes, the config a conffile, the maintainer scripts there.
func checkDeb(t *testing.T, deb string) {
	out, err := exec.Command("dpkg-deb", "--contents", deb).Output()
	if err != nil {
		t.Fatalf("dpkg-deb --contents %s: %v", deb, err)
	}
	want := map[string]string{ // path: mode
		"./usr/bin/anvil":                    "-rwxr-xr-x",
		"./usr/lib/anvil/anvil-agent":        "-rwxr-xr-x",
		"./lib/systemd/system/anvil.service": "-rw-r--r--",
		"./etc/anvil/anvil.yaml":             "-rw-r--r--",
		"./usr/share/doc/anvil/install.md":   "-rw-r--r--",
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("dpkg-deb --contents line %q", line)
		}
		if f[1] != "root/root" {
			t.Errorf("%s owned by %s; want root/root", f[len(f)-1], f[1])
		}
		if mode, ok := want[f[len(f)-1]]; ok {
			if f[0] != mode {
				t.Errorf("%s has mode %s; want %s", f[len(f)-1], f[0], mode)
			}
			delete(want, f[len(f)-1])
		}
	}
	for p := range want {
		t.Errorf("the .deb lacks %s", p)
	}
	dir := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "--control", deb, dir).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --control: %v\n%s", err, out)
	}
	conf, err := os.ReadFile(filepath.Join(dir, "conffiles"))
	if err != nil || strings.TrimSpace(string(conf)) != "/etc/anvil/anvil.yaml" {
		t.Errorf("conffiles = %q, %v; want /etc/anvil/anvil.yaml", conf, err)
	}
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		if fi, err := os.Stat(filepath.Join(dir, s)); err != nil || fi.Mode().Perm()&0o100 == 0 {
			t.Errorf("maintainer script %s: %v, want it executable", s, err)
		}
	}
	// Remove keeps the data; only purge deletes it.
	postrm, _ := os.ReadFile(filepath.Join(dir, "postrm"))
	if i := strings.Index(string(postrm), "rm -rf /var/lib/anvil"); i < 0 || !strings.Contains(string(postrm[:i]), "purge)") {
		t.Errorf("postrm deletes /var/lib/anvil outside its purge case:\n%s", postrm)
	}
}

// checkSBOM: each SBOM is CycloneDX naming its artefact by the SHA-256
// SHA256SUMS gives, and lists Anvil's own module.
func checkSBOM(t *testing.T, dir string, names []string) {
	sums, _ := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	for _, n := range names {
		if !strings.HasSuffix(n, ".cdx.json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			BOMFormat string `json:"bomFormat"`
			Metadata  struct {
				Component struct {
					Name   string `json:"name"`
					Hashes []struct{ Content string }
				}
			}
			Components []struct{ PURL string }
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		art := strings.TrimSuffix(n, ".cdx.json")
		if doc.BOMFormat != "CycloneDX" || doc.Metadata.Component.Name != art || len(doc.Metadata.Component.Hashes) != 1 ||
			!strings.Contains(string(sums), doc.Metadata.Component.Hashes[0].Content+"  "+art+"\n") {
			t.Errorf("%s does not name %s with the SHA-256 SHA256SUMS has for it", n, art)
		}
		found := false
		for _, c := range doc.Components {
			found = found || strings.HasPrefix(c.PURL, "pkg:golang/github.com/anvilproj/anvil@")
		}
		if !found {
			t.Errorf("%s does not list github.com/anvilproj/anvil", n)
		}
	}
}

// checkBinary: the built anvil says the commit and the commit's date, and
// accepts the packaged default config.
func checkBinary(t *testing.T, root, anvil string) {
	commit, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	gitDate := exec.Command("git", "-C", root, "log", "-1", "--format=%cd", "--date=format-local:%Y-%m-%dT%H:%M:%SZ")
	gitDate.Env = append(os.Environ(), "TZ=UTC")
	date, err := gitDate.Output()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(anvil, "version").Output()
	if err != nil {
		t.Fatalf("anvil version: %v", err)
	}
	want := "commit " + strings.TrimSpace(string(commit)) + " of " + strings.TrimSpace(string(date))
	if !strings.Contains(string(out), want) {
		t.Errorf("anvil version = %q; want %q in it", out, want)
	}
	pc := exec.Command(anvil, "serve", "--config", filepath.Join(root, "packaging", "anvil.yaml"), "--print-config")
	pc.Env = []string{"PATH=" + os.Getenv("PATH")} // no caller's ANVIL_* variables
	out, err = pc.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "data-dir: /var/lib/anvil # file line") {
		t.Errorf("anvil serve --print-config with packaging/anvil.yaml: %v\n%s", err, out)
	}
}
