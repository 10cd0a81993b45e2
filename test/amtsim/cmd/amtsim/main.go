// Command amtsim runs test/amtsim's Intel AMT WS-Management endpoint on
// its own over HTTP, for trying Anvil's Intel AMT provider by hand
// (docs/bmc.md's example): the recorded exchanges in front of a machine
// in memory. It prints where it listens and, when the machine boots, what
// it booted; it runs until interrupted. It is a test tool, not part of
// Anvil, and no AMT: see test/amtsim/fixtures/README.md.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/anvilproj/anvil/test/amtsim"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:16992", "address to listen on")
	user := flag.String("user", "admin", "the AMT's username")
	password := flag.String("password", "", "the AMT's password (required)")
	on := flag.Bool("on", false, "the machine starts powered on")
	flag.Parse()
	if *password == "" {
		fmt.Fprintln(os.Stderr, "amtsim: -password is required")
		os.Exit(2)
	}
	cfg := amtsim.Config{Username: *user, Password: *password}
	if *on {
		cfg.Power = amtsim.On
	}
	s, err := amtsim.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "amtsim:", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "amtsim:", err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: s} //nolint:gosec // a test tool on the loopback
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("Intel AMT WS-Management at http://%s/wsman\n", ln.Addr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	s.Close()
	_ = srv.Close()
	fmt.Printf("boots: %q\nunmatched requests: %d\n", s.Boots(), len(s.Unmatched()))
	for _, u := range s.Unmatched() {
		fmt.Println(u)
	}
}
