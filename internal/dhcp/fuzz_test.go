package dhcp_test

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/anvilproj/anvil/internal/dhcp"
)

// FuzzReply feeds arbitrary datagrams to every mode on both ports. Reply
// must not panic; when it answers, the answer must be a BOOTREPLY OFFER, ACK
// or NAK for the same transaction that marshals and parses back, and the
// proxy modes must never put an address in yiaddr.
func FuzzReply(f *testing.F) {
	seed := func(p packet) { f.Add(p.build(f).ToBytes()) }
	// A BIOS PXE ROM's DISCOVER, broadcast on the local segment.
	seed(packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: fwBIOS})
	// The same, relayed.
	seed(packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: fwBIOS, giaddr: relayIP})
	// UEFI HTTP boot.
	seed(packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: fwHTTP})
	// iPXE asking again, from an unknown MAC (auto-proxy answers it).
	seed(packet{typ: dhcpv4.MessageTypeDiscover, mac: macUnknown, fw: fwUEFI, userClass: "iPXE"})
	// A REQUEST in SELECTING state for the reserved address, and one for
	// another address (NAK).
	seed(packet{typ: dhcpv4.MessageTypeRequest, mac: macM1, fw: fwUEFI, requested: "10.0.0.5", serverID: serverIP})
	seed(packet{typ: dhcpv4.MessageTypeRequest, mac: macM1, requested: "10.0.0.99"})
	// A proxyDHCP REQUEST as sent to port 4011.
	seed(packet{typ: dhcpv4.MessageTypeRequest, mac: macM1, fw: fwARM64, ciaddr: "192.168.1.50"})
	// INFORM, RELEASE.
	seed(packet{typ: dhcpv4.MessageTypeInform, mac: macM1, ciaddr: "10.0.0.5"})
	seed(packet{typ: dhcpv4.MessageTypeRelease, mac: macM1, ciaddr: "10.0.0.5"})
	// Hostile shapes: an override host, classless routes in the answer, an
	// architecture list with an odd length, a 16-byte chaddr, nothing.
	seed(packet{typ: dhcpv4.MessageTypeDiscover, mac: macOverride, fw: fwBIOS})
	seed(packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, extra: []dhcpv4.Option{
		dhcpv4.OptGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{0})}})
	long := packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1}.build(f)
	long.ClientHWAddr = make(net.HardwareAddr, 16)
	f.Add(long.ToBytes())
	f.Add([]byte{})

	b := testBackend()
	servers := map[dhcp.Mode]*dhcp.Server{}
	for _, m := range []dhcp.Mode{dhcp.ModeReservation, dhcp.ModeProxy, dhcp.ModeAutoProxy} {
		servers[m] = newServer(f, m, b)
	}
	from := netip.MustParseAddrPort("192.168.1.50:68")
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := dhcpv4.FromBytes(data)
		if err != nil {
			return
		}
		for mode, s := range servers {
			for _, port := range []int{dhcp.ServerPort, dhcp.PXEPort} {
				resp, to, d := s.Reply(context.Background(), req, from, port)
				_ = d.Message()
				if resp == nil {
					continue
				}
				wire, err := dhcpv4.FromBytes(resp.ToBytes())
				if err != nil {
					t.Fatalf("%s port %d: reply does not parse back: %v\n%s", mode, port, err, resp.Summary())
				}
				switch wire.MessageType() {
				case dhcpv4.MessageTypeOffer, dhcpv4.MessageTypeAck, dhcpv4.MessageTypeNak:
				default:
					t.Fatalf("%s port %d: reply type %s", mode, port, wire.MessageType())
				}
				if wire.OpCode != dhcpv4.OpcodeBootReply || wire.TransactionID != req.TransactionID {
					t.Fatalf("%s port %d: reply op %s xid %s; want BootReply xid %s", mode, port, wire.OpCode, wire.TransactionID, req.TransactionID)
				}
				if mode != dhcp.ModeReservation && !wire.YourIPAddr.IsUnspecified() {
					t.Fatalf("%s port %d: proxy reply carries yiaddr %s", mode, port, wire.YourIPAddr)
				}
				if !to.IsValid() || to.Port() == 0 {
					t.Fatalf("%s port %d: reply to %s", mode, port, to)
				}
				if binary.BigEndian.Uint32(wire.ServerIdentifier().To4()) == 0 {
					t.Fatalf("%s port %d: reply without server identifier", mode, port)
				}
			}
		}
	})
}
