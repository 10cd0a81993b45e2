package dhcp

import (
	"bytes"
	"context"
	"sync"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/anvilproj/anvil/internal/macaddr"
)

// Reply templates: the reservation path without allocation.
//
// In reservation mode nearly every packet is a DISCOVER or REQUEST from a
// machine with a reservation, and the answer to it differs from the last
// answer to the same machine only in fields copied from the request: the
// transaction ID, flags, giaddr, ciaddr, and the options echoed back (61,
// 82, 97). So the first such answer, built by Reply's general code, is kept
// in wire form as a template, and the next requests of the same shape are
// answered by copying the template and patching those fields in: no option
// map, no option encoding, no decision log sentence built again.
//
// A template belongs to one *Host value. The Backend's contract is that a
// Host it returned is never modified (bootpolicy builds a new one when its
// watch delivers a changed Hardware), so a Lookup that returns another
// pointer than the template's invalidates every template of that MAC: an
// edited Hardware is answered from the new Host on its next packet.
//
// Only answers whose every byte and every Decision field follow from the
// template key and the patched fields are kept (lease answers: OFFER and
// ACK in reservation mode on the DHCP port). Anything else (a NAK, an
// INFORM, proxy modes, the PXE port, a repeated option, a chaddr that is not
// six bytes) goes through the general path, whose result is the reference:
// TestTemplateMatchesReply and FuzzWire check that both give the same bytes.

// maxTemplateMACs bounds the template cache: past it the cache starts
// afresh, so Hardware deleted long ago cannot pin memory forever.
const maxTemplateMACs = 1 << 16

// maxTemplatesPerMAC bounds the shapes kept for one MAC (message type ×
// client kind × echoed options); a MAC that sends more shapes starts its
// list afresh.
const maxTemplatesPerMAC = 8

// Echoed-option presence bits of a templateKey.
const (
	echoClientID  = 1 << iota // option 61
	echoMachineID             // option 97
	echoRelay                 // option 82
)

// templateKey is what, besides the Host, decides the bytes of an answer
// apart from the patched fields.
type templateKey struct {
	typ  dhcpv4.MessageType
	c    client
	echo uint8 // echo* bits: which echoed options the request carried
}

// template is one answer in wire form, and the Decision that goes with it.
type template struct {
	key templateKey
	// head is the BOOTP header and magic cookie (240 bytes); opts the
	// options up to (not including) the end option, without the echoed
	// ones; split61 and split97 where options 61 and 97 go in opts (options
	// are in code order; 82 goes last, RFC 3046 §2.1).
	head             []byte
	opts             []byte
	split61, split97 int
	// echo97 says whether the answer echoes option 97 (only netboot
	// answers with boot information do).
	echo97 bool
	// patchCiaddr: the answer copies the request's ciaddr (ACK).
	patchCiaddr bool
	decision    Decision
	msg         string // decision.Message()
	packets     prometheus.Counter
}

// macTemplates are the templates of one MAC, for one Host. Never modified
// once published: a change publishes a new value.
type macTemplates struct {
	host *Host
	list []*template
}

// templates is a Server's cache of templates.
type templates struct {
	mu    sync.RWMutex
	byMAC map[macaddr.MAC]*macTemplates
}

func (ts *templates) get(mac macaddr.MAC, host *Host, key templateKey) *template {
	ts.mu.RLock()
	e := ts.byMAC[mac]
	ts.mu.RUnlock()
	if e == nil || e.host != host {
		return nil
	}
	for _, t := range e.list {
		if t.key == key {
			return t
		}
	}
	return nil
}

func (ts *templates) put(mac macaddr.MAC, host *Host, t *template) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.byMAC == nil || len(ts.byMAC) >= maxTemplateMACs {
		ts.byMAC = make(map[macaddr.MAC]*macTemplates)
	}
	e := ts.byMAC[mac]
	n := &macTemplates{host: host}
	if e != nil && e.host == host && len(e.list) < maxTemplatesPerMAC {
		n.list = append(n.list, e.list...)
	}
	n.list = append(n.list, t)
	ts.byMAC[mac] = n
}

// scan is what the template path reads of a request: the options it
// decides on and echoes, as slices of the packet.
type scan struct {
	typ                            dhcpv4.MessageType
	requested, serverID            []byte // 50, 54
	vendorClass, userClass, arch   []byte // 60, 77, 93
	clientID, relayInfo, machineID []byte // 61, 82, 97
	ipxeEncap                      bool   // 175 present
	echo                           uint8
}

// scanRequest reads pkt into r. It reports false, and the packet goes
// through the general path, unless pkt is a well-formed BOOTREQUEST (as
// parseInto has it) with a six-byte chaddr, at most MaxHops hops, one
// message type option and no option repeated (RFC 3396 concatenation is
// left to parseInto).
func scanRequest(pkt []byte, r *scan) bool {
	if len(pkt) < headerLen+len(magicCookie) || [4]byte(pkt[headerLen:headerLen+4]) != magicCookie {
		return false
	}
	if dhcpv4.OpcodeType(pkt[0]) != dhcpv4.OpcodeBootRequest || pkt[2] != macaddr.Len || pkt[3] > MaxHops {
		return false
	}
	*r = scan{}
	var seen [4]uint64
	o := newOptionReader(pkt[headerLen+4:])
	for code, v, ok := o.next(); ok; code, v, ok = o.next() {
		n := len(v)
		if seen[code>>6]&(1<<(code&63)) != 0 {
			return false
		}
		seen[code>>6] |= 1 << (code & 63)
		switch code {
		case optMessageType:
			if n != 1 {
				return false
			}
			r.typ = dhcpv4.MessageType(v[0])
		case optRequestedIP:
			r.requested = v
		case optServerID:
			r.serverID = v
		case optVendorClass:
			r.vendorClass = v
		case optUserClass:
			r.userClass = v
		case optClientArch:
			r.arch = v
		case optIPXEEncap:
			r.ipxeEncap = true
		case optClientID:
			r.clientID = v
			r.echo |= echoClientID
		case optMachineID:
			r.machineID = v
			r.echo |= echoMachineID
		case optRelayAgentInfo:
			r.relayInfo = v
			r.echo |= echoRelay
		}
	}
	return o.complete()
}

// optMachineID is optClientMachineID, short for the switch above.
const optMachineID = optClientMachineID

// templated answers pkt from a template if it can. It returns the answer,
// where it goes and its decision; a nil template with ok true means the
// request is of a templated kind but no template matches yet (the caller
// answers it the general way and then calls learn); ok false means the
// request is not for templates at all.
func (s *Server) templated(ctx context.Context, sc *scratch, pkt []byte) (t *template, key templateKey, ok bool) {
	r := &sc.scan
	if !scanRequest(pkt, r) {
		return nil, key, false
	}
	switch r.typ {
	case dhcpv4.MessageTypeDiscover:
	case dhcpv4.MessageTypeRequest:
		if len(r.serverID) > 0 && string(r.serverID) != string(s.serverID) {
			return nil, key, false
		}
	default:
		return nil, key, false
	}
	mac := macaddr.From([macaddr.Len]byte(pkt[28:34]))
	host, err := s.backend.Lookup(ctx, mac)
	sc.looked.ok, sc.looked.mac, sc.looked.host, sc.looked.err = true, mac, host, err
	if err != nil || host == nil || host.DisableDHCP || !host.IP.Is4() {
		return nil, key, false
	}
	if r.typ == dhcpv4.MessageTypeRequest {
		// The address asked for (option 50, else ciaddr) must be the
		// reservation: anything else is a NAK, answered the general way.
		want := addr4(r.requested)
		if !want.IsValid() {
			want = addr4(pkt[12:16])
		}
		if want.IsValid() && want != host.IP {
			return nil, key, false
		}
	}
	key = templateKey{
		typ:  r.typ,
		c:    classifyOptions(r.vendorClass, r.arch, r.userClass, r.ipxeEncap),
		echo: r.echo,
	}
	return s.templates.get(mac, host, key), key, true
}

// fill writes the answer to the request in pkt (scanned into r) into
// sc.out from t.
func (t *template) fill(sc *scratch, pkt []byte) []byte {
	r := &sc.scan
	b := append(sc.out[:0], t.head...)
	b[1] = pkt[1]              // htype
	copy(b[4:8], pkt[4:8])     // xid
	copy(b[10:12], pkt[10:12]) // flags
	copy(b[24:28], pkt[24:28]) // giaddr
	if t.patchCiaddr {
		copy(b[12:16], pkt[12:16]) // ciaddr
	}
	b = append(b, t.opts[:t.split61]...)
	if r.echo&echoClientID != 0 {
		b = appendOption(b, optClientID, r.clientID)
	}
	b = append(b, t.opts[t.split61:t.split97]...)
	if t.echo97 {
		b = appendOption(b, optMachineID, r.machineID)
	}
	b = append(b, t.opts[t.split97:]...)
	if r.echo&echoRelay != 0 {
		b = appendOption(b, optRelayAgentInfo, r.relayInfo)
	}
	b = append(b, optEnd)
	for len(b) < bootpMinLen {
		b = append(b, optPad)
	}
	sc.out = b
	return b
}

// learn keeps the answer just built by the general path (resp, for the
// request scanned into sc.scan, with decision d) as the template for key,
// if it is an answer templates can reproduce. It may modify resp.
func (s *Server) learn(sc *scratch, key templateKey, resp *dhcpv4.DHCPv4, d *Decision) {
	host := sc.host
	want := dhcpv4.MessageTypeOffer
	if key.typ == dhcpv4.MessageTypeRequest {
		want = dhcpv4.MessageTypeAck
	}
	if host == nil || !host.IP.Is4() || d.Reply != want || d.Type != key.typ {
		return
	}
	t := &template{key: key, decision: *d, patchCiaddr: key.typ == dhcpv4.MessageTypeRequest}
	_, t.echo97 = resp.Options[optMachineID]
	for _, c := range []uint8{optClientID, optMachineID, optRelayAgentInfo} {
		delete(resp.Options, c)
	}
	// Cloned to its length: a template lives as long as its Host, and
	// there is one or two per machine (about 0.5 KiB each).
	full := bytes.Clone(appendPacket(nil, resp))
	t.head = full[:headerLen+len(magicCookie)]
	// Find the end option and where 61 and 97 would go, walking the
	// options appendPacket wrote in code order.
	opts := full[len(t.head):]
	t.split61, t.split97 = -1, -1
	i := 0
	for opts[i] != optEnd {
		if opts[i] > optClientID && t.split61 < 0 {
			t.split61 = i
		}
		if opts[i] > optMachineID && t.split97 < 0 {
			t.split97 = i
		}
		i += 2 + int(opts[i+1])
	}
	if t.split61 < 0 {
		t.split61 = i
	}
	if t.split97 < 0 {
		t.split97 = i
	}
	t.opts = opts[:i:i]
	t.msg = d.Message()
	t.packets = cachedCounter(packetsTotal, "packets", typeLabel(d.Type), d.Outcome)
	s.templates.put(d.MAC, host, t)
}

// appendOption appends one option as appendPacket writes it: split into
// 255-byte pieces (RFC 3396), or code and zero length if v is empty.
func appendOption(b []byte, code byte, v []byte) []byte {
	if len(v) == 0 {
		return append(b, code, 0)
	}
	for len(v) > 0 {
		k := min(len(v), 255)
		b = append(b, code, byte(k))
		b = append(b, v[:k]...)
		v = v[k:]
	}
	return b
}
