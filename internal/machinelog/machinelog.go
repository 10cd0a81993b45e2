// Package machinelog defines the record a network service leaves of what it
// did for a machine: "DHCP offered 10.0.0.5 with ipxe.efi", "TFTP sent
// undionly.kpxe", "HTTP served auto.ipxe: workflow default/install pending",
// a syslog line from the machine. Operators read these records to see why a
// machine did or did not boot, and tests assert on them.
//
// It is a leaf: protocol packages (dhcp, tftp, httpboot, syslog) emit
// Events through a Sink without knowing where they go; the server decides
// (internal/server attributes them to a Hardware and keeps them in the log
// store). It must not import any other package of this module.
package machinelog

import (
	"net/netip"
	"time"

	"github.com/anvilproj/anvil/internal/macaddr"
)

// Service names used in Event.Service.
const (
	ServiceDHCP   = "dhcp"
	ServiceTFTP   = "tftp"
	ServiceHTTP   = "http"
	ServiceSyslog = "syslog"
	// ServiceMetadata: the metadata service (internal/metadata).
	ServiceMetadata = "metadata"
	// ServiceBMC: the BMC job executor (internal/bmc), about the machine
	// whose Hardware names the Job's Machine in spec.bmcRef.
	ServiceBMC = "bmc"
	// ServiceConsole: the serial console over SSH (internal/console): its
	// output line by line, and who attached.
	ServiceConsole = "console"
	// ServiceEnroll: auto-enrolment (internal/enroll): which rule made
	// the machine's workflow.
	ServiceEnroll = "enroll"
	// ServiceDiscovery: discovery (anvil serve --discovery): the Hardware
	// made of an unknown machine's inventory, or why none was.
	ServiceDiscovery = "discovery"
)

// Event is one thing a service did for (or refused to) a machine.
type Event struct {
	// Time is when it happened. If zero, the sink uses its own clock.
	Time time.Time
	// Service is one of the Service* constants.
	Service string
	// MAC identifies the machine when the protocol carries it (DHCP, the
	// iPXE script route, per-MAC TFTP paths); the zero MAC otherwise.
	MAC macaddr.MAC
	// IP is the machine's address as seen by the service (the packet's
	// source; for DHCP the address offered, if any). Zero if unknown.
	IP netip.Addr
	// Outcome is a short, stable, machine-readable word: "served",
	// "unknown-mac", "netboot-not-allowed", "not-found", "error", … It is
	// also the metrics label, so it must come from a small fixed set.
	Outcome string
	// Message is the human sentence: what was asked, what was answered
	// and why.
	Message string
}

// Sink receives Events. Implementations must be safe for concurrent use
// and must not block for long: services call Record on their packet paths.
type Sink interface {
	Record(Event)
}

// SinkFunc adapts a function to a Sink.
type SinkFunc func(Event)

// Record calls f(e).
func (f SinkFunc) Record(e Event) { f(e) }

// Discard is a Sink that drops every Event.
var Discard Sink = SinkFunc(func(Event) {})
