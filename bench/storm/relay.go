package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// relay is the DHCP relay agent every machine's requests go through: one
// socket on giaddr:67, which forwards each request to the server with
// giaddr set and hops counted, and hands each reply (sent by the server to
// giaddr:67, RFC 1542) to the machine waiting for its transaction ID.
type relay struct {
	conn   *net.UDPConn
	giaddr netip.Addr
	server netip.AddrPort

	mu      sync.Mutex
	waiting map[uint32]chan *dhcpv4.DHCPv4
}

// errNeedRoot explains the one privilege the storm needs.
var errNeedRoot = errors.New("the relay must bind giaddr:67, where Anvil sends relayed replies (RFC 1542): run as root (make bench does) or with CAP_NET_BIND_SERVICE")

// newRelay binds the relay's socket (first thing, so that a run without
// the privilege stops before it starts a server); forwardTo names the
// server.
func newRelay(giaddr netip.Addr) (*relay, error) {
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(giaddr, 67)))
	if err != nil {
		if errors.Is(err, syscall.EACCES) {
			return nil, fmt.Errorf("relay on %s:67: %w: %w", giaddr, err, errNeedRoot)
		}
		return nil, fmt.Errorf("relay on %s:67: %w", giaddr, err)
	}
	_ = c.SetReadBuffer(8 << 20) // a thousand answers can arrive at once
	return &relay{conn: c, giaddr: giaddr, waiting: map[uint32]chan *dhcpv4.DHCPv4{}}, nil
}

// forwardTo starts relaying to server.
func (r *relay) forwardTo(server netip.AddrPort) {
	r.server = server
	go r.loop()
}

func (r *relay) close() { r.conn.Close() }

func (r *relay) loop() {
	buf := make([]byte, 1500)
	for {
		n, err := r.conn.Read(buf)
		if err != nil {
			return // closed
		}
		p, err := dhcpv4.FromBytes(buf[:n])
		if err != nil || p.OpCode != dhcpv4.OpcodeBootReply {
			continue
		}
		xid := binary.BigEndian.Uint32(p.TransactionID[:])
		r.mu.Lock()
		ch := r.waiting[xid]
		r.mu.Unlock()
		if ch != nil {
			select {
			case ch <- p:
			default: // a duplicate answer to a retransmission
			}
		}
	}
}

// exchange sends req (its giaddr and hops set here) and waits for the
// answer of type want, retransmitting after 4, 8 and 16 s as PXE firmware
// and iPXE do (RFC 2131 §4.1). It returns the answer, the bytes sent and
// received, and the retransmissions.
func (r *relay) exchange(ctx context.Context, req *dhcpv4.DHCPv4, want dhcpv4.MessageType) (*dhcpv4.DHCPv4, int64, int, error) {
	req.GatewayIPAddr = r.giaddr.AsSlice()
	req.HopCount = 1
	xid := binary.BigEndian.Uint32(req.TransactionID[:])
	ch := make(chan *dhcpv4.DHCPv4, 4)
	r.mu.Lock()
	r.waiting[xid] = ch
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiting, xid)
		r.mu.Unlock()
	}()
	pkt := req.ToBytes()
	var bytes int64
	wait := 4 * time.Second
	for try := 0; try < 4; try++ {
		if _, err := r.conn.WriteToUDPAddrPort(pkt, r.server); err != nil {
			return nil, bytes, try, fmt.Errorf("send %s: %w", req.MessageType(), err)
		}
		bytes += int64(len(pkt))
		t := time.NewTimer(wait)
		select {
		case p := <-ch:
			t.Stop()
			bytes += int64(len(p.ToBytes()))
			if p.MessageType() != want {
				return p, bytes, try, fmt.Errorf("%s answered %s, want %s", req.MessageType(), p.MessageType(), want)
			}
			return p, bytes, try, nil
		case <-ctx.Done():
			t.Stop()
			return nil, bytes, try, ctx.Err()
		case <-t.C:
		}
		wait *= 2
	}
	return nil, bytes, 3, fmt.Errorf("%s: no %s after 4 tries (4+8+16+32 s)", req.MessageType(), want)
}

// firmware is what a client says of itself in DHCP.
type firmware struct {
	vendorClass string // option 60
	userClass   string // option 77, iPXE's
}

var (
	// pxeROM is x86-64 UEFI PXE firmware (architecture 7).
	pxeROM = firmware{vendorClass: "PXEClient:Arch:00007:UNDI:003016"}
	// ipxeFW is the iPXE binary it loaded, asking again.
	ipxeFW = firmware{vendorClass: "PXEClient:Arch:00007:UNDI:003010", userClass: "iPXE"}
)

// dora does DISCOVER, OFFER, REQUEST, ACK for mac as fw, and returns the
// ACK, the bytes moved and the retransmissions.
func (r *relay) dora(ctx context.Context, mac net.HardwareAddr, xid uint32, fw firmware) (*dhcpv4.DHCPv4, int64, int, error) {
	mods := []dhcpv4.Modifier{
		dhcpv4.WithTransactionID(txid(xid)),
		dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{0, 7}),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier(fw.vendorClass)),
		dhcpv4.WithRequestedOptions(dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter, dhcpv4.OptionDomainNameServer,
			dhcpv4.OptionTFTPServerName, dhcpv4.OptionBootfileName, dhcpv4.OptionVendorSpecificInformation),
	}
	if fw.userClass != "" {
		mods = append(mods, dhcpv4.WithUserClass(fw.userClass, false))
	}
	disc, err := dhcpv4.NewDiscovery(mac, mods...)
	if err != nil {
		return nil, 0, 0, err
	}
	offer, b1, r1, err := r.exchange(ctx, disc, dhcpv4.MessageTypeOffer)
	if err != nil {
		return nil, b1, r1, err
	}
	req, err := dhcpv4.NewRequestFromOffer(offer, mods...)
	if err != nil {
		return nil, b1, r1, err
	}
	ack, b2, r2, err := r.exchange(ctx, req, dhcpv4.MessageTypeAck)
	return ack, b1 + b2, r1 + r2, err
}

func txid(x uint32) dhcpv4.TransactionID {
	var t dhcpv4.TransactionID
	binary.BigEndian.PutUint32(t[:], x)
	return t
}

// bootFile is the boot file an answer names: option 67, else the file
// field.
func bootFile(p *dhcpv4.DHCPv4) string {
	if f := p.BootFileNameOption(); f != "" {
		return f
	}
	return p.BootFileName
}
