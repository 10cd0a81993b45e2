package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/doctest"
	"github.com/anvilproj/anvil/internal/testtool"
)

// The guides run as written: every Markdown page under docs/ (and the
// README) that carries doctest directives is followed block by block by
// TestGuides, in a network namespace of its own, by a shell that keeps its
// variables and directory from one block to the next as a user's terminal
// does. internal/doctest documents the directives.
//
// Where a guide boots a machine, the test stops at the last check the
// server side can make (the script and the config fetched with curl, as the
// machine would): booting a VM costs tens of seconds under TCG, and what a
// booted machine does with its script and config is TestBootProfiles' and
// TestInstall's to prove.

// guideRoot is where a guide's shell finds itself: a copy of what a
// checkout holds (examples/, bin/anvil), bind-mounted so that the guide's
// /tmp and /var/lib can be its own.
const guideRoot = "/mnt"

// guideHostname is the host name of the guides' machine.
const guideHostname = "vm"

// guideNetworks are the addresses a guide's server binds or reaches, put on
// a bridge in its namespace ("via GW": a default route); loopback is always
// there.
var guideNetworks = map[string][]string{
	"docs/guide-flatcar.md":    {"10.0.0.1/24"},
	"docs/guide-cloud-init.md": {"10.0.0.1/24"},
	"docs/profiles.md":         {"10.20.0.1/24"},
	// The machine of the TLS page's run: its addresses are in the server
	// certificate the page shows.
	"docs/tls.md": {"192.0.2.2/24", "fd00::2/64", "via 192.0.2.1"},
}

// mustRunGuides are the pages that are step-by-step guides: they must carry
// directives (a page losing them would otherwise stop being tested).
var mustRunGuides = []string{
	"docs/quickstart.md", "docs/guide-flatcar.md", "docs/guide-cloud-init.md",
	"docs/inventory.md", "docs/assets.md", "docs/profiles.md", "docs/tls.md",
}

// guideBlockTimeout bounds one block (a command that waits for something
// that never comes must not hang the suite).
const guideBlockTimeout = 2 * time.Minute

func TestGuides(t *testing.T) {
	requireLab(t)
	// What the guides' own commands and this test's shell use.
	for bin, pkg := range map[string]string{"unshare": "util-linux", "nsenter": "util-linux", "jq": "jq", "cloud-init": "cloud-init"} {
		testtool.RequireBinary(t, bin, pkg)
	}
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, filepath.Join(repoRoot, "README.md"))
	tested := map[string]bool{}
	for _, path := range docs {
		rel, _ := filepath.Rel(repoRoot, path)
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := doctest.Parse(string(src))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if blocks == nil {
			continue
		}
		tested[rel] = true
		t.Run(strings.TrimSuffix(filepath.Base(rel), ".md"), func(t *testing.T) {
			start := time.Now()
			runGuide(t, rel, blocks)
			t.Logf("%s: %d blocks in %.1fs", rel, len(blocks), time.Since(start).Seconds())
		})
	}
	for _, g := range mustRunGuides {
		if !tested[g] {
			t.Errorf("%s has no doctest directives: a guide must be run by this test", g)
		}
	}
	for g := range guideNetworks {
		if !tested[g] {
			t.Errorf("guideNetworks names %s, which has no doctest directives", g)
		}
	}
}

// guideShell is the user's terminal of one guide: a mount namespace with
// its own /tmp and /var/lib inside the guide's network namespace, entered
// once per block, and the state (exported variables, directory) carried
// from one block to the next.
type guideShell struct {
	t      *testing.T
	doc    string
	ns     *netns
	holder int    // PID of the process holding the mount namespace
	work   string // the host path of guideRoot
	state  string // guideRoot/.doctest, as the guide's shell sees it
	ctx    context.Context
}

func runGuide(t *testing.T, doc string, blocks []doctest.Block) {
	ns := newNetns(t, "guide")
	if nets := guideNetworks[doc]; len(nets) > 0 {
		ns.ip("link", "add", "br0", "type", "bridge")
		for _, a := range nets {
			if strings.HasPrefix(a, "via ") {
				continue // once the bridge is up
			}
			if strings.Contains(a, ":") {
				ns.ip("-6", "addr", "add", a, "dev", "br0", "nodad") // usable at once
			} else {
				ns.ip("addr", "add", a, "dev", "br0")
			}
		}
		ns.ip("link", "set", "br0", "up")
		for _, a := range nets {
			if gw, ok := strings.CutPrefix(a, "via "); ok {
				// A default route into the bridge, which has no ports: the
				// server finds its address as on a real network, and
				// nothing sent that way leaves the namespace.
				ns.ip("route", "add", "default", "via", gw, "dev", "br0")
			}
		}
	}
	sh := newGuideShell(t, doc, ns)
	var last *doctest.Block // the last run or background block
	var lastOut string
	var bg []*bgBlock // background blocks, in the order started
	for i := range blocks {
		b := &blocks[i]
		where := fmt.Sprintf("%s:%d", doc, b.Line)
		switch b.Kind {
		case doctest.Skip:
			t.Logf("%s: not run: %s", where, b.Reason)
		case doctest.File:
			if out, code := sh.run(fmt.Sprintf("mkdir -p \"$(dirname %q)\" && cat > %q", b.File, b.File), b.Body, runOnce); code != 0 {
				t.Fatalf("%s: writing %s: exit %d\n%s", where, b.File, code, out)
			}
		case doctest.Run:
			out, code := sh.run(b.Body, "", runBlock)
			if code != b.Exit {
				t.Fatalf("%s: the block exited %d; want %d. Block:\n%s\nOutput:\n%s", where, code, b.Exit, b.Body, out)
			}
			last, lastOut = b, out
		case doctest.Output:
			diff := ""
			if b.Log || last.Kind == doctest.Background {
				diff = awaitOutput(bg[len(bg)-1], b)
			} else {
				diff = doctest.Compare(lastOut, b.Body, b.Lines, b.Normalize)
			}
			if diff != "" {
				t.Errorf("%s: the output of the block at line %d is not what the guide shows:\n%s", where, last.Line, diff)
			}
		case doctest.Background:
			if b.Restart {
				if len(bg) == 0 {
					t.Fatalf("%s: restart, but no background block runs", where)
				}
				bg[len(bg)-1].stop()
			}
			bg = append(bg, sh.background(where, b))
			last = b
		case doctest.Console:
			for _, s := range b.Steps() {
				out, code := sh.run(s.Command+"\n", "", runStep)
				at := fmt.Sprintf("%s:%d", doc, s.Line)
				if code != 0 {
					t.Fatalf("%s: $ %s: exit %d (a transcript's commands must succeed; show a failure with `; echo \"exit $?\"`)\n%s", at, s.Command, code, out)
				}
				if diff := doctest.Compare(out, s.Want, b.Lines, b.Normalize); diff != "" {
					t.Errorf("%s: $ %s: the output is not what the guide shows:\n%s", at, s.Command, diff)
				}
			}
		}
	}
}

func newGuideShell(t *testing.T, doc string, ns *netns) *guideShell {
	t.Helper()
	work := t.TempDir()
	state := filepath.Join(work, ".doctest")
	for _, d := range []string{filepath.Join(work, "bin"), filepath.Join(state, "home")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, assets.anvil, filepath.Join(work, "bin", "anvil"))
	if err := os.Chmod(filepath.Join(work, "bin", "anvil"), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "cp", "-a", filepath.Join(repoRoot, "examples"), filepath.Join(work, "examples"))
	gs := guideRoot + "/.doctest"
	env := strings.Join([]string{
		"export PATH=" + guideRoot + "/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"export HOME=" + gs + "/home", "export LANG=C.UTF-8", "export TERM=dumb", "",
	}, "\n")
	if err := os.WriteFile(filepath.Join(state, "env"), []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "cwd"), []byte(guideRoot+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The holder: a mount namespace where the copy is guideRoot and /tmp
	// and /var/lib are empty, so a guide writing /tmp/anvil or
	// /var/lib/anvil touches nothing of the host's; and a UTS namespace
	// where the machine is called guideHostname, which outputs show (the
	// CA's name, the certificate's names).
	holder := `set -e
hostname ` + guideHostname + `
mount --bind "$1" ` + guideRoot + `
mount -t tmpfs anvil-guide /tmp
mount -t tmpfs anvil-guide /var/lib
echo $$ > ` + gs + `/holder.pid
exec sleep infinity`
	p := ns.background("guide-holder", "unshare", "--mount", "--uts", "--propagation", "private", "bash", "-c", holder, "holder", work)
	pidFile := filepath.Join(state, "holder.pid")
	deadline := time.Now().Add(30 * time.Second)
	var pid int
	for {
		if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			break
		}
		select {
		case <-p.done:
			t.Fatalf("the guide's mount namespace did not come up (%v):\n%s", p.err, p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the guide's mount namespace did not come up within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &guideShell{t: t, doc: doc, ns: ns, holder: pid, work: work, state: gs, ctx: context.Background()}
}

// runMode is how a script runs in the guide's shell.
type runMode int

const (
	// runOnce runs a script of the test's own (writing a file): it keeps
	// nothing.
	runOnce runMode = iota
	// runBlock runs a block: any failing command fails it (set -e), and
	// the variables and directory it leaves are kept for the next.
	runBlock
	// runStep runs one command of a transcript: its own exit status is
	// checked, so `cmd; echo "exit $?"` shows a failure; state is kept.
	runStep
	// runBackground starts a block left running: state is not kept (it
	// would be saved whenever the block ends, over the later blocks').
	runBackground
)

// command is the shell that runs script in the guide's namespaces, with
// the variables and directory the previous blocks left.
func (g *guideShell) command(ctx context.Context, script string, mode runMode) *exec.Cmd {
	// set -a: every variable a block sets is exported, so that export -p
	// keeps it for the next block as a terminal would (D=$(mktemp -d)).
	pre := "set -a\nsource " + g.state + "/env\ncd \"$(cat " + g.state + "/cwd)\"\n"
	if mode == runBlock || mode == runStep {
		pre += "trap 'export -p > " + g.state + "/env; pwd > " + g.state + "/cwd' EXIT\n"
	}
	pre += "set -o pipefail\n"
	if mode != runStep {
		pre += "set -e\n"
	}
	cmd := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(g.holder), "-n", "-m", "-u", "--",
		"bash", "--noprofile", "--norc", "-c", pre+script)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Kill the whole group (a block's own children too) on timeout.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs script (stdin as its input) and returns its combined output
// and exit status.
func (g *guideShell) run(script, stdin string, mode runMode) (string, int) {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(g.ctx, guideBlockTimeout)
	defer cancel()
	cmd := g.command(ctx, script, mode)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		g.t.Fatalf("%s: a block still ran after %s:\n%s\noutput so far:\n%s", g.doc, guideBlockTimeout, script, out)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	g.t.Fatalf("%s: run a block: %v", g.doc, err)
	return "", -1
}

// bgBlock is a background block's process.
type bgBlock struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // set when done closes
}

func (p *bgBlock) output() string { b, _ := os.ReadFile(p.log); return string(b) }

// stop ends the block as Ctrl-C would (SIGTERM to its process group), and
// kills it if it has not ended in 15 s.
func (p *bgBlock) stop() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// background starts b and leaves it running until the test ends (or a
// later block restarts it); with b.Ready, it returns once that URL
// answers.
func (g *guideShell) background(where string, b *doctest.Block) *bgBlock {
	t := g.t
	t.Helper()
	p := &bgBlock{log: filepath.Join(t.TempDir(), fmt.Sprintf("block-%d.log", b.Line)), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = g.command(context.Background(), b.Body, runBackground)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("%s: start: %v", where, err)
	}
	go func() { p.err = p.cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("--- %s (background) log ---\n%s", where, tail(p.output(), 40))
		}
	})
	if b.Ready == "" {
		return p
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(g.holder), "-n", "-m", "--",
			"curl", "-fsS", "-o", "/dev/null", "-k", b.Ready).Run()
		cancel()
		if err == nil {
			return p
		}
		select {
		case <-p.done:
			t.Fatalf("%s: the block ended (%v) before %s answered:\n%s", where, p.err, b.Ready, tail(p.output(), 40))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s did not answer within 60s:\n%s", where, b.Ready, tail(p.output(), 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// awaitOutput compares a background block's log with want until they
// agree (a server prints as it goes) or the block ends or 30 s pass; it
// returns the last difference, "" when they agreed.
func awaitOutput(p *bgBlock, want *doctest.Block) string {
	deadline := time.Now().Add(30 * time.Second)
	for {
		diff := doctest.Compare(p.output(), want.Body, want.Lines, want.Normalize)
		if diff == "" {
			return ""
		}
		select {
		case <-p.done:
			return doctest.Compare(p.output(), want.Body, want.Lines, want.Normalize)
		default:
		}
		if time.Now().After(deadline) {
			return diff
		}
		time.Sleep(100 * time.Millisecond)
	}
}
