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
	"github.com/anvilproj/anvil/internal/macaddr"
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
	// MAC is the client's hardware address (chaddr); the zero MAC when
	// chaddr is not an Ethernet address.
	MAC macaddr.MAC
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
	return s.reply(ctx, req, from, port, nil)
}

// reply is Reply building the answer in sc's memory (Serve's workers), or
// in new memory if sc is nil. With sc, the reply is valid until sc's next
// use.
func (s *Server) reply(ctx context.Context, req *dhcpv4.DHCPv4, from netip.AddrPort, port int, sc *scratch) (*dhcpv4.DHCPv4, netip.AddrPort, Decision) {
	// chaddr becomes a MAC here, once: the Backend, the boot file's URL,
	// the log and the machine's record all take this value.
	mac, ethernet := macaddr.FromBytes(req.ClientHWAddr)
	if sc != nil {
		sc.host = nil
	}
	d := Decision{Type: req.MessageType(), MAC: mac, IP: addr4(req.ClientIPAddr)}
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
	case !ethernet:
		// No Hardware can have it (a Hardware interface's MAC is six
		// bytes), and no script URL can name it.
		return no(OutcomeIgnored, "client hardware address of "+strconv.Itoa(len(req.ClientHWAddr))+" bytes, not an Ethernet MAC")
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
		if ip := addr4(req.Options[optRequestedIP]); ip.IsValid() {
			d.IP = ip
		}
		if sid := req.Options[optServerID]; len(sid) > 0 && !bytes.Equal(sid, s.serverID) {
			// Next to another DHCP server (proxy mode) this is the machine
			// taking its address from that server: d.IP carries it into
			// the machine's events, so what the machine does from that
			// address (its TFTP download) is filed in its record.
			reason := "for another server (" + ipString(sid) + ")"
			if d.IP.IsValid() {
				reason += ", address " + d.IP.String()
			}
			return no(OutcomeIgnored, reason)
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
	var (
		host *Host
		err  error
	)
	if sc != nil && sc.looked.ok && sc.looked.mac == mac {
		// The template path asked the Backend about this packet already.
		host, err = sc.looked.host, sc.looked.err
	} else {
		host, err = s.backend.Lookup(ctx, mac)
	}
	if errors.Is(err, ErrUnknownHost) && s.unknown != nil && s.mode == ModeReservation && !pxePort {
		// Discovery: an address from the pool of the client's subnet.
		want := addr4(req.Options[optRequestedIP])
		if !want.IsValid() {
			want = addr4(req.ClientIPAddr)
		}
		host, err = s.unknown.LookupUnknown(ctx, UnknownRequest{MAC: mac, Relay: addr4(req.GatewayIPAddr), Requested: want})
	}
	switch {
	case errors.Is(err, ErrUnknownHost):
		host = nil
	case err != nil:
		return no(OutcomeBackendError, err.Error())
	case host == nil:
		return no(OutcomeBackendError, "backend returned no host and no error")
	}
	if sc != nil {
		sc.host = host // the template path keys what it learns from this reply on it
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

	resp, v := s.newReply(req, sc)
	if sc != nil {
		defer func() { sc.arena = v.b }()
	}
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
				s.nak(resp, v, d.Reason)
				return resp, s.destination(req, resp, from, pxePort), d
			}
		}
	case dhcpv4.MessageTypeInform:
		d.Reply, d.Outcome = dhcpv4.MessageTypeAck, OutcomeAcked
	}
	resp.Options[optMessageType] = msgTypeOption(d.Reply)
	resp.Options[optServerID] = s.serverID

	if lease {
		if d.Type == dhcpv4.MessageTypeInform {
			// RFC 2131 §4.3.5: configuration only, no address or lease.
			resp.ClientIPAddr = req.ClientIPAddr
		} else {
			resp.YourIPAddr = v.ip(host.IP)
			d.IP = host.IP
			if d.Type == dhcpv4.MessageTypeRequest {
				resp.ClientIPAddr = req.ClientIPAddr
			}
			s.leaseOptions(resp, v, host)
		}
		configOptions(resp, v, host)
	} else if d.Type != dhcpv4.MessageTypeDiscover {
		resp.ClientIPAddr = req.ClientIPAddr
	}

	switch {
	case bootable:
		s.bootOptions(resp, v, req, c, host, &d)
	case c.netboot() && !allowed:
		d.Outcome, d.Reason = OutcomeNetbootNotAllowed, "netboot is not allowed for "+host.Name+": no boot file"
	}
	return resp, s.destination(req, resp, from, pxePort), d
}

// newReply starts a BOOTREPLY to req (RFC 2131 §4.3.1, table 3): the
// fields every reply copies, and the options it must echo. With sc it
// reuses sc's reply and option arena.
func (s *Server) newReply(req *dhcpv4.DHCPv4, sc *scratch) (*dhcpv4.DHCPv4, *values) {
	var (
		resp *dhcpv4.DHCPv4
		v    *values
	)
	if sc != nil {
		resp = &sc.resp
		opts := resp.Options
		clear(opts)
		*resp = dhcpv4.DHCPv4{Options: opts}
		v = &values{b: sc.arena[:0]}
	} else {
		resp = &dhcpv4.DHCPv4{Options: make(dhcpv4.Options, 16)}
		v = &values{b: make([]byte, 0, 256)}
	}
	resp.OpCode = dhcpv4.OpcodeBootReply
	resp.HWType = req.HWType
	resp.TransactionID = req.TransactionID
	resp.Flags = req.Flags
	resp.ClientIPAddr = zeroIP
	resp.YourIPAddr = zeroIP
	resp.ServerIPAddr = zeroIP
	resp.GatewayIPAddr = req.GatewayIPAddr
	resp.ClientHWAddr = req.ClientHWAddr
	// RFC 3046 §2.2: the relay agent option comes back as it was sent.
	if o, ok := req.Options[optRelayAgentInfo]; ok {
		resp.Options[optRelayAgentInfo] = o
	}
	// RFC 6842: so is the client identifier.
	if o, ok := req.Options[optClientID]; ok {
		resp.Options[optClientID] = o
	}
	return resp, v
}

// zeroIP is 0.0.0.0 for reply fields; never modified.
var zeroIP = net.IP{0, 0, 0, 0}

// values cuts option values out of one growing buffer: one allocation
// per reply, none with a worker's scratch. A value stays valid when the
// buffer grows, as it keeps pointing at the old array.
type values struct{ b []byte }

func (v *values) bytes(p ...byte) []byte {
	i := len(v.b)
	v.b = append(v.b, p...)
	return v.b[i:len(v.b):len(v.b)]
}

func (v *values) str(s string) []byte {
	i := len(v.b)
	v.b = append(v.b, s...)
	return v.b[i:len(v.b):len(v.b)]
}

func (v *values) ip(a netip.Addr) net.IP {
	b := a.As4()
	return v.bytes(b[:]...)
}

// ips is the IPv4 addresses of ips, concatenated; nil if none.
func (v *values) ips(ips []netip.Addr) []byte {
	i := len(v.b)
	for _, ip := range ips {
		if ip.Is4() {
			a := ip.As4()
			v.b = append(v.b, a[:]...)
		}
	}
	if len(v.b) == i {
		return nil
	}
	return v.b[i:len(v.b):len(v.b)]
}

func (v *values) seconds(d time.Duration) []byte {
	s := d / time.Second
	if s > 0xfffffffe {
		s = 0xfffffffe // 0xffffffff means "infinite" (RFC 2132 §9.2)
	}
	i := len(v.b)
	v.b = binary.BigEndian.AppendUint32(v.b, uint32(s))
	return v.b[i:len(v.b):len(v.b)]
}

// msgTypeOption is option 53 for t, shared and never modified.
func msgTypeOption(t dhcpv4.MessageType) []byte {
	switch t {
	case dhcpv4.MessageTypeOffer:
		return optOffer
	case dhcpv4.MessageTypeAck:
		return optAck
	case dhcpv4.MessageTypeNak:
		return optNak
	}
	return []byte{byte(t)}
}

var (
	optOffer = []byte{byte(dhcpv4.MessageTypeOffer)}
	optAck   = []byte{byte(dhcpv4.MessageTypeAck)}
	optNak   = []byte{byte(dhcpv4.MessageTypeNak)}
)

// nak turns resp into a DHCPNAK (RFC 2131 table 3): no addresses, no boot
// file, no options but the type, the server identifier and a message.
func (s *Server) nak(resp *dhcpv4.DHCPv4, v *values, msg string) {
	resp.Options[optMessageType] = optNak
	resp.Options[optServerID] = s.serverID
	resp.Options[optMessage] = v.str(msg)
}

// leaseOptions sets the lease time, T1 and T2 (RFC 2131 §4.4.5: T1 half the
// lease, T2 seven eighths).
func (s *Server) leaseOptions(resp *dhcpv4.DHCPv4, v *values, h *Host) {
	lt := h.LeaseTime
	if lt <= 0 {
		lt = s.lease
	}
	resp.Options[optLeaseTime] = v.seconds(lt)
	resp.Options[optRenewalTime] = v.seconds(lt / 2)
	resp.Options[optRebindingTime] = v.seconds(lt * 7 / 8)
}

// configOptions sets what a Host says about the network: options 1, 3, 6,
// 12, 15, 42 and 121.
func configOptions(resp *dhcpv4.DHCPv4, v *values, h *Host) {
	if m := mask4(h.Netmask); m != nil {
		resp.Options[optSubnetMask] = v.bytes(m...)
	}
	if h.Gateway.Is4() {
		resp.Options[optRouter] = v.ip(h.Gateway)
	}
	if b := v.ips(h.DNS); b != nil {
		resp.Options[optDNS] = b
	}
	if h.Hostname != "" {
		resp.Options[optHostName] = v.str(h.Hostname)
	}
	if h.Domain != "" {
		resp.Options[optDomainName] = v.str(h.Domain)
	}
	if b := v.ips(h.NTP); b != nil {
		resp.Options[optNTP] = b
	}
	if b := classlessRoutes(v, h.Routes, h.Gateway); b != nil {
		resp.Options[optClasslessRoutes] = b
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
func (s *Server) bootOptions(resp *dhcpv4.DHCPv4, v *values, req *dhcpv4.DHCPv4, c client, h *Host, d *Decision) {
	switch {
	case c.http:
		resp.Options[optVendorClass] = vendorHTTP
	case c.pxe:
		resp.Options[optVendorClass] = vendorPXE
		resp.Options[optVendorSpecific] = pxeVendorOptions
	}
	if c.netboot() {
		// PXE 2.1 §2.2.4: the client's UUID comes back.
		if o, ok := req.Options[optClientMachineID]; ok {
			resp.Options[optClientMachineID] = o
		}
	}

	switch {
	case h != nil && h.TFTPServer != "" && h.BootFile != "":
		resp.ServerHostName = h.TFTPServer
		resp.BootFileName = h.BootFile
		if ip, err := netip.ParseAddr(h.TFTPServer); err == nil && ip.Is4() {
			resp.ServerIPAddr = v.ip(ip)
		} else {
			// A name: clients that resolve it read option 66.
			resp.Options[optTFTPServerName] = v.str(h.TFTPServer)
		}
		d.BootServer = h.TFTPServer
	case c.ipxe != "":
		resp.BootFileName = s.httpBase + ipxe.ScriptPath(d.MAC)
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
	return s.destinationOf(req.GatewayIPAddr, req.ClientIPAddr, resp.MessageType() == dhcpv4.MessageTypeNak, from, pxePort)
}

// destinationOf is destination given the request's giaddr and ciaddr (4
// or 16 bytes) and whether the reply is a NAK.
func (s *Server) destinationOf(giaddr, ciaddr []byte, nak bool, from netip.AddrPort, pxePort bool) netip.AddrPort {
	if pxePort && from.Addr().Is4() && !from.Addr().IsUnspecified() {
		return from
	}
	if gi := addr4(giaddr); gi.IsValid() {
		return netip.AddrPortFrom(gi, s.relayPort)
	}
	if !nak {
		if ci := addr4(ciaddr); ci.IsValid() {
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

// classlessRoutes encodes routes as option 121 (RFC 3442 §2: prefix length,
// the significant octets of the destination, the router). A client that
// gets option 121 ignores option 3 (RFC 3442 §3), so the gateway is added
// as the default route unless routes has one.
func classlessRoutes(v *values, routes []Route, gw netip.Addr) []byte {
	if len(routes) == 0 {
		return nil
	}
	i := len(v.b)
	b := v.b
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
	if !hasDefault && gw.Is4() && len(b) > i {
		rt := gw.As4()
		b = append(b, 0)
		b = append(b, rt[:]...)
	}
	v.b = b
	if len(b) == i {
		return nil
	}
	return b[i:len(b):len(b)]
}
