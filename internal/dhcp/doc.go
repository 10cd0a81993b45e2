// Package dhcp is Anvil's DHCPv4 server (RFC 2131, RFC 2132) and PXE
// boot-information server (PXE 2.1 proxyDHCP, RFC 4578, UEFI HTTP boot).
//
// It owns the DHCP wire behaviour: which packets are answered in each Mode,
// which address and options a client gets, which boot file a PXE ROM, a
// UEFI HTTP-boot client or a running iPXE is pointed at, where the answer is
// sent (relay, broadcast, unicast), the sockets that do it (ListenInterface,
// ListenAddr), the Prometheus metrics anvil_dhcp_* and the decision log.
// The relay agent lives in the sub-package relay.
//
// It does not own, and must not touch: Hardware, the store, the boot policy
// (a Backend answers Lookup), the iPXE binaries and scripts (package ipxe
// names them; httpboot and tftp serve them) or where machine events end up
// (a machinelog.Sink). From this module it imports only internal/ipxe and
// internal/machinelog; deps_test.go enforces that.
//
// The server keeps no lease state: in reservation mode every address comes
// from the Backend, so there is nothing to allocate, persist or expire, and
// a restart loses nothing. The one exception is discovery's: addresses for
// MACs no Hardware has come from an UnknownBackend, the sub-package pool,
// which keeps its short leases in memory (see its doc for a restart).
package dhcp
