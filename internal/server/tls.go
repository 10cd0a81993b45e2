package server

import (
	"context"
	"crypto/tls"
	"errors"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/anvilproj/anvil/internal/tlsconf"
)

// tlsDir is where Run keeps the generated CA and certificate, inside
// Config.DataDir.
const tlsDir = "tls"

// TLSDir returns the directory of the generated CA and server certificate
// for a data directory: what `anvil tls ca` reads.
func TLSDir(dataDir string) string { return filepath.Join(dataDir, tlsDir) }

// newTLSConfig returns the configuration of the HTTPS listener and of the
// gRPC port with TLS, or nil when cfg.TLS is off. The certificate comes
// from cfg.TLSCertFile and cfg.TLSKeyFile, else from the CA in
// DATA_DIR/tls (generated on the first start); either way one line says
// where, and for a generated CA its SHA-256 fingerprint, for clients to
// check what they trust.
func newTLSConfig(cfg Config, log *slog.Logger) (*tls.Config, error) {
	if err := checkTLSFlags(cfg); err != nil || !cfg.TLS {
		return nil, err
	}
	grpcMode := "tls"
	if !grpcTLS(cfg) {
		grpcMode = "h2c"
	}
	if cfg.TLSCertFile != "" {
		src, err := tlsconf.NewFileSource(tlsconf.FileConfig{CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, Logger: log})
		if err != nil {
			return nil, err
		}
		cfg.Reloader.setTLS(src)
		log.Info("TLS on", "certificate", cfg.TLSCertFile, "reload", "when the files change, and on SIGHUP", "grpc", grpcMode)
		return tlsconf.ServerConfig(src.GetCertificate), nil
	}
	src, err := tlsconf.NewGeneratedSource(tlsconf.GeneratedConfig{Dir: TLSDir(cfg.DataDir), Hosts: tlsHosts(cfg), Logger: log})
	if err != nil {
		return nil, err
	}
	log.Info("TLS on", "certificate", "generated", "ca", src.CAFile(), "ca_sha256", tlsconf.Fingerprint(src.CA().Raw),
		"export", "anvil tls ca --data-dir "+cfg.DataDir, "grpc", grpcMode)
	return tlsconf.ServerConfig(src.GetCertificate), nil
}

// checkTLSFlags refuses TLS settings that do not go together; settle
// calls it, so that they fail before anything opens.
func checkTLSFlags(cfg Config) error {
	files := cfg.TLSCertFile != "" || cfg.TLSKeyFile != ""
	switch {
	case !cfg.TLS && (files || len(cfg.TLSSANs) > 0):
		return errors.New("--tls-cert, --tls-key and --tls-san need TLS on: drop --no-tls")
	case !cfg.TLS:
		return nil
	case files && (cfg.TLSCertFile == "" || cfg.TLSKeyFile == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case files && len(cfg.TLSSANs) > 0:
		return errors.New("--tls-san is for the generated certificate; with --tls-cert the names are the certificate's")
	}
	return nil
}

// tlsHosts are the addresses and names the generated certificate covers
// (tlsconf adds localhost, the loopback addresses and the hostname): the
// public IP, the bind address, every other address of the machine but
// link-local ones, and the operator's --tls-san.
func tlsHosts(cfg Config) []string {
	var hosts []string
	if public, err := resolvePublicIP(cfg.PublicIP, cfg.Bind); err == nil {
		hosts = append(hosts, public.String())
	} // else the boot services report it
	hosts = append(hosts, cfg.Bind) // tlsconf ignores 0.0.0.0
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(n.IP)
			if !ok {
				continue
			}
			if ip = ip.Unmap(); ip.IsLoopback() || ip.IsLinkLocalUnicast() {
				continue
			}
			hosts = append(hosts, ip.String())
		}
	}
	return append(hosts, cfg.TLSSANs...)
}

// grpcTLS reports whether the gRPC port speaks TLS.
func grpcTLS(cfg Config) bool { return cfg.TLS && !cfg.GRPCPlaintext }

// agentSkipsVerify reports whether the boot environment is told not to
// verify the gRPC port's certificate (tinkerbell_insecure_tls=true): it
// cannot know a CA generated here. A certificate from files is verified;
// the operator chose one that Hook's CA bundle trusts. Anvil's own agent
// calls the plain HTTP port (anvil.server=) and reads neither.
func agentSkipsVerify(cfg Config) bool { return grpcTLS(cfg) && cfg.TLSCertFile == "" }

// newTLSServer returns a server for h over TLS: HTTP/1.1 and HTTP/2 with
// http1, HTTP/2 only (gRPC) without. Its own errors go to log.
func newTLSServer(h http.Handler, conf *tls.Config, http1 bool, log *slog.Logger) *http.Server {
	var p http.Protocols
	p.SetHTTP1(http1)
	p.SetHTTP2(true)
	return &http.Server{
		Handler:           h,
		Protocols:         &p,
		TLSConfig:         conf.Clone(), // ServeTLS's HTTP/2 setup writes to it
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          stdlog.New(serverErrors{log}, "", 0),
	}
}

// serverErrors writes an http.Server's error lines to a slog.Logger: a
// failed TLS handshake at debug level (scanners and clients that do not
// trust the CA make them all day, and the client says why), anything else
// (a handler's panic) as a warning.
type serverErrors struct{ log *slog.Logger }

func (w serverErrors) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	level := slog.LevelWarn
	if strings.Contains(msg, "TLS handshake error") {
		level = slog.LevelDebug
	}
	w.log.Log(context.Background(), level, msg)
	return len(p), nil
}

// serve runs srv on ln, with TLS when srv has a TLS configuration.
func serve(srv *http.Server, ln net.Listener) error {
	if srv.TLSConfig != nil {
		return srv.ServeTLS(ln, "", "")
	}
	return srv.Serve(ln)
}
