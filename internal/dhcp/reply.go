package dhcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/anvilproj/anvil/internal/ipxe"
)

// Outcomes: what the server did with one packet. They are the outcome label
// of anvil_dhcp_packets_total and machinelog.Event.Outcome, so the set is
// fixed.
const (
	OutcomeOffered           = "offered"             // OFFER sent
	OutcomeAcked             = "acked"               // ACK sent
	OutcomeNAK               = "nak"                 // NAK sent: the client asked for an address that is not its reservation
	OutcomeUnknownMAC        = "unknown-mac"         // no Hardware has this MAC; not answered
	OutcomeNetbootNotAllowed = "netboot-not-allowed" // allowPXE is false: answered without a boot file (reservation) or not at all (proxy)
	OutcomeUnsupportedArch   = "unsupported-arch"    // the client's architecture has no iPXE binary: no boot file
	OutcomeDHCPDisabled      = "dhcp-disabled"       // the Hardware disables DHCP for this MAC; not answered
	OutcomeNotPXEClient      = "not-pxe-client"      // not a network boot client, and nothing else to give it; not answered
	OutcomeReleased          = "released"            // RELEASE logged; there is no lease state to free
	OutcomeDeclined          = "declined"            // DECLINE logged: the client found its address in use
	OutcomeIgnored           = "ignored"             // not for us (another server, a BOOTREPLY, a BOOTP request, …)
	OutcomeMalformed         = "malformed"           // not a DHCP packet
	OutcomeBackendError      = "backend-error"       // the Backend failed; not answered
)

// Decision is what Reply decided about one request, for logs, events,
// metrics and tests.
type Decision struct {
	// Type is the request's DHCP message type (MessageTypeNone for BOOTP
	// and unparseable packets).
	Type dhcpv4.MessageType
	// Reply is the type of the answer: OFFER, ACK, NAK, or MessageTypeNone
	// when there is none.
	Reply dhcpv4.MessageType
	// Outcome is one of the Outcome* constants.
	Outcome string
	// Reason says why, when there is more to say than the outcome: why
	// there is no answer, no boot file, or a NAK.
	Reason string
	// MAC is the client's hardware address (chaddr).
	MAC net.HardwareAddr
	// IP is the address offered or acknowledged, else the one the client
	// asked about (requested address or ciaddr); zero if none.
	IP netip.Addr
	// Host is the Hardware's name when the Backend knows the MAC.
	Host string
	// Firmware and Client describe the network boot client: Client is
	// "PXEClient", "HTTPClient", "iPXE", "Tinkerbell" or "".
	Firmware ipxe.Firmware
	Client   string
	// BootFile is the boot file sent (a TFTP path or an http:// URL), and
	// BootServer the TFTP server it is fetched from ("" for URLs).
	BootFile   string
	BootServer string
}

// Reply answers req, which arrived from from on local port port (PXEPort
// makes it a proxyDHCP boot server request; any other port is the DHCP
// port). It returns the reply and where to send it, or a nil reply; the
// Decision says why either way. Reply does no I/O besides Backend.Lookup,
// and does not modify req.
func (s *Server) Reply(ctx context.Context, req *dhcpv4.DHCPv4, from netip.AddrPort, port int) (*dhcpv4.DHCPv4, netip.AddrPort, Decision) {
	d := Decision{Type: req.MessageType(), MAC: req.ClientHWAddr, IP: addr4(req.ClientIPAddr)}
	no := func(outcome, reason string) (*dhcpv4.DHCPv4, netip.AddrPort, Decision) {
		d.Outcome, d.Reason = outcome, reason
		return nil, netip.AddrPort{}, d
	}
	switch {
	case s.mode == ModeOff:
		return no(OutcomeIgnored, "DHCP is off")
	case req.OpCode != dhcpv4.OpcodeBootRequest:
		return no(OutcomeIgnored, "not a BOOTREQUEST")
	case len(req.ClientHWAddr) == 0:
		return no(OutcomeMalformed, "no client hardware address")
	case req.HopCount > MaxHops:
		return no(OutcomeIgnored, "relayed through more than "+strconv.Itoa(MaxHops)+" hops")
	}
	c := classify(req)
	d.Firmware, d.Client = c.firmware, c.kind()
	pxePort := port == PXEPort

	switch d.Type {
	case dhcpv4.MessageTypeDiscover:
		if pxePort {
			return no(OutcomeIgnored, "DISCOVER on the PXE boot server port")
		}
	case dhcpv4.MessageTypeRequest:
		if sid := req.Options[optServerID]; len(sid) > 0 && !bytes.Equal(sid, s.serverID) {
			return no(OutcomeIgnored, "for another server ("+ipString(sid)+")")
		}
		if ip := addr4(req.Options[optRequestedIP]); ip.IsValid() {
			d.IP = ip
		}
	case dhcpv4.MessageTypeInform:
	case dhcpv4.MessageTypeRelease:
		return no(OutcomeReleased, "")
	case dhcpv4.MessageTypeDecline:
		if ip := addr4(req.Options[optRequestedIP]); ip.IsValid() {
			d.IP = ip
		}
		return no(OutcomeDeclined, "the client found the address in use")
	case dhcpv4.MessageTypeNone:
		return no(OutcomeIgnored, "BOOTP request without a DHCP message type")
	default:
		return no(OutcomeIgnored, "unexpected message type "+d.Type.String())
	}

	// In the proxy modes, and on the boot server port, only network boot
	// clients are answered: say so before asking the Backend.
	proxy := s.mode.proxy() || pxePort
	if proxy && !c.netboot() {
		return no(OutcomeNotPXEClient, "not a PXE, HTTP boot or iPXE client ("+string(s.mode)+" mode answers only those)")
	}
	host, err := s.backend.Lookup(ctx, req.ClientHWAddr)
	switch {
	case errors.Is(err, ErrUnknownHost):
		host = nil
	case err != nil:
		return no(OutcomeBackendError, err.Error())
	case host == nil:
		return no(OutcomeBackendError, "backend returned no host and no error")
	}
	if host == nil {
		if s.mode != ModeAutoProxy {
			return no(OutcomeUnknownMAC, "no Hardware has this MAC")
		}
		// auto-proxy: the generic iPXE path; the HTTP side serves the
		// unknown machine a generic script.
	} else {
		d.Host = host.Name
		if host.DisableDHCP {
			return no(OutcomeDHCPDisabled, "DHCP is disabled for this interface of "+host.Name)
		}
	}

	// lease: this answer carries the reserved address and its options.
	// Otherwise it carries boot information only (proxyDHCP style).
	lease := !proxy && host != nil && host.IP.Is4()
	allowed := host == nil || host.AllowPXE // host is nil only in auto-proxy
	override := host != nil && host.TFTPServer != "" && host.BootFile != ""
	bootable := allowed && (c.netboot() || override)
	if !lease {
		switch {
		case !c.netboot():
			return no(OutcomeNotPXEClient, "no reserved address and not a network boot client")
		case !allowed:
			return no(OutcomeNetbootNotAllowed, "netboot is not allowed for "+host.Name)
		case d.Type == dhcpv4.MessageTypeRequest && !pxePort:
			// The client is REQUESTing the lease another server offered;
			// our boot information was in the OFFER.
			return no(OutcomeIgnored, "REQUEST for another server's lease")
		case !override && c.ipxe == "" && !c.supported() && (host == nil || host.IPXEBinary == ""):
			return no(OutcomeUnsupportedArch, "no iPXE binary for client architecture "+strconv.Itoa(c.arch))
		}
	}

	resp := s.newReply(req)
	switch d.Type {
	case dhcpv4.MessageTypeDiscover:
		d.Reply, d.Outcome = dhcpv4.MessageTypeOffer, OutcomeOffered
	case dhcpv4.MessageTypeRequest:
		d.Reply, d.Outcome = dhcpv4.MessageTypeAck, OutcomeAcked
		if lease {
			// RFC 2131 §4.3.2: the address asked for is option 50
			// (SELECTING, INIT-REBOOT) or ciaddr (RENEWING, REBINDING).
			want := addr4(req.Options[optRequestedIP])
			if !want.IsValid() {
				want = addr4(req.ClientIPAddr)
			}
			if want.IsValid() && want != host.IP {
				d.IP = want
				d.Reply, d.Outcome = dhcpv4.MessageTypeNak, OutcomeNAK
				d.Reason = "asked for " + want.String() + ", reserved address is " + host.IP.String()
				s.nak(resp, d.Reason)
				return resp, s.destination(req, resp, from, pxePort), d
			}
		}
	case dhcpv4.MessageTypeInform:
		d.Reply, d.Outcome = dhcpv4.MessageTypeAck, OutcomeAcked
	}
	resp.Options[optMessageType] = []byte{byte(d.Reply)}
	resp.Options[optServerID] = s.serverID

	if lease {
		if d.Type == dhcpv4.MessageTypeInform {
			// RFC 2131 §4.3.5: configuration only, no address or lease.
			resp.ClientIPAddr = req.ClientIPAddr
		} else {
			resp.YourIPAddr = ip4Bytes(host.IP)
			d.IP = host.IP
			if d.Type == dhcpv4.MessageTypeRequest {
				resp.ClientIPAddr = req.ClientIPAddr
			}
			s.leaseOptions(resp, host)
		}
		configOptions(resp, host)
	} else if d.Type != dhcpv4.MessageTypeDiscover {
		resp.ClientIPAddr = req.ClientIPAddr
	}

	switch {
	case bootable:
		s.bootOptions(resp, req, c, host, &d)
	case c.netboot() && !allowed:
		d.Outcome, d.Reason = OutcomeNetbootNotAllowed, "netboot is not allowed for "+host.Name+": no boot file"
	}
	return resp, s.destination(req, resp, from, pxePort), d
}

// newReply starts a BOOTREPLY to req (RFC 2131 §4.3.1, table 3): the
// fields every reply copies, and the options it must echo.
func (s *Server) newReply(req *dhcpv4.DHCPv4) *dhcpv4.DHCPv4 {
	resp := &dhcpv4.DHCPv4{
		OpCode:        dhcpv4.OpcodeBootReply,
		HWType:        req.HWType,
		TransactionID: req.TransactionID,
		Flags:         req.Flags,
		ClientIPAddr:  net.IPv4zero,
		YourIPAddr:    net.IPv4zero,
		ServerIPAddr:  net.IPv4zero,
		GatewayIPAddr: req.GatewayIPAddr,
		ClientHWAddr:  req.ClientHWAddr,
		Options:       make(dhcpv4.Options, 16),
	}
	// RFC 3046 §2.2: the relay agent option comes back as it was sent.
	if v, ok := req.Options[optRelayAgentInfo]; ok {
		resp.Options[optRelayAgentInfo] = v
	}
	// RFC 6842: so is the client identifier.
	if v, ok := req.Options[optClientID]; ok {
		resp.Options[optClientID] = v
	}
	return resp
}

// nak turns resp into a DHCPNAK (RFC 2131 table 3): no addresses, no boot
// file, no options but the type, the server identifier and a message.
func (s *Server) nak(resp *dhcpv4.DHCPv4, msg string) {
	resp.Options[optMessageType] = []byte{byte(dhcpv4.MessageTypeNak)}
	resp.Options[optServerID] = s.serverID
	resp.Options[optMessage] = []byte(msg)
}

// leaseOptions sets the lease time, T1 and T2 (RFC 2131 §4.4.5: T1 half the
// lease, T2 seven eighths).
func (s *Server) leaseOptions(resp *dhcpv4.DHCPv4, h *Host) {
	lt := h.LeaseTime
	if lt <= 0 {
		lt = s.lease
	}
	resp.Options[optLeaseTime] = seconds(lt)
	resp.Options[optRenewalTime] = seconds(lt / 2)
	resp.Options[optRebindingTime] = seconds(lt * 7 / 8)
}

// configOptions sets what a Host says about the network: options 1, 3, 6,
// 12, 15, 42 and 121.
func configOptions(resp *dhcpv4.DHCPv4, h *Host) {
	if m := mask4(h.Netmask); m != nil {
		resp.Options[optSubnetMask] = m
	}
	if h.Gateway.Is4() {
		resp.Options[optRouter] = ip4Bytes(h.Gateway)
	}
	if v := ipList(h.DNS); v != nil {
		resp.Options[optDNS] = v
	}
	if h.Hostname != "" {
		resp.Options[optHostName] = []byte(h.Hostname)
	}
	if h.Domain != "" {
		resp.Options[optDomainName] = []byte(h.Domain)
	}
	if v := ipList(h.NTP); v != nil {
		resp.Options[optNTP] = v
	}
	if v := classlessRoutes(h.Routes, h.Gateway); v != nil {
		resp.Options[optClasslessRoutes] = v
	}
}

// Fixed option values.
var (
	pxeVendorOptions = []byte{pxeDiscoveryControl, 1, pxeDiscoveryBootFileOnly, optEnd}
	vendorPXE        = []byte(vendorClassPXE)
	vendorHTTP       = []byte(vendorClassHTTP)
)

// bootOptions points the client at what it should boot: the Hardware's own
// TFTP server and file if it sets both; else, for a running iPXE, its
// script URL; for a UEFI HTTP boot client, the iPXE binary's URL; for a PXE
// ROM, the iPXE binary over TFTP from this server.
func (s *Server) bootOptions(resp, req *dhcpv4.DHCPv4, c client, h *Host, d *Decision) {
	switch {
	case c.http:
		resp.Options[optVendorClass] = vendorHTTP
	case c.pxe:
		resp.Options[optVendorClass] = vendorPXE
		resp.Options[optVendorSpecific] = pxeVendorOptions
	}
	if c.netboot() {
		// PXE 2.1 §2.2.4: the client's UUID comes back.
		if v, ok := req.Options[optClientMachineID]; ok {
			resp.Options[optClientMachineID] = v
		}
	}

	switch {
	case h != nil && h.TFTPServer != "" && h.BootFile != "":
		resp.ServerHostName = h.TFTPServer
		resp.BootFileName = h.BootFile
		if ip, err := netip.ParseAddr(h.TFTPServer); err == nil && ip.Is4() {
			resp.ServerIPAddr = ip4Bytes(ip)
		} else {
			// A name: clients that resolve it read option 66.
			resp.Options[optTFTPServerName] = []byte(h.TFTPServer)
		}
		d.BootServer = h.TFTPServer
	case c.ipxe != "":
		resp.BootFileName = s.httpBase + ipxe.ScriptPath(req.ClientHWAddr)
		resp.ServerIPAddr = s.serverID
	default:
		binary := ipxe.BinaryFor(c.firmware)
		if h != nil && h.IPXEBinary != "" {
			binary = h.IPXEBinary
		} else if !c.supported() {
			d.Outcome = OutcomeUnsupportedArch
			d.Reason = "no iPXE binary for client architecture " + strconv.Itoa(c.arch) + ": no boot file"
			return
		}
		resp.ServerIPAddr = s.serverID
		if c.http {
			resp.BootFileName = s.httpBase + ipxe.BinaryPath(binary)
		} else {
			resp.BootFileName = binary
			d.BootServer = s.serverIP.String()
		}
	}
	d.BootFile = resp.BootFileName
}

// destination is where resp goes (RFC 2131 §4.1): to the relay agent if
// the request was relayed; broadcast for a NAK; to ciaddr if the client has
// an address; else broadcast. RFC 2131 would unicast to yiaddr when the
// broadcast bit is clear, but that needs an ARP entry for a host that has
// no address yet, which a UDP socket cannot add: broadcasting reaches every
// client, and those that asked for unicast accept broadcasts too.
// Boot server (PXEPort) replies go back where the request came from.
func (s *Server) destination(req, resp *dhcpv4.DHCPv4, from netip.AddrPort, pxePort bool) netip.AddrPort {
	if pxePort && from.Addr().Is4() && !from.Addr().IsUnspecified() {
		return from
	}
	if gi := addr4(req.GatewayIPAddr); gi.IsValid() {
		return netip.AddrPortFrom(gi, s.relayPort)
	}
	if resp.MessageType() != dhcpv4.MessageTypeNak {
		if ci := addr4(req.ClientIPAddr); ci.IsValid() {
			return netip.AddrPortFrom(ci, ClientPort)
		}
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{255, 255, 255, 255}), ClientPort)
}

// addr4 returns the IPv4 address in b (4 or 16 bytes), or the zero Addr if
// b is empty, not IPv4, or 0.0.0.0.
func addr4(b []byte) netip.Addr {
	var a netip.Addr
	switch len(b) {
	case net.IPv4len:
		a = netip.AddrFrom4([4]byte(b))
	case net.IPv6len:
		ip := net.IP(b).To4()
		if ip == nil {
			return netip.Addr{}
		}
		a = netip.AddrFrom4([4]byte(ip))
	default:
		return netip.Addr{}
	}
	if a.IsUnspecified() {
		return netip.Addr{}
	}
	return a
}

func ip4Bytes(a netip.Addr) net.IP {
	b := a.As4()
	return net.IP(b[:])
}

func ipString(b []byte) string {
	if a := addr4(b); a.IsValid() {
		return a.String()
	}
	return "0.0.0.0"
}

func mask4(m net.IPMask) []byte {
	switch len(m) {
	case net.IPv4len:
		return m
	case net.IPv6len:
		return m[12:]
	}
	return nil
}

func ipList(ips []netip.Addr) []byte {
	var b []byte
	for _, ip := range ips {
		if ip.Is4() {
			a := ip.As4()
			b = append(b, a[:]...)
		}
	}
	return b
}

func seconds(d time.Duration) []byte {
	s := d / time.Second
	if s > 0xfffffffe {
		s = 0xfffffffe // 0xffffffff means "infinite" (RFC 2132 §9.2)
	}
	return binary.BigEndian.AppendUint32(nil, uint32(s))
}

// classlessRoutes encodes routes as option 121 (RFC 3442 §2: prefix length,
// the significant octets of the destination, the router). A client that
// gets option 121 ignores option 3 (RFC 3442 §3), so the gateway is added
// as the default route unless routes has one.
func classlessRoutes(routes []Route, gw netip.Addr) []byte {
	if len(routes) == 0 {
		return nil
	}
	var b []byte
	hasDefault := false
	for _, r := range routes {
		if !r.Dest.Addr().Is4() || !r.Router.Is4() {
			continue
		}
		p := r.Dest.Masked()
		bits := p.Bits()
		if bits == 0 {
			hasDefault = true
		}
		dst := p.Addr().As4()
		rt := r.Router.As4()
		b = append(b, byte(bits))
		b = append(b, dst[:(bits+7)/8]...)
		b = append(b, rt[:]...)
	}
	if !hasDefault && gw.Is4() && b != nil {
		rt := gw.As4()
		b = append(b, 0)
		b = append(b, rt[:]...)
	}
	return b
}
