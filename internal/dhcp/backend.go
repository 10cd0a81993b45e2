package dhcp

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/anvilproj/anvil/internal/macaddr"
)

// ErrUnknownHost is returned by a Backend for a MAC it does not know.
var ErrUnknownHost = errors.New("no Hardware with this MAC")

// Backend tells the server what it needs to know about a MAC. The boot
// policy (internal/bootpolicy) implements it over the store; tests use a map.
// Implementations must be safe for concurrent use and fast: Lookup runs on
// the packet path. A Host, once returned, must never be modified: the
// server keeps its answers to a MAC in wire form for as long as Lookup
// returns the same *Host (template.go), so a changed Hardware must be a new
// Host value (bootpolicy builds one per watch event).
type Backend interface {
	// Lookup returns the host for mac (always a valid MAC: the server
	// answers only Ethernet clients), or an error wrapping
	// ErrUnknownHost. Other errors are the backend's failures: the server
	// logs them and does not answer.
	Lookup(ctx context.Context, mac macaddr.MAC) (*Host, error)
}

// BackendFunc adapts a function to a Backend.
type BackendFunc func(ctx context.Context, mac macaddr.MAC) (*Host, error)

// Lookup calls f(ctx, mac).
func (f BackendFunc) Lookup(ctx context.Context, mac macaddr.MAC) (*Host, error) {
	return f(ctx, mac)
}

// Host is what one interface of a Hardware says about DHCP and netboot.
// The zero value is a host with no address and netboot not allowed.
type Host struct {
	// Name identifies the Hardware in logs, e.g. "default/rack1-node07".
	Name string
	// DisableDHCP: the server does not answer this MAC at all
	// (spec.interfaces[].disableDhcp).
	DisableDHCP bool

	// Address, for reservation mode. IP invalid means "no address": the
	// host is answered in proxy fashion only (boot information, no lease).
	IP        netip.Addr
	Netmask   net.IPMask
	Gateway   netip.Addr // option 3, if valid
	DNS       []netip.Addr
	NTP       []netip.Addr
	Hostname  string
	Domain    string
	LeaseTime time.Duration // 0: the server's default
	// Routes are RFC 3442 classless static routes (option 121).
	Routes []Route

	// Netboot.
	AllowPXE bool
	// IPXEBinary overrides the binary chosen from the client's
	// architecture (netboot.ipxe.binary), e.g. "snponly.efi".
	IPXEBinary string
	// TFTPServer and BootFile, when both set, are sent as they are
	// (dhcp.tftp_server_name, dhcp.boot_file_name) and override the
	// netboot logic entirely.
	TFTPServer string
	BootFile   string
}

// Route is one classless static route.
type Route struct {
	Dest   netip.Prefix
	Router netip.Addr
}

// UnknownBackend gives addresses to machines the Backend does not know, in
// reservation mode: the discovery pool (internal/dhcp/pool, anvil serve
// --discovery-pool). Implementations must be safe for concurrent use and
// fast, as Backend's.
type UnknownBackend interface {
	// LookupUnknown returns the host r.MAC is to be answered as, with
	// its leased address, or an error wrapping ErrUnknownHost when it
	// gets none (no pool serves its subnet, the pool is full). Other
	// errors are the backend's failures: the server logs them and does
	// not answer. The Host follows Backend's rule: never modified once
	// returned.
	LookupUnknown(ctx context.Context, r UnknownRequest) (*Host, error)
}

// UnknownRequest is what LookupUnknown is asked about.
type UnknownRequest struct {
	// MAC is the client's (chaddr).
	MAC macaddr.MAC
	// Relay is giaddr: the relay that forwarded the request, whose
	// subnet the client is on; invalid when the request came directly
	// (the client is on the server's own subnet).
	Relay netip.Addr
	// Requested is the address the client asked for (option 50, else
	// ciaddr), invalid when none: a client that had a lease before a
	// restart of the server asks for it again.
	Requested netip.Addr
}
