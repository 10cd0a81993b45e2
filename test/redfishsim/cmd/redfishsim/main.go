// Command redfishsim runs test/redfishsim's Redfish service on its own, for
// trying Anvil's Redfish provider by hand (docs/bmc.md's example): one
// system, "1", a QEMU VM when -qemu names the emulator, else a machine in
// memory. It prints where it listens and its CA file, and runs until
// interrupted. It is a test tool, not part of Anvil.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/anvilproj/anvil/test/redfishsim"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8443", "address to listen on")
	user := flag.String("user", "admin", "the BMC's username")
	password := flag.String("password", "", "the BMC's password (required)")
	qemu := flag.String("qemu", "", "path of qemu-system-x86_64: system 1 is a QEMU VM (default: a machine in memory)")
	dir := flag.String("dir", "", "directory for the CA file, fetched images and QEMU's socket (required)")
	accel := flag.String("accel", "", "the QEMU VM's accelerators, e.g. tcg (default kvm:tcg when /dev/kvm opens, else tcg)")
	memory := flag.String("memory", "", "the QEMU VM's memory, QEMU's -m (default 128)")
	inventory := flag.Bool("inventory", false, "system 1 describes its hardware (identity, Processors, Memory, Storage, EthernetInterfaces) as redfishsim.ExampleInventory, a PowerEdge R640")
	var extra []string
	flag.Func("qemu-arg", "an argument added to every QEMU launch, e.g. a NIC (repeatable, in order)", func(v string) error {
		extra = append(extra, v)
		return nil
	})
	flag.Parse()
	if *password == "" || *dir == "" {
		fmt.Fprintln(os.Stderr, "redfishsim: -password and -dir are required")
		os.Exit(2)
	}
	var m redfishsim.Machine = &redfishsim.FakeMachine{}
	if *qemu != "" {
		vm := &redfishsim.QEMU{Binary: *qemu, Dir: *dir, Extra: extra, Memory: *memory, Accel: *accel}
		defer vm.Close()
		m = vm
	}
	sys := redfishsim.System{ID: "1", Machine: m}
	if *inventory {
		sys.Inventory = redfishsim.ExampleInventory()
	}
	s, err := redfishsim.New(redfishsim.Config{Username: *user, Password: *password, Listen: *listen,
		Systems: []redfishsim.System{sys}}, *dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "redfishsim:", err)
		os.Exit(1)
	}
	defer s.Close()
	fmt.Printf("Redfish service at %s (CA file %s)\n", s.URL, s.CAFile)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
}
