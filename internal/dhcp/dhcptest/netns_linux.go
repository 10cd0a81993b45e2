package dhcptest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/anvilproj/anvil/internal/testtool"
)

// NeedRoot stops a test that needs root (binding port 67, SO_BINDTODEVICE,
// network namespaces): outside CI it is skipped, in CI (CI=true) it fails,
// so a CI runner that lost its privileges cannot pass by skipping.
func NeedRoot(t testing.TB) {
	t.Helper()
	testtool.RequireRoot(t, "network namespaces, port 67")
	testtool.RequireBinary(t, "ip", "iproute2")
}

// NetNS is a network namespace made for one test and deleted after it.
type NetNS struct {
	Name string
}

// NewNetNS creates a namespace with its loopback up. It is deleted when the
// test ends, with every interface in it.
func NewNetNS(t testing.TB) *NetNS {
	t.Helper()
	NeedRoot(t)
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	n := &NetNS{Name: "anvil-test-" + hex.EncodeToString(b[:])}
	IP(t, "netns", "add", n.Name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", n.Name).CombinedOutput(); err != nil {
			t.Logf("ip netns del %s: %v: %s", n.Name, err, out)
		}
	})
	n.IP(t, "link", "set", "lo", "up")
	return n
}

// IP runs `ip ARGS...` and fails the test if it fails.
func IP(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// IP runs `ip -n NAME ARGS...`.
func (n *NetNS) IP(t testing.TB, args ...string) {
	t.Helper()
	IP(t, append([]string{"-n", n.Name}, args...)...)
}

// Do runs fn on an OS thread that has entered the namespace, and returns
// its error. Sockets fn opens stay in the namespace for their whole life,
// whichever goroutine uses them later; goroutines fn starts do not run in
// the namespace. The thread is thrown away afterwards.
func (n *NetNS) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: when this goroutine ends, the runtime ends the
		// thread instead of reusing it in the wrong namespace.
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+n.Name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open namespace %s: %w", n.Name, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter namespace %s: %w", n.Name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Veth joins namespaces a and b with a veth pair: interface aName in a with
// address aAddr (a prefix such as "10.0.0.1/24", or "" for none) and MAC
// aMAC ("" for a random one), likewise for b. Both ends are up.
func Veth(t testing.TB, a *NetNS, aName, aAddr, aMAC string, b *NetNS, bName, bAddr, bMAC string) {
	t.Helper()
	tmp := "anvtmp" + aName
	IP(t, "-n", a.Name, "link", "add", aName, "type", "veth", "peer", "name", tmp)
	IP(t, "-n", a.Name, "link", "set", tmp, "netns", b.Name)
	b.IP(t, "link", "set", tmp, "name", bName)
	for _, end := range []struct {
		ns         *NetNS
		name, addr string
		mac        string
	}{{a, aName, aAddr, aMAC}, {b, bName, bAddr, bMAC}} {
		if end.mac != "" {
			end.ns.IP(t, "link", "set", end.name, "address", end.mac)
		}
		if end.addr != "" {
			end.ns.IP(t, "addr", "add", end.addr, "dev", end.name)
		}
		end.ns.IP(t, "link", "set", end.name, "up")
	}
}
