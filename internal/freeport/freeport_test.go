package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPortsDistinctAndFree: the ports differ and each can be listened on.
func TestPortsDistinctAndFree(t *testing.T) {
	ports, err := Ports(net.IPv4(127, 0, 0, 1), 5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Fatalf("ports %v: want 5 distinct ports", ports)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d was given as free but cannot be listened on: %v", p, err)
		}
		ln.Close()
	}
	if p, err := Loopback(); err != nil || p <= 0 {
		t.Fatalf("Loopback() = %d, %v", p, err)
	}
}
