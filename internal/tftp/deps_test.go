package tftp

import (
	"maps"
	"slices"
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestImports keeps the package a leaf: a protocol package that builds
// and tests alone (docs/tftp.md, ARCHITECTURE.md).
func TestImports(t *testing.T) {
	const module = "github.com/anvilproj/anvil/"
	allowed := map[string]string{
		module + "internal/machinelog":                            "the Event contract every service emits",
		module + "internal/lograte":                               "the malformed-packet log limit every packet loop shares",
		module + "internal/macaddr":                               "the one MAC type, a per-machine path's first element",
		module + "internal/clock":                                 "the one source of time (a leaf)",
		"golang.org/x/sys/unix":                                   "sendmsg/sendmmsg with UDP_SEGMENT",
		"golang.org/x/net/ipv4":                                   "the destination address of requests on a wildcard socket",
		"golang.org/x/net/ipv6":                                   "the same for IPv6",
		"github.com/prometheus/client_golang/prometheus":          "metrics",
		"github.com/prometheus/client_golang/prometheus/promauto": "metrics",
	}
	for path, files := range testtool.NonStdImports(t) {
		if _, ok := allowed[path]; !ok {
			t.Errorf("%v import %s: internal/tftp may import only %v", files, path, slices.Sorted(maps.Keys(allowed)))
		}
	}
}
