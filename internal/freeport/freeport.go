// Package freeport finds TCP ports the kernel says are free, for a
// program about to be told which port to listen on (kube-apiserver, a
// benchmark's peer, `anvil serve` in a test). It owns only that choice:
// the port is free when asked, not reserved, so the caller starts its
// listener at once.
package freeport

import "net"

// Ports returns n distinct TCP ports of addr that were free a moment ago
// (the kernel chose them; all are held open until the last is chosen, so
// they differ).
func Ports(addr net.IP, n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: addr})
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Loopback returns one TCP port free on 127.0.0.1.
func Loopback() (int, error) {
	ports, err := Ports(net.IPv4(127, 0, 0, 1), 1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}
