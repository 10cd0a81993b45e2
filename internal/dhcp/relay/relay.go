// Package relay is a DHCPv4 relay agent (RFC 1542 §4, RFC 2131 §4.1): it
// lets machines on a network segment without an Anvil boot from one
// elsewhere. It listens on the segment's interface for client broadcasts,
// forwards each request by unicast to the DHCP server(s) with giaddr set to
// its own address on the segment, and hands the servers' replies, which
// come back to giaddr, to the clients on the segment.
//
// It forwards packets as they are, changing only hops and giaddr, so every
// option reaches the server untouched. It keeps no state. It does not
// speak for the server, and does not touch anything but its two sockets;
// `anvil relay` runs it.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/anvilproj/anvil/internal/dhcp"
)

// Config configures a Relay. Servers is required, and Interface unless
// both connections are given.
type Config struct {
	// Interface is the client-side interface, e.g. "eth1": the relay
	// listens there on port 67 for client broadcasts (SO_BINDTODEVICE)
	// and sends the replies out of it.
	Interface string
	// Servers are the DHCP servers every request is forwarded to. A port
	// of 0 means dhcp.ServerPort (67).
	Servers []netip.AddrPort
	// GIAddr is the relay's address on the client segment: written into
	// giaddr, so servers pick the segment's addresses and send replies to
	// GIAddr:67. If invalid, uses Interface's first IPv4 address.
	GIAddr netip.Addr
	// MaxHops drops requests that arrive with more hops than this. If 0,
	// uses dhcp.MaxHops (16, RFC 1542 §4.1.1).
	MaxHops int
	// ClientPort is where replies to clients are sent. If 0, uses
	// dhcp.ClientPort (68); tests set it.
	ClientPort int
	// Logger logs start, stop and failures at Info and above, and each
	// packet relayed at Debug. If nil, uses slog.Default().
	Logger *slog.Logger

	// ClientConn and ServerConn, when both set, replace the sockets New
	// would open (tests): ClientConn receives the clients' requests and
	// sends them their replies, ServerConn sends requests to the servers
	// and receives their replies. The caller closes them.
	ClientConn, ServerConn net.PacketConn
}

// Relay relays DHCP between one client segment and the servers. Make one
// with New, run it with Run.
type Relay struct {
	servers    []netip.AddrPort
	giaddr     netip.Addr
	gi4        [4]byte
	maxHops    int
	clientPort uint16
	log        *slog.Logger
	iface      string
	clientConn net.PacketConn
	serverConn net.PacketConn
	owned      bool // Run closes the connections
}

// Metrics, on the default registry.
var packetsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "anvil_relay_packets_total",
	Help: "DHCP packets seen by the relay agent, by direction (to-server, to-client) and outcome (forwarded, malformed, hops-exceeded, not-ours, loop, send-error).",
}, []string{"direction", "outcome"})

const (
	dirToServer = "to-server"
	dirToClient = "to-client"

	outForwarded    = "forwarded"
	outMalformed    = "malformed"
	outHopsExceeded = "hops-exceeded"
	outNotOurs      = "not-ours"
	outLoop         = "loop"
	outSendError    = "send-error"
)

// BOOTP header layout (RFC 951, RFC 2131 §2): the fields the relay reads or
// writes, by offset.
const (
	offOp       = 0
	offHops     = 3
	offFlags    = 10
	offCIAddr   = 12
	offGIAddr   = 24
	offCHAddr   = 28
	offCookie   = 236
	headerLen   = 240 // fixed header and magic cookie
	opRequest   = 1   // BOOTREQUEST
	opReply     = 2   // BOOTREPLY
	flagBcast   = 0x80
	maxDatagram = 64 << 10
)

var magicCookie = [4]byte{99, 130, 83, 99}

// ParseServer parses a server given as "IP" or "IP:port".
func ParseServer(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if !ap.Addr().Unmap().Is4() {
			return netip.AddrPort{}, fmt.Errorf("relay: server %q: want an IPv4 address", s)
		}
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil || !ip.Unmap().Is4() {
		return netip.AddrPort{}, fmt.Errorf("relay: server %q: want IPv4 or IPv4:port", s)
	}
	return netip.AddrPortFrom(ip.Unmap(), dhcp.ServerPort), nil
}

// New checks cfg and opens the relay's sockets (unless cfg gives them):
// 0.0.0.0:67 on cfg.Interface for the clients, GIAddr:67 for the servers'
// replies. It needs root. Run closes the sockets New opened.
func New(cfg Config) (*Relay, error) {
	r := &Relay{
		giaddr:     cfg.GIAddr.Unmap(),
		maxHops:    cfg.MaxHops,
		clientPort: dhcp.ClientPort,
		log:        cfg.Logger,
		iface:      cfg.Interface,
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.maxHops <= 0 {
		r.maxHops = dhcp.MaxHops
	}
	if cfg.ClientPort != 0 {
		r.clientPort = uint16(cfg.ClientPort)
	}
	if len(cfg.Servers) == 0 {
		return nil, errors.New("relay: no server to relay to")
	}
	for _, s := range cfg.Servers {
		if !s.Addr().Unmap().Is4() {
			return nil, fmt.Errorf("relay: server %s: want an IPv4 address", s)
		}
		if s.Port() == 0 {
			s = netip.AddrPortFrom(s.Addr(), dhcp.ServerPort)
		}
		r.servers = append(r.servers, netip.AddrPortFrom(s.Addr().Unmap(), s.Port()))
	}
	injected := cfg.ClientConn != nil && cfg.ServerConn != nil
	if !r.giaddr.IsValid() {
		if cfg.Interface == "" {
			return nil, errors.New("relay: need an interface or a giaddr")
		}
		ip, err := dhcp.InterfaceAddr(cfg.Interface)
		if err != nil {
			return nil, fmt.Errorf("relay: giaddr: %w", err)
		}
		r.giaddr = ip
	}
	if !r.giaddr.Is4() || r.giaddr.IsUnspecified() {
		return nil, fmt.Errorf("relay: giaddr %s: want a unicast IPv4 address", r.giaddr)
	}
	r.gi4 = r.giaddr.As4()
	if injected {
		r.clientConn, r.serverConn = cfg.ClientConn, cfg.ServerConn
		return r, nil
	}
	if cfg.Interface == "" {
		return nil, errors.New("relay: no interface")
	}
	cc, err := dhcp.ListenDevice(cfg.Interface, dhcp.ServerPort)
	if err != nil {
		return nil, fmt.Errorf("relay: client side: %w", err)
	}
	sc, err := dhcp.ListenAddr(r.giaddr, dhcp.ServerPort)
	if err != nil {
		cc.Close()
		return nil, fmt.Errorf("relay: server side: %w", err)
	}
	r.clientConn, r.serverConn, r.owned = cc, sc, true
	return r, nil
}

// Run relays until ctx ends (it returns nil) or a socket fails (it returns
// the error). Either way it closes the sockets New opened. A packet that
// cannot be relayed is logged, counted and dropped.
func (r *Relay) Run(ctx context.Context) error {
	if r.owned {
		defer r.clientConn.Close()
		defer r.serverConn.Close()
	}
	r.log.Info("relaying DHCP", "interface", r.iface, "giaddr", r.giaddr.String(), "servers", fmt.Sprint(r.servers))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		past := time.Unix(1, 0)
		_ = r.clientConn.SetReadDeadline(past)
		_ = r.serverConn.SetReadDeadline(past)
	})
	defer stop()
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	for _, c := range []net.PacketConn{r.clientConn, r.serverConn} {
		wg.Go(func() {
			if err := r.loop(ctx, c); err != nil {
				once.Do(func() { firstErr = err })
				cancel()
			}
		})
	}
	wg.Wait()
	return firstErr
}

// Run is New and Relay.Run in one call.
func Run(ctx context.Context, cfg Config) error {
	r, err := New(cfg)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// loop reads one socket. Either socket may get either kind of packet (a
// client may unicast to giaddr; a server on the client segment replies
// through the interface), so the opcode, not the socket, says which way a
// packet goes.
func (r *Relay) loop(ctx context.Context, c net.PacketConn) error {
	buf := make([]byte, maxDatagram)
	for {
		n, addr, err := c.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("relay: read: %w", err)
		}
		var from netip.AddrPort
		if ua, ok := addr.(*net.UDPAddr); ok {
			from = ua.AddrPort()
		}
		r.handle(ctx, buf[:n], from, c == r.serverConn)
	}
}

// handle relays one datagram; pkt is modified in place.
func (r *Relay) handle(ctx context.Context, pkt []byte, from netip.AddrPort, fromServerSide bool) {
	if len(pkt) < headerLen || [4]byte(pkt[offCookie:offCookie+4]) != magicCookie {
		dir := dirToServer
		if fromServerSide {
			dir = dirToClient
		}
		r.count(dir, outMalformed)
		r.log.LogAttrs(ctx, slog.LevelInfo, "relay: dropped a datagram that is not DHCP", slog.String("from", from.String()),
			slog.Int("bytes", len(pkt)))
		return
	}
	switch pkt[offOp] {
	case opRequest:
		r.toServers(ctx, pkt, from)
	case opReply:
		r.toClient(ctx, pkt, from)
	default:
		r.count(dirToServer, outMalformed)
		r.log.LogAttrs(ctx, slog.LevelInfo, "relay: dropped a packet with an unknown op", slog.String("from", from.String()),
			slog.Int("op", int(pkt[offOp])))
	}
}

// toServers forwards a BOOTREQUEST (RFC 1542 §4.1.1): drop it past the hop
// limit, count the hop, fill giaddr if no relay before us did, send it to
// every server.
func (r *Relay) toServers(ctx context.Context, pkt []byte, from netip.AddrPort) {
	mac := chaddr(pkt)
	if int(pkt[offHops]) > r.maxHops {
		r.count(dirToServer, outHopsExceeded)
		r.log.LogAttrs(ctx, slog.LevelInfo, "relay: dropped a request past the hop limit", slog.String("mac", mac),
			slog.Int("hops", int(pkt[offHops])), slog.Int("max", r.maxHops))
		return
	}
	gi := [4]byte(pkt[offGIAddr : offGIAddr+4])
	if gi == r.gi4 && from.Addr().Unmap() == r.giaddr {
		// Our own forward came back: a server address that is ours.
		r.count(dirToServer, outLoop)
		r.log.LogAttrs(ctx, slog.LevelWarn, "relay: dropped its own forwarded request (is a --server address local?)",
			slog.String("mac", mac))
		return
	}
	pkt[offHops]++
	if gi == [4]byte{} {
		copy(pkt[offGIAddr:], r.gi4[:])
	}
	for _, s := range r.servers {
		if err := writeTo(r.serverConn, pkt, s); err != nil {
			r.count(dirToServer, outSendError)
			r.log.LogAttrs(ctx, slog.LevelWarn, "relay: forwarding to server failed", slog.String("mac", mac),
				slog.String("server", s.String()), slog.Any("error", err))
			continue
		}
		r.count(dirToServer, outForwarded)
		if r.log.Enabled(ctx, slog.LevelDebug) {
			r.log.LogAttrs(ctx, slog.LevelDebug, "relay: request forwarded", slog.String("mac", mac),
				slog.String("from", from.String()), slog.String("server", s.String()), slog.Int("hops", int(pkt[offHops])))
		}
	}
}

// toClient hands a server's BOOTREPLY to the client (RFC 1542 §4.1.2, RFC
// 2131 §4.1): broadcast if the client asked for it, the reply is a NAK or
// the client has no address yet; else unicast to ciaddr. Unicast to yiaddr
// before the client has its address needs an ARP entry a UDP socket cannot
// add, so that case is broadcast too: every client accepts broadcasts.
func (r *Relay) toClient(ctx context.Context, pkt []byte, from netip.AddrPort) {
	mac := chaddr(pkt)
	if [4]byte(pkt[offGIAddr:offGIAddr+4]) != r.gi4 {
		r.count(dirToClient, outNotOurs)
		r.log.LogAttrs(ctx, slog.LevelInfo, "relay: dropped a reply for another relay", slog.String("mac", mac),
			slog.String("giaddr", netip.AddrFrom4([4]byte(pkt[offGIAddr:offGIAddr+4])).String()), slog.String("from", from.String()))
		return
	}
	to := netip.AddrPortFrom(netip.AddrFrom4([4]byte{255, 255, 255, 255}), r.clientPort)
	ci := netip.AddrFrom4([4]byte(pkt[offCIAddr : offCIAddr+4]))
	if pkt[offFlags]&flagBcast == 0 && !ci.IsUnspecified() && messageType(pkt) != msgNAK {
		to = netip.AddrPortFrom(ci, r.clientPort)
	}
	if err := writeTo(r.clientConn, pkt, to); err != nil {
		r.count(dirToClient, outSendError)
		r.log.LogAttrs(ctx, slog.LevelWarn, "relay: sending reply to client failed", slog.String("mac", mac),
			slog.String("to", to.String()), slog.Any("error", err))
		return
	}
	r.count(dirToClient, outForwarded)
	if r.log.Enabled(ctx, slog.LevelDebug) {
		r.log.LogAttrs(ctx, slog.LevelDebug, "relay: reply forwarded", slog.String("mac", mac),
			slog.String("from", from.String()), slog.String("to", to.String()))
	}
}

func (r *Relay) count(dir, outcome string) { packetsTotal.WithLabelValues(dir, outcome).Inc() }

func writeTo(c net.PacketConn, pkt []byte, to netip.AddrPort) error {
	_, err := c.WriteTo(pkt, net.UDPAddrFromAddrPort(to))
	return err
}

// chaddr formats the client hardware address for logs.
func chaddr(pkt []byte) string {
	n := int(pkt[2]) // hlen
	if n > 16 {
		n = 16
	}
	return net.HardwareAddr(pkt[offCHAddr : offCHAddr+n]).String()
}

// DHCP option codes and values the relay reads (RFC 2132 §9.6).
const (
	optPad         = 0
	optMessageType = 53
	optEnd         = 255
	msgNAK         = 6
)

// messageType returns option 53 of pkt, or 0.
func messageType(pkt []byte) byte {
	opts := pkt[headerLen:]
	for i := 0; i < len(opts); {
		code := opts[i]
		switch code {
		case optPad:
			i++
			continue
		case optEnd:
			return 0
		}
		if i+1 >= len(opts) {
			return 0
		}
		n := int(opts[i+1])
		if i+2+n > len(opts) {
			return 0
		}
		if code == optMessageType && n == 1 {
			return opts[i+2]
		}
		i += 2 + n
	}
	return 0
}
