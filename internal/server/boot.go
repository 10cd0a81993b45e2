package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/bootpolicy"
	"github.com/anvilproj/anvil/internal/dhcp"
	"github.com/anvilproj/anvil/internal/dhcp/pool"
	"github.com/anvilproj/anvil/internal/httpboot"
	"github.com/anvilproj/anvil/internal/ipxe"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/metadata"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/peers"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/supervise"
	"github.com/anvilproj/anvil/internal/syslog"
	"github.com/anvilproj/anvil/internal/tftp"
)

// bootServices are the network boot services of `anvil serve`: DHCP (and
// the PXE port in proxy modes), TFTP, syslog, the HTTP boot routes and the
// metadata service. It only wires them: each protocol lives in its own
// package, and what a machine gets is the boot policy's decision.
type bootServices struct {
	log      *slog.Logger
	policy   *bootpolicy.Policy
	http     *httpboot.Handler
	metadata *metadata.Handler
	packets  []packetService
	public   netip.Addr // the address machines reach this server at
	// isoURL is the URL of a Hardware's boot ISO (Config.BootISO), nil
	// when none is served.
	isoURL func(*model.Hardware) string
	// pools lease addresses to unknown machines (--discovery-pool), nil
	// when there are none.
	pools *pool.Pools
}

// discovery is the API's discovery configuration for cfg (nil when
// --discovery is off): the discovered machines' namespace and cap, their
// pool leases, and where their events go.
func (b *bootServices) discovery(cfg Config, events machinelog.Sink) *api.DiscoveryConfig {
	if !cfg.Discovery {
		return nil
	}
	d := &api.DiscoveryConfig{Namespace: cfg.DiscoveryNamespace, Max: cfg.DiscoveryMax, Events: events}
	if p := b.pools; p != nil {
		d.Lease = func(mac macaddr.MAC, ip netip.Addr) (model.IP, bool) {
			subnet, gw, ok := p.Leased(mac, ip)
			if !ok {
				return model.IP{}, false
			}
			l := model.IP{Address: ip.String(), Netmask: net.IP(net.CIDRMask(subnet.Bits(), 32)).String(), Family: 4}
			if gw.IsValid() {
				l.Gateway = gw.String()
			}
			return l, true
		}
	}
	return d
}

// discoveryPools opens the lease pools of --discovery-pool for DHCP mode
// mode, or returns nil when there are none.
func discoveryPools(cfg Config, mode dhcp.Mode, public netip.Addr, st store.Store) (*pool.Pools, error) {
	if len(cfg.DiscoveryPools) == 0 {
		return nil, nil
	}
	switch {
	case !cfg.Discovery:
		return nil, errors.New("--discovery-pool: discovery is off (add --discovery)")
	case mode != dhcp.ModeReservation:
		return nil, fmt.Errorf("--discovery-pool: the DHCP mode is %s, which gives no addresses (the network's DHCP server does); pools are for reservation mode", mode)
	}
	var ranges []pool.Range
	for _, s := range cfg.DiscoveryPools {
		r, err := pool.ParseRange(s)
		if err != nil {
			return nil, fmt.Errorf("--discovery-pool: %w", err)
		}
		ranges = append(ranges, r)
	}
	return pool.New(pool.Config{Ranges: ranges, ServerIP: public,
		Reserved: func(ctx context.Context, ip netip.Addr) (bool, error) {
			objs, err := st.ByIndex(ctx, model.KindHardware, store.IndexIP, ip.String())
			return len(objs) > 0, err
		}})
}

// packetService is one UDP socket and the server reading it.
type packetService struct {
	name  string
	conn  net.PacketConn
	serve func(ctx context.Context, conn net.PacketConn) error
}

// newBootServices builds the boot services and opens their sockets, so that
// a busy port or a missing privilege fails at start. events receives every
// service's machine events; trusted are the parsed --trusted-proxies;
// agentKey, when not nil, makes the agent tokens boot scripts carry;
// registry, when not nil (Kubernetes mode), lists the other replicas the
// boot scripts send agents to.
func newBootServices(cfg Config, trusted []netip.Prefix, st store.Store, events machinelog.Sink, agentKey *auth.AgentKey,
	registry *peers.Registry, log *slog.Logger) (_ *bootServices, err error) {
	b := &bootServices{log: log}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	public, err := resolvePublicIP(cfg.PublicIP, cfg.Bind)
	b.public = public
	if err != nil {
		return nil, err
	}
	bind, _ := netip.ParseAddr(cfg.Bind) // checked by Run
	mode := cfg.DHCPMode
	if mode == "" {
		mode = DefaultDHCPMode
	}
	if cfg.DisableDHCP {
		mode = string(dhcp.ModeOff)
	}
	dmode, err := dhcp.ParseMode(mode)
	if err != nil {
		return nil, fmt.Errorf("--dhcp-mode: %w", err)
	}
	if cfg.Discovery && dmode == dhcp.ModeProxy {
		// Unknown PXE clients must get iPXE to reach the discovery boot.
		dmode = dhcp.ModeAutoProxy
	}
	if b.pools, err = discoveryPools(cfg, dmode, public, st); err != nil {
		return nil, err
	}
	httpBase := publicHTTP(cfg, public)

	var agentToken func(*model.Workflow) string
	if agentKey != nil {
		agentToken = func(wf *model.Workflow) string { return agentKey.Token(wf.Key(), wf.UID) }
	}
	var replicas func(context.Context) ([]string, error)
	if registry != nil {
		replicas = registry.AgentURLs
	}
	policy, err := bootpolicy.New(bootpolicy.Config{
		AgentToken:      agentToken,
		Replicas:        replicas,
		Store:           st,
		Mode:            string(dmode),
		PublicHTTP:      httpBase,
		GRPCAuthority:   net.JoinHostPort(public.String(), strconv.Itoa(cfg.GRPCPort)),
		SyslogHost:      syslogHost(cfg, public),
		TLS:             grpcTLS(cfg),
		InsecureTLS:     agentSkipsVerify(cfg),
		ExtraKernelArgs: cfg.KernelArgs,
		Discovery:       cfg.Discovery,
		Logger:          log,
	})
	if err != nil {
		return nil, err
	}
	b.policy = policy

	// Files: the operator's --tftp-dir over the bundled iPXE binaries, for
	// TFTP and /ipxe/binary/ alike; the boot environment at /bootenv/.
	operatorFiles, err := openDirFS(cfg.TFTPDir)
	if err != nil {
		return nil, fmt.Errorf("--tftp-dir: %w", err)
	}
	files := fs.FS(overlayFS{upper: operatorFiles, lower: ipxe.Binaries()})
	bootEnvDir, bootEnv, err := servedDir(cfg.BootEnvDir, cfg.DataDir, "bootenv")
	if err != nil {
		return nil, err
	}
	imagesDir, images, err := servedDir(cfg.ImagesDir, cfg.DataDir, "images")
	if err != nil {
		return nil, err
	}
	assetsDir, assets, err := servedDir(cfg.AssetsDir, cfg.DataDir, "assets")
	if err != nil {
		return nil, err
	}
	b.http = httpboot.New(httpboot.Config{Scripter: policy, Binaries: files, BootEnv: bootEnv, Images: images,
		Assets: assets, BootISO: cfg.BootISO, Logger: log, Events: events})
	if cfg.BootISO != "" {
		if _, err := os.Stat(cfg.BootISO); err != nil {
			return nil, fmt.Errorf("--boot-iso: %w", err)
		}
		b.isoURL = func(hw *model.Hardware) string {
			if macs := hw.MACs(); len(macs) > 0 {
				return httpBase + httpboot.ISOPath(macs[0])
			}
			return "" // no MAC: the engine fails the workflow saying there is no ISO
		}
	}
	b.metadata, err = metadata.New(metadata.Config{Finder: storeFinder{st}, TrustedProxies: trusted, Logger: log,
		Events: events})
	if err != nil {
		return nil, err
	}

	if dmode != dhcp.ModeOff {
		dcfg := dhcp.Config{Mode: dmode, ServerIP: public, HTTPBase: httpBase, Backend: policy, Events: events, Logger: log}
		if b.pools != nil {
			dcfg.Unknown = b.pools
		}
		srv, err := dhcp.New(dcfg)
		if err != nil {
			return nil, err
		}
		port := cfg.DHCPPort
		if port == 0 {
			port = DefaultDHCPPort
		}
		conn, err := dhcp.ListenInterface(bind, port)
		if err != nil {
			return nil, fmt.Errorf("dhcp: %w", err)
		}
		b.packets = append(b.packets, packetService{"dhcp", conn, srv.Serve})
		if dmode == dhcp.ModeProxy || dmode == dhcp.ModeAutoProxy {
			// PXE clients ask the boot server on 4011 after a proxy offer.
			conn, err := dhcp.ListenAddr(public, dhcp.PXEPort)
			if err != nil {
				return nil, fmt.Errorf("dhcp (PXE port %d): %w", dhcp.PXEPort, err)
			}
			b.packets = append(b.packets, packetService{"pxe", conn, srv.Serve})
		}
	}
	if !cfg.DisableTFTP {
		srv, err := tftp.New(tftp.Config{FS: files, Logger: log, Events: events})
		if err != nil {
			return nil, err
		}
		conn, err := listenUDP(cfg.Bind, cfg.TFTPPort, DefaultTFTPPort, "tftp")
		if err != nil {
			return nil, err
		}
		b.packets = append(b.packets, packetService{"tftp", conn, srv.Serve})
	}
	if !cfg.DisableSyslog {
		srv, err := syslog.New(syslog.Config{Events: events, Logger: log})
		if err != nil {
			return nil, err
		}
		conn, err := listenUDP(cfg.Bind, cfg.SyslogPort, DefaultSyslogPort, "syslog")
		if err != nil {
			return nil, err
		}
		b.packets = append(b.packets, packetService{"syslog", conn, srv.Serve})
	}
	log.Info("network boot", "public_ip", public.String(), "dhcp_mode", string(dmode), "http", httpBase,
		"discovery", cfg.Discovery, "discovery_pools", cfg.DiscoveryPools,
		"bootenv_dir", bootEnvDir, "images_dir", imagesDir, "assets_dir", assetsDir, "ipxe", ipxe.Version(), "trusted_proxies", trusted)
	return b, nil
}

// servedDir opens the directory served for one kind of file: dir when the
// operator named one (flag --NAME-dir), else DATA_DIR/NAME, created empty:
// its files are put there later.
func servedDir(dir, dataDir, name string) (string, fs.FS, error) {
	if dir == "" {
		dir = filepath.Join(dataDir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", nil, err
		}
	}
	fsys, err := httpboot.DirFS(dir)
	if err != nil {
		return "", nil, fmt.Errorf("--%s-dir: %w", name, err)
	}
	return dir, fsys, nil
}

// syslogHost is the address the boot environment sends syslog to, or ""
// when the receiver is off.
func syslogHost(cfg Config, public netip.Addr) string {
	if cfg.DisableSyslog {
		return ""
	}
	if cfg.SyslogPort != 0 && cfg.SyslogPort != DefaultSyslogPort {
		return net.JoinHostPort(public.String(), strconv.Itoa(cfg.SyslogPort))
	}
	return public.String()
}

// policyComponent keeps the policy's in-memory views current: Hardware
// for DHCP's packet path, BootProfiles for the script path.
func (b *bootServices) policyComponent() supervise.Component {
	return supervise.Component{Name: "boot policy", Run: b.policy.Run}
}

// components are the packet services, each serving its socket until its
// stop, which closes the socket.
func (b *bootServices) components() []supervise.Component {
	var cs []supervise.Component
	for _, p := range b.packets {
		cs = append(cs, supervise.Component{
			Name: fmt.Sprintf("%s on %s", p.name, p.conn.LocalAddr()),
			Run: func(ctx context.Context) error {
				b.log.Info("listening", "service", p.name, "addr", p.conn.LocalAddr().String(), "proto", "udp")
				defer context.AfterFunc(ctx, func() { p.conn.Close() })()
				if err := p.serve(ctx, p.conn); err != nil && ctx.Err() == nil {
					return err
				}
				return nil
			},
		})
	}
	return cs
}

// close closes the sockets (which also ends Serve loops still reading).
func (b *bootServices) close() error {
	for _, p := range b.packets {
		p.conn.Close()
	}
	return nil
}

// listenUDP opens a UDP socket on bind:port (def if port is 0) and turns the
// common failures into advice.
func listenUDP(bind string, port, def int, name string) (net.PacketConn, error) {
	if port == 0 {
		port = def
	}
	conn, err := net.ListenPacket("udp4", net.JoinHostPort(bind, strconv.Itoa(port)))
	if err == nil {
		return conn, nil
	}
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("%s: %w: is another %s server running? choose another port with --%s-port, or switch it off with --no-%s", name, err, name, name, name)
	case errors.Is(err, syscall.EACCES):
		return nil, fmt.Errorf("%s: %w: ports below 1024 need root or CAP_NET_BIND_SERVICE", name, err)
	}
	return nil, fmt.Errorf("%s: %w", name, err)
}

// publicHTTP is the base URL machines reach this server's HTTP port at, on
// the public address: the boot scripts' anvil.server=, and in Kubernetes
// mode the agent URL this replica publishes to the others, which list it
// in theirs.
func publicHTTP(cfg Config, public netip.Addr) string {
	return "http://" + net.JoinHostPort(public.String(), strconv.Itoa(cfg.HTTPPort))
}
