package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

const (
	// carrierWait is how long links get to report a cable after being set
	// up; most NICs need under a second, some switches' ports ~3 s.
	carrierWait = 8 * time.Second
	// dhcpTimeout and dhcpRetries: one DHCP exchange per link.
	dhcpTimeout = 3 * time.Second
	dhcpRetries = 3
	// networkRetryMax bounds the wait between rounds when no link got a
	// lease.
	networkRetryMax = 30 * time.Second
	// resolvConf is where the agent writes the DHCP name servers, for Go's
	// resolver (image URLs with host names).
	resolvConf = "/etc/resolv.conf"
)

// setupNetwork brings up every link, waits for cables, and runs DHCP on each
// cabled link (on a VLAN interface over it with vlan_id=) until at least one
// has an address. It returns a line per configured link. It retries until
// ctx ends.
func setupNetwork(ctx context.Context, p BootParams, logf func(string, ...any)) ([]string, error) {
	bo := backoff{min: time.Second, max: networkRetryMax}
	for {
		lines, err := networkRound(ctx, p, logf)
		if err == nil {
			return lines, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		d := bo.next()
		logf("anvil agent: network: %v; trying again in %s", err, d)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(d):
		}
	}
}

func networkRound(ctx context.Context, p BootParams, logf func(string, ...any)) ([]string, error) {
	if lo, err := netlink.LinkByName("lo"); err == nil {
		_ = netlink.LinkSetUp(lo)
	}
	links, err := physicalLinks()
	if err != nil {
		return nil, err
	}
	if len(links) == 0 {
		return nil, errors.New("no network interfaces: is the NIC's driver in the boot environment?")
	}
	for _, l := range links {
		if err := netlink.LinkSetUp(l); err != nil {
			logf("anvil agent: network: set %s up: %v", l.Attrs().Name, err)
		}
	}
	cabled := waitCarrier(ctx, links, carrierWait)
	if len(cabled) == 0 {
		names := make([]string, 0, len(links))
		for _, l := range links {
			names = append(names, l.Attrs().Name)
		}
		return nil, fmt.Errorf("no cable on any interface (%s)", strings.Join(names, ", "))
	}

	type result struct {
		lease *nclient4.Lease
		link  netlink.Link
		err   error
	}
	results := make([]result, len(cabled))
	var wg sync.WaitGroup
	for i, l := range cabled {
		wg.Add(1)
		go func() {
			defer wg.Done()
			link := l
			if p.VLANID != 0 {
				v, err := vlanLink(l, p.VLANID)
				if err != nil {
					results[i] = result{err: err}
					return
				}
				link = v
			}
			lease, err := dhcpLease(ctx, link.Attrs().Name)
			results[i] = result{lease: lease, link: link, err: err}
		}()
	}
	wg.Wait()

	var lines []string
	var errs []string
	routed := false
	var dns []net.IP
	for i := range results {
		r := &results[i]
		if r.err != nil {
			errs = append(errs, r.err.Error())
			continue
		}
		line, isDefault, err := applyLease(r.link, r.lease, !routed)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		routed = routed || isDefault
		dns = append(dns, r.lease.ACK.DNS()...)
		logf("anvil agent: %s", line)
		lines = append(lines, line)
		go renew(ctx, r.link, r.lease, logf)
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("no DHCP lease: %s", strings.Join(errs, "; "))
	}
	writeResolvConf(dns)
	return lines, nil
}

// physicalLinks lists the links that are not loopback, virtual bridges or
// VLANs we made, sorted by name.
func physicalLinks() ([]netlink.Link, error) {
	all, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list network interfaces: %w", err)
	}
	var out []netlink.Link
	for _, l := range all {
		a := l.Attrs()
		if a.Flags&net.FlagLoopback != 0 || l.Type() == "vlan" || len(a.HardwareAddr) == 0 {
			continue
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Attrs().Name < out[j].Attrs().Name })
	return out, nil
}

// waitCarrier returns the links that report a carrier within d.
func waitCarrier(ctx context.Context, links []netlink.Link, d time.Duration) []netlink.Link {
	deadline := time.Now().Add(d)
	for {
		var up []netlink.Link
		for _, l := range links {
			if hasCarrier(l.Attrs().Name) {
				up = append(up, l)
			}
		}
		// Every link cabled, or the wait is over: go with what we have.
		if len(up) == len(links) || (time.Now().After(deadline)) || ctx.Err() != nil {
			return up
		}
		// One link up is enough to go on after a short grace period for
		// the others.
		if len(up) > 0 && time.Until(deadline) < d-time.Second {
			return up
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func hasCarrier(name string) bool {
	b, err := os.ReadFile("/sys/class/net/" + name + "/carrier")
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// vlanLink creates (or finds) the VLAN interface id over parent, set up.
func vlanLink(parent netlink.Link, id int) (netlink.Link, error) {
	name := fmt.Sprintf("%s.%d", parent.Attrs().Name, id)
	if len(name) > unix.IFNAMSIZ-1 {
		name = fmt.Sprintf("vlan%d", id)
	}
	if l, err := netlink.LinkByName(name); err == nil {
		return l, netlink.LinkSetUp(l)
	}
	v := &netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: name, ParentIndex: parent.Attrs().Index}, VlanId: id}
	if err := netlink.LinkAdd(v); err != nil {
		return nil, fmt.Errorf("vlan %d on %s: %w", id, parent.Attrs().Name, err)
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil, err
	}
	return l, netlink.LinkSetUp(l)
}

// dhcpLease runs one DHCP exchange (DISCOVER, OFFER, REQUEST, ACK) on
// ifname. Its messages are built here rather than with the DHCP library's
// constructors because those draw the transaction ID from the kernel's
// random pool, which early in boot on a machine without a hardware random
// source (a VM's default CPU model, older servers) is not ready for
// seconds; a transaction ID only has to differ from other clients' on the
// segment, which the MAC and the clock give.
func dhcpLease(ctx context.Context, ifname string) (*nclient4.Lease, error) {
	c, err := nclient4.New(ifname, nclient4.WithTimeout(dhcpTimeout), nclient4.WithRetry(dhcpRetries))
	if err != nil {
		return nil, fmt.Errorf("dhcp on %s: %w", ifname, err)
	}
	defer c.Close()
	hw := c.InterfaceAddr()
	common := []dhcpv4.Modifier{
		dhcpv4.WithHwAddr(hw),
		dhcpv4.WithBroadcast(true),
		dhcpv4.WithRequestedOptions(dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter, dhcpv4.OptionDomainName,
			dhcpv4.OptionDomainNameServer, dhcpv4.OptionClasslessStaticRoute, dhcpv4.OptionIPAddressLeaseTime),
		dhcpv4.WithOption(dhcpv4.OptMaxMessageSize(nclient4.MaxMessageSize)),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier(vendorClass)),
	}
	discover := newMessage(hw, append(common, dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover))...)
	offer, err := c.SendAndRead(ctx, c.RemoteAddr(), discover, nclient4.IsMessageType(dhcpv4.MessageTypeOffer))
	if err != nil {
		return nil, fmt.Errorf("dhcp on %s: no offer: %w", ifname, err)
	}
	request := newMessage(hw, append(common,
		dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(offer.YourIPAddr)),
		dhcpv4.WithOptionCopied(offer, dhcpv4.OptionServerIdentifier),
	)...)
	request.TransactionID = discover.TransactionID
	ack, err := c.SendAndRead(ctx, c.RemoteAddr(), request, nclient4.IsAll(
		nclient4.IsCorrectServer(offer.ServerIdentifier()),
		nclient4.IsMessageType(dhcpv4.MessageTypeAck, dhcpv4.MessageTypeNak)))
	if err != nil {
		return nil, fmt.Errorf("dhcp on %s: no answer to the request for %s: %w", ifname, offer.YourIPAddr, err)
	}
	if ack.MessageType() == dhcpv4.MessageTypeNak {
		return nil, fmt.Errorf("dhcp on %s: %s refused %s: %s", ifname, offer.ServerIdentifier(), offer.YourIPAddr, ack.Message())
	}
	return &nclient4.Lease{Offer: offer, ACK: ack, CreationTime: time.Now()}, nil
}

// vendorClass is the agent's DHCP option 60, so a server's log tells the
// boot environment's requests from the firmware's.
const vendorClass = "anvil-agent"

// newMessage is a BOOTREQUEST with a transaction ID from the MAC and the
// clock (see dhcpLease).
func newMessage(hw net.HardwareAddr, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	h := fnv.New32a()
	h.Write(hw)
	var t [8]byte
	binary.LittleEndian.PutUint64(t[:], uint64(time.Now().UnixNano()))
	h.Write(t[:])
	var xid dhcpv4.TransactionID
	binary.BigEndian.PutUint32(xid[:], h.Sum32())
	m := &dhcpv4.DHCPv4{
		OpCode:        dhcpv4.OpcodeBootRequest,
		HWType:        iana.HWTypeEthernet,
		ClientHWAddr:  make(net.HardwareAddr, 6),
		TransactionID: xid,
		ClientIPAddr:  net.IPv4zero,
		YourIPAddr:    net.IPv4zero,
		ServerIPAddr:  net.IPv4zero,
		GatewayIPAddr: net.IPv4zero,
		Options:       dhcpv4.Options{},
	}
	for _, mod := range mods {
		mod(m)
	}
	return m
}

// applyLease puts the lease's address on link, and, when withDefault, its
// routers as the default route and its classless static routes. It returns
// a line describing it and whether a default route was set.
func applyLease(link netlink.Link, lease *nclient4.Lease, withDefault bool) (string, bool, error) {
	ack := lease.ACK
	name := link.Attrs().Name
	mask := ack.SubnetMask()
	if mask == nil {
		mask = ack.YourIPAddr.DefaultMask()
	}
	ipnet := &net.IPNet{IP: ack.YourIPAddr, Mask: mask}
	addr := &netlink.Addr{IPNet: ipnet}
	if lt := ack.IPAddressLeaseTime(0); lt > 0 {
		addr.ValidLft, addr.PreferedLft = int(lt.Seconds()), int(lt.Seconds())
	}
	if err := netlink.AddrReplace(link, addr); err != nil {
		return "", false, fmt.Errorf("address %s on %s: %w", ipnet, name, err)
	}
	line := fmt.Sprintf("%s: %s from DHCP server %s", name, ipnet, ack.ServerIdentifier())
	isDefault := false
	// RFC 3442: with classless static routes the router option is ignored.
	if routes := ack.ClasslessStaticRoute(); len(routes) > 0 {
		for _, r := range routes {
			rt := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: r.Dest, Gw: r.Router}
			if r.Router.IsUnspecified() {
				rt.Gw, rt.Scope = nil, netlink.SCOPE_LINK
			}
			ones, _ := r.Dest.Mask.Size()
			if ones == 0 {
				if !withDefault {
					continue
				}
				rt.Dst = nil
				isDefault = true
			}
			if err := netlink.RouteReplace(rt); err != nil {
				return "", false, fmt.Errorf("route %s via %s on %s: %w", r.Dest, r.Router, name, err)
			}
		}
	} else if gws := ack.Router(); withDefault && len(gws) > 0 {
		if err := netlink.RouteReplace(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: gws[0]}); err != nil {
			return "", false, fmt.Errorf("default route via %s on %s: %w", gws[0], name, err)
		}
		line += ", gateway " + gws[0].String()
		isDefault = true
	}
	return line, isDefault, nil
}

// renew keeps the lease: at half its time it renews, and on failure asks
// anew; the address is replaced with what the server gives.
func renew(ctx context.Context, link netlink.Link, lease *nclient4.Lease, logf func(string, ...any)) {
	for {
		lt := lease.ACK.IPAddressLeaseTime(time.Hour)
		t := time.NewTimer(lt / 2)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		name := link.Attrs().Name
		c, err := nclient4.New(name, nclient4.WithTimeout(dhcpTimeout), nclient4.WithRetry(dhcpRetries))
		if err != nil {
			logf("anvil agent: renew the lease on %s: %v", name, err)
			continue
		}
		next, err := c.Renew(ctx, lease)
		c.Close()
		if err != nil {
			next, err = dhcpLease(ctx, name)
		}
		if err != nil {
			logf("anvil agent: renew the lease on %s: %v (keeping the address)", name, err)
			continue
		}
		lease = next
		if _, _, err := applyLease(link, lease, false); err != nil {
			logf("anvil agent: renewed lease on %s: %v", name, err)
		}
	}
}

// writeResolvConf writes the name servers for Go's resolver.
func writeResolvConf(servers []net.IP) {
	if len(servers) == 0 {
		return
	}
	var b strings.Builder
	seen := map[string]bool{}
	for _, s := range servers {
		if k := s.String(); !seen[k] {
			seen[k] = true
			fmt.Fprintf(&b, "nameserver %s\n", k)
		}
	}
	_ = os.MkdirAll("/etc", 0o755)
	_ = os.WriteFile(resolvConf, []byte(b.String()), 0o644)
}
