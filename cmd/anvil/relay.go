package main

import (
	"log/slog"
	"net/netip"

	"github.com/spf13/cobra"

	"github.com/anvilproj/anvil/internal/dhcp/relay"
)

func newRelayCmd() *cobra.Command {
	var (
		iface   string
		servers []string
		giaddr  string
	)
	cmd := &cobra.Command{
		Use:   "relay --interface IFACE --server IP[:port] [--server ...] [--giaddr IP]",
		Short: "Relay DHCP from a network segment to Anvil (a DHCP relay agent)",
		Long: `relay is a DHCP relay agent (RFC 1542) for segments that Anvil is not on: it
listens for DHCP broadcasts on --interface (port 67), forwards each request to
every --server with its own address on that interface as giaddr, and hands the
servers' replies back to the clients. It needs root (port 67, binding to an
interface).

  anvil relay --interface eth1 --server 10.0.0.1

The server answers relayed requests with the addresses of the relay's segment
(the Hardware's), and sends its replies to giaddr:67.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := relay.Config{Interface: iface, Logger: slog.Default()}
			for _, s := range servers {
				ap, err := relay.ParseServer(s)
				if err != nil {
					return err
				}
				cfg.Servers = append(cfg.Servers, ap)
			}
			if giaddr != "" {
				ip, err := netip.ParseAddr(giaddr)
				if err != nil {
					return err
				}
				cfg.GIAddr = ip
			}
			return relay.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&iface, "interface", "", "interface of the client segment (required)")
	f.StringArrayVar(&servers, "server", nil, "DHCP server to relay to, IP or IP:port (required; repeat for several)")
	f.StringVar(&giaddr, "giaddr", "", "address to put in giaddr (default: the interface's first IPv4 address)")
	_ = cmd.MarkFlagRequired("interface")
	_ = cmd.MarkFlagRequired("server")
	return cmd
}
