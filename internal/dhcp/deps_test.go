package dhcp_test

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

// TestDependencies keeps the protocol packages free of the application:
// they must build and test alone (STYLE.md §2), so the server can be
// reasoned about without the store, the workflow engine or the boot policy.
func TestDependencies(t *testing.T) {
	const module = "github.com/anvilproj/anvil/"
	// Outside the standard library, each package may import only these
	// prefixes, each with its reason.
	common := []string{
		"github.com/insomniacslk/dhcp/",        // the DHCPv4 wire format
		"github.com/prometheus/client_golang/", // metrics
		"golang.org/x/sys/",                    // SO_BINDTODEVICE, setns in tests
		"golang.org/x/net/",                    // ipv4 control messages
		module + "internal/ipxe",               // binary names and URL paths
		module + "internal/machinelog",         // the events it emits
		module + "internal/lograte",            // the malformed-packet log limit the packet loops share
		module + "internal/macaddr",            // the one MAC type, chaddr converted once
		module + "internal/clock",              // the one source of time (a leaf)
	}
	tests := []struct {
		dir   string
		extra []string
	}{
		{".", nil},
		{"relay", []string{module + "internal/dhcp"}}, // sockets and constants
		{"pool", []string{module + "internal/dhcp"}},  // the Host it answers, the interface it implements
		// The fakes implement dhcp's interfaces; NeedRoot stops a test as
		// every test does (testtool: fail in CI, skip elsewhere).
		{"dhcptest", []string{module + "internal/dhcp", module + "internal/testtool"}},
	}
	for _, tc := range tests {
		t.Run(tc.dir, func(t *testing.T) {
			pkg, err := build.ImportDir(filepath.Join(".", tc.dir), 0)
			if err != nil {
				t.Fatal(err)
			}
			allowed := append(append([]string{}, common...), tc.extra...)
		imports:
			for _, imp := range pkg.Imports {
				if !strings.Contains(strings.Split(imp, "/")[0], ".") {
					continue // standard library
				}
				for _, a := range allowed {
					if imp == strings.TrimSuffix(a, "/") || strings.HasPrefix(imp, a) && strings.HasSuffix(a, "/") {
						continue imports
					}
				}
				t.Errorf("%s imports %s, which it must not (allowed: standard library, %s)", tc.dir, imp, strings.Join(allowed, ", "))
			}
		})
	}
}
