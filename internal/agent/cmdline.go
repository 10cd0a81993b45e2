package agent

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/anvilproj/anvil/internal/oci"
)

// Kernel command line keys the agent reads. The first group is Hook's (so a
// script written for Tinkerbell boots Anvil's boot environment unchanged);
// the anvil.* keys are ours.
const (
	argGRPCAuthority = "grpc_authority"
	argWorkerID      = "worker_id"
	argTLS           = "tinkerbell_tls"
	argInsecureTLS   = "tinkerbell_insecure_tls"
	argSyslogHost    = "syslog_host"
	argVLANID        = "vlan_id"
	argFacility      = "facility"
	argServer        = "anvil.server"      // the HTTP base URL, e.g. http://10.0.0.1:7080
	argToken         = "anvil.token"       // the workflow's agent token
	argShell         = "anvil.shell"       // "1": a console shell when a workflow fails
	argDebug         = "anvil.debug"       // "1": verbose agent lines on the console
	argImageCache    = "anvil.image_cache" // the image cache's size limit ("2G")
)

// Where the container path keeps its state by default: /run is a tmpfs
// (in the boot environment, as everything is RAM), so the cache is memory
// and nothing survives a reboot.
const (
	DefaultImageCacheDir    = "/run/anvil/images"
	DefaultContainerScratch = "/run/anvil/containers"
)

// BootParams is what the boot script told the agent on the kernel command
// line.
type BootParams struct {
	// Server is the base URL of the Anvil API the agent calls, built from
	// anvil.server= when present (Connect over HTTP/1.1), else from
	// grpc_authority= (gRPC over h2c, or TLS with tinkerbell_tls=true).
	Server string
	// GRPC says Server is a gRPC endpoint (grpc_authority=), not the HTTP
	// port.
	GRPC bool
	// InsecureTLS skips verifying the server's certificate
	// (tinkerbell_insecure_tls=true).
	InsecureTLS bool
	// WorkerID is the agent ID (worker_id=), usually the MAC address the
	// machine booted from.
	WorkerID string
	// SyslogHost is host or host:port (syslog_host=); "" when not given.
	SyslogHost string
	// VLANID, when not 0, is the VLAN the provisioning network is on
	// (vlan_id=): the agent runs DHCP on a VLAN interface over each link.
	VLANID int
	// Facility is informational (facility=).
	Facility string
	// Shell starts a shell on the console when a workflow fails
	// (anvil.shell=1), for an operator at the console to look around.
	Shell bool
	// Debug prints every agent line on the console (anvil.debug=1).
	Debug bool
	// Token is the workflow's agent token (anvil.token=), sent on every
	// call; "" when the server does not check agents.
	Token string
	// ImageCache is the size limit of the cache of container images in
	// bytes (anvil.image_cache=2G); 0: the default (a quarter of the RAM).
	ImageCache int64
}

// ParseCmdline reads BootParams from a kernel command line. Unknown
// arguments are ignored (the kernel's own, console=, …). It is an error when
// neither anvil.server= nor grpc_authority= names a server, or a value is
// malformed; the message names the argument.
func ParseCmdline(cmdline string) (BootParams, error) {
	var (
		p                 BootParams
		authority, server string
		tls               bool
	)
	for _, field := range strings.Fields(cmdline) {
		key, val, _ := strings.Cut(field, "=")
		switch key {
		case argGRPCAuthority:
			authority = val
		case argWorkerID:
			p.WorkerID = val
		case argTLS:
			b, err := parseBoolArg(key, val)
			if err != nil {
				return BootParams{}, err
			}
			tls = b
		case argInsecureTLS:
			b, err := parseBoolArg(key, val)
			if err != nil {
				return BootParams{}, err
			}
			p.InsecureTLS = b
		case argSyslogHost:
			p.SyslogHost = val
		case argVLANID:
			if val == "" {
				continue
			}
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || n > 4094 {
				return BootParams{}, fmt.Errorf("%s=%q: want a VLAN ID from 1 to 4094", key, val)
			}
			p.VLANID = n
		case argFacility:
			p.Facility = val
		case argServer:
			server = val
		case argToken:
			p.Token = val
		case argShell:
			p.Shell = val == "" || val == "1" || val == "true"
		case argDebug:
			p.Debug = val == "" || val == "1" || val == "true"
		case argImageCache:
			n, err := oci.ParseSize(val)
			if err != nil {
				return BootParams{}, fmt.Errorf("%s=%q: %w", key, val, err)
			}
			p.ImageCache = n
		}
	}
	switch {
	case server != "":
		u, err := url.Parse(server)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return BootParams{}, fmt.Errorf("%s=%q: want an http:// or https:// URL", argServer, server)
		}
		// The scheme as url.Parse read it (lower case: "HTTP://" is
		// http), then the rest as given.
		_, rest, _ := strings.Cut(server, ":")
		p.Server = strings.TrimRight(u.Scheme+":"+rest, "/")
	case authority != "":
		if _, _, err := net.SplitHostPort(authority); err != nil {
			return BootParams{}, fmt.Errorf("%s=%q: want host:port", argGRPCAuthority, authority)
		}
		scheme := "http"
		if tls {
			scheme = "https"
		}
		p.Server, p.GRPC = scheme+"://"+authority, true
	default:
		return BootParams{}, fmt.Errorf("the kernel command line names no server: want %s=URL or %s=HOST:PORT", argServer, argGRPCAuthority)
	}
	return p, nil
}

func parseBoolArg(key, val string) (bool, error) {
	if val == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(val)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false", key, val)
	}
	return b, nil
}
