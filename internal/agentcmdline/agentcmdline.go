// Package agentcmdline owns the kernel command line that a machine's boot
// script hands the agent: the names of its arguments, the order the boot
// policy writes them in (Params.Build) and how the agent reads them back
// (Parse). Every argument name is written here and nowhere else.
//
// The first group of names is Hook's (Tinkerbell's boot environment), so
// that a script written for Hook finds them in Anvil's boot environment and
// Hook booted by Anvil finds its server; the anvil.* names are Anvil's own.
//
// It is a leaf, the standard library only: the boot policy (in the server)
// and the agent (in the boot environment) both import it, and neither
// should link the other's dependencies through it.
package agentcmdline

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The argument names.
const (
	ArgGRPCAuthority = "grpc_authority"          // Hook's: host:port of the gRPC port
	ArgWorkerID      = "worker_id"               // Hook's: the agent ID
	ArgHWAddr        = "hw_addr"                 // Hook's: the MAC the machine booted from
	ArgTLS           = "tinkerbell_tls"          // Hook's: TLS to grpc_authority
	ArgInsecureTLS   = "tinkerbell_insecure_tls" // Hook's: TLS without verifying the certificate
	ArgSyslogHost    = "syslog_host"             // Hook's: where to send syslog
	ArgVLANID        = "vlan_id"                 // Hook's: the provisioning network's VLAN
	ArgFacility      = "facility"                // Hook's: informational
	ArgServer        = "anvil.server"            // the HTTP base URLs, e.g. http://10.0.0.1:7080,http://10.0.0.2:7080
	ArgToken         = "anvil.token"             // the workflow's agent token
	ArgShell         = "anvil.shell"             // "1": a console shell when a workflow fails
	ArgDebug         = "anvil.debug"             // "1": verbose agent lines on the console
	ArgImageCache    = "anvil.image_cache"       // the image cache's size limit ("2G")
	ArgDiscovery     = "anvil.discovery"         // "1": discovery boot: report the inventory, wait for work
)

// MaxVLANID is the highest VLAN ID (IEEE 802.1Q reserves 4095).
const MaxVLANID = 4094

// ServerSeparator separates the base URLs of anvil.server= when it names
// several replicas of the server. A comma needs no quoting on the kernel
// command line or in an iPXE script, and a base URL has no use for one.
const ServerSeparator = ","

// Params are the agent's arguments on the kernel command line, as written:
// Parse returns them, Build writes them. The zero value of a field is the
// argument left out (tinkerbell_tls and tinkerbell_insecure_tls excepted:
// Build always writes them).
type Params struct {
	// GRPCAuthority is host:port of the gRPC port (grpc_authority=), the
	// agent's server when Server is "".
	GRPCAuthority string
	// WorkerID is the agent ID (worker_id=): the Hardware's spec.agentID,
	// else the MAC the machine booted from.
	WorkerID string
	// HWAddr is the MAC the machine booted from (hw_addr=): Hook brings up
	// that interface. Anvil's agent does not need it.
	HWAddr string
	// TLS says the gRPC port speaks TLS (tinkerbell_tls=).
	TLS bool
	// InsecureTLS skips verifying the gRPC port's certificate
	// (tinkerbell_insecure_tls=).
	InsecureTLS bool
	// SyslogHost is host or host:port (syslog_host=).
	SyslogHost string
	// Server is the base URL of the HTTP port (anvil.server=) as written,
	// or several separated by ServerSeparator (the replicas of a server in
	// Kubernetes mode, in the order the agent tries them; JoinServers
	// writes the list); when given, the agent calls it rather than
	// GRPCAuthority. Endpoints gives the URLs to call.
	Server string
	// VLANID, when not 0, is the VLAN the provisioning network is on
	// (vlan_id=), from 1 to MaxVLANID.
	VLANID int
	// Facility is informational (facility=).
	Facility string
	// Shell asks for a shell on the console when a workflow fails
	// (anvil.shell=1).
	Shell bool
	// Debug prints every agent line on the console (anvil.debug=1).
	Debug bool
	// ImageCache is the size limit of the agent's cache of container
	// images as written (anvil.image_cache=2G). The agent reads the size
	// (oci.ParseSize); this package, a leaf, passes it through.
	ImageCache string
	// Token is the workflow's agent token (anvil.token=).
	Token string
	// Discovery says the machine has no Hardware yet (anvil.discovery=1):
	// the agent reports its inventory with Discover and waits there for a
	// workflow, whose token the answer carries. It has no Token.
	Discovery bool
}

// ArgError is an argument whose value Parse cannot read or Build cannot
// write. Name is the argument's name, Value its value.
type ArgError struct {
	Name, Value string
	Err         error
}

func (e *ArgError) Error() string { return fmt.Sprintf("%s=%q: %v", e.Name, e.Value, e.Err) }

func (e *ArgError) Unwrap() error { return e.Err }

// ErrNoServer is returned by Parse and Build when neither anvil.server= nor
// grpc_authority= names the server.
var ErrNoServer = fmt.Errorf("the kernel command line names no server: want %s=URL or %s=HOST:PORT", ArgServer, ArgGRPCAuthority)

// Parse reads the agent's Params from a kernel command line (the contents
// of /proc/cmdline): whitespace-separated key=value arguments, a key given
// alone meaning an empty value. Other arguments (the kernel's own,
// console=, …) are ignored; of a key given twice the last wins, so that an
// operator's argument written after the boot policy's overrides it.
//
// It is an error (an *ArgError naming the argument) when a value is
// malformed: a boolean other than true or false (1, t, 0, f, … as
// strconv.ParseBool), a VLAN ID outside 1 to MaxVLANID, an anvil.server=
// that is not an http:// or https:// URL (or, a list, one of whose URLs is
// not: the error names it); grpc_authority= must be
// host:port when the agent is to use it (no anvil.server=). It is
// ErrNoServer when neither names a server. anvil.shell, anvil.debug and anvil.discovery are
// set by "", "1" or "true" and cleared by anything else.
func Parse(cmdline string) (Params, error) {
	var p Params
	for _, field := range strings.Fields(cmdline) {
		key, val, _ := strings.Cut(field, "=")
		var err error
		switch key {
		case ArgGRPCAuthority:
			p.GRPCAuthority = val
		case ArgWorkerID:
			p.WorkerID = val
		case ArgHWAddr:
			p.HWAddr = val
		case ArgTLS:
			p.TLS, err = parseBool(val)
		case ArgInsecureTLS:
			p.InsecureTLS, err = parseBool(val)
		case ArgSyslogHost:
			p.SyslogHost = val
		case ArgServer:
			p.Server = val
		case ArgVLANID:
			p.VLANID, err = ParseVLANID(val)
		case ArgFacility:
			p.Facility = val
		case ArgShell:
			p.Shell = isSet(val)
		case ArgDebug:
			p.Debug = isSet(val)
		case ArgDiscovery:
			p.Discovery = isSet(val)
		case ArgImageCache:
			p.ImageCache = val
		case ArgToken:
			p.Token = val
		}
		if err != nil {
			return Params{}, &ArgError{Name: key, Value: val, Err: err}
		}
	}
	if err := p.checkServer(); err != nil {
		return Params{}, err
	}
	return p, nil
}

// ParseVLANID reads a vlan_id= value: "" is none (0), else a whole number
// from 1 to MaxVLANID.
func ParseVLANID(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || !validVLAN(n) {
		return 0, errBadVLAN
	}
	return n, nil
}

var errBadVLAN = fmt.Errorf("want a VLAN ID from 1 to %d", MaxVLANID)

func validVLAN(n int) bool { return n >= 1 && n <= MaxVLANID }

// parseBool reads a boolean argument; given alone (no value), it is true.
func parseBool(val string) (bool, error) {
	if val == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(val)
	if err != nil {
		return false, errors.New("want true or false")
	}
	return b, nil
}

// isSet reads anvil.shell and anvil.debug, which are on when given alone.
func isSet(val string) bool { return val == "" || val == "1" || val == "true" }

// checkServer checks the argument the agent will call: anvil.server= when
// given, else grpc_authority=.
func (p Params) checkServer() error {
	switch {
	case p.Server != "":
		if _, err := serverURLs(p.Server); err != nil {
			return &ArgError{Name: ArgServer, Value: p.Server, Err: err}
		}
	case p.GRPCAuthority != "":
		return p.checkAuthority()
	default:
		return ErrNoServer
	}
	return nil
}

// checkAuthority checks grpc_authority=: a host and a port number, and
// nothing that would make "http://" + it more than an authority (a path,
// a query, user info: FuzzParse found ":/").
func (p Params) checkAuthority() error {
	host, port, err := net.SplitHostPort(p.GRPCAuthority)
	if err == nil {
		if n, perr := strconv.ParseUint(port, 10, 16); perr != nil || n == 0 {
			err = errors.New("bad port")
		}
	}
	if err != nil || host == "" || strings.ContainsAny(host, "/?#@\\") {
		return &ArgError{Name: ArgGRPCAuthority, Value: p.GRPCAuthority, Err: errors.New("want host:port")}
	}
	return nil
}

// serverURLs checks an anvil.server= value, one base URL or several
// separated by ServerSeparator, and returns the URLs the agent calls, in
// order, each once (replicas that publish one address, a VIP, would
// otherwise be tried as many times). An error names the URL at fault.
func serverURLs(s string) ([]string, error) {
	list := strings.Split(s, ServerSeparator)
	var out []string
	for i, one := range list {
		u, err := serverURL(one)
		if err != nil {
			if len(list) == 1 {
				return nil, err
			}
			return nil, fmt.Errorf("URL %d of %d, %q: %w", i+1, len(list), one, err)
		}
		if !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out, nil
}

// JoinServers writes base URLs as one anvil.server= value, the first to be
// tried first. Params.Build checks each.
func JoinServers(urls []string) string { return strings.Join(urls, ServerSeparator) }

// serverURL checks one base URL of anvil.server= and returns the URL the
// agent calls: the scheme as url.Parse reads it (lower case: "HTTP://" is
// http), then the rest as given, less trailing slashes, since the agent
// appends paths.
func serverURL(s string) (string, error) {
	u, err := url.Parse(s)
	if s == "" {
		return "", errors.New("empty: want an http:// or https:// URL")
	}
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", errors.New("want an http:// or https:// URL")
	}
	_, rest, _ := strings.Cut(s, ":")
	return strings.TrimRight(u.Scheme+":"+rest, "/"), nil
}

// Endpoints returns the base URLs the agent calls, in the order it tries
// them, and whether it speaks gRPC there: anvil.server= when given
// (Connect over HTTP/1.1; one URL or several, each once), else
// grpc_authority= (one address: gRPC, over TLS when tinkerbell_tls=true,
// else h2c). p must be valid (Parse returned it, or Build accepts it);
// otherwise bases is nil.
func (p Params) Endpoints() (bases []string, grpc bool) {
	if p.checkServer() != nil {
		return nil, false
	}
	if p.Server != "" {
		u, _ := serverURLs(p.Server)
		return u, false
	}
	scheme := "http"
	if p.TLS {
		scheme = "https"
	}
	return []string{scheme + "://" + p.GRPCAuthority}, true
}

// Build returns p as kernel arguments, in the order the boot script writes
// them, with the other arguments in their places:
//
//	grpc_authority= worker_id= hw_addr= tinkerbell_tls= tinkerbell_insecure_tls= syslog_host= anvil.server=
//	console…
//	vlan_id= facility= anvil.shell= anvil.debug= anvil.discovery= anvil.image_cache=
//	operator…
//	anvil.token=
//
// console are the kernel's console= arguments; operator are the operator's
// own (a Hardware's netboot.osie.kernelParams, anvil serve --kernel-args).
// As the last of a key wins, the operator's arguments override the ones
// before them, and nothing overrides the token. Build does not look at
// console and operator.
//
// Parse reads back what Build writes: Parse(strings.Join(args, " ")) is p.
// For that, Build refuses (an *ArgError naming the argument) a value that
// holds whitespace, a control character or a double quote (the kernel's
// quoting), or is not UTF-8; the values Parse would refuse; and Params
// that name no server (ErrNoServer). grpc_authority=, when given, must be
// host:port even beside anvil.server=.
func (p Params) Build(console, operator []string) ([]string, error) {
	if err := p.checkServer(); err != nil {
		return nil, err
	}
	if p.GRPCAuthority != "" {
		if err := p.checkAuthority(); err != nil {
			return nil, err
		}
	}
	var (
		args []string
		err  error
	)
	// add writes name=val, or nothing when val is "".
	add := func(name, val string) {
		if val == "" || err != nil {
			return
		}
		if e := checkValue(val); e != nil {
			err = &ArgError{Name: name, Value: val, Err: e}
			return
		}
		args = append(args, name+"="+val)
	}
	flag := func(name string, on bool) {
		if on {
			add(name, "1")
		}
	}
	add(ArgGRPCAuthority, p.GRPCAuthority)
	add(ArgWorkerID, p.WorkerID)
	add(ArgHWAddr, p.HWAddr)
	// Always written, false too, so that no boot environment falls back to
	// a default of its own.
	add(ArgTLS, strconv.FormatBool(p.TLS))
	add(ArgInsecureTLS, strconv.FormatBool(p.InsecureTLS))
	add(ArgSyslogHost, p.SyslogHost)
	add(ArgServer, p.Server)
	args = append(args, console...)
	if p.VLANID != 0 {
		if !validVLAN(p.VLANID) {
			return nil, &ArgError{Name: ArgVLANID, Value: strconv.Itoa(p.VLANID), Err: errBadVLAN}
		}
		add(ArgVLANID, strconv.Itoa(p.VLANID))
	}
	add(ArgFacility, p.Facility)
	flag(ArgShell, p.Shell)
	flag(ArgDebug, p.Debug)
	flag(ArgDiscovery, p.Discovery)
	add(ArgImageCache, p.ImageCache)
	args = append(args, operator...)
	add(ArgToken, p.Token)
	if err != nil {
		return nil, err
	}
	return args, nil
}

// checkValue says why s cannot be an argument's value that Parse reads
// back as written, or returns nil.
func checkValue(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	for i, r := range s {
		switch {
		case r == '\n' || r == '\r' || r == '\v' || r == '\f':
			return fmt.Errorf("a line break at byte %d", i)
		case unicode.IsSpace(r):
			return fmt.Errorf("whitespace at byte %d (arguments are separated by it)", i)
		case unicode.IsControl(r):
			return fmt.Errorf("a control character at byte %d", i)
		case r == '"':
			return fmt.Errorf("a double quote at byte %d (the kernel reads it as quoting)", i)
		}
	}
	return nil
}
