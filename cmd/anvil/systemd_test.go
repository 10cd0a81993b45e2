package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/config"
	"github.com/anvilproj/anvil/internal/testtool"
)

// TestServeUnderSystemd runs the built `anvil serve` as systemd runs it
// (Type=notify, WatchdogSec, ExecReload=kill -HUP, standard error to the
// journal) against a notify socket of the test's: READY=1 once its ports
// answer; watchdog pings; on SIGHUP, RELOADING=1 and READY=1 around a
// reload that serves the new certificate, applies the log level and names
// the setting that needs a restart; a config file that does not parse
// keeps the server serving, and its line is logged; STOPPING=1 at
// SIGTERM; every log line with journald's priority prefix.
func TestServeUnderSystemd(t *testing.T) {
	dir := t.TempDir()
	bin := buildAnvil(t, dir)
	httpPort, httpsPort := freePort(t), freePort(t)
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeCertPair(t, certFile, keyFile, "a.example.org")
	file := filepath.Join(dir, "anvil.yaml")
	site := func(extra string) string {
		return `data-dir: ` + filepath.Join(dir, "data") + `
bind: 127.0.0.1
http-port: ` + strconv.Itoa(httpPort) + `
https-port: ` + strconv.Itoa(httpsPort) + `
tls-cert: ` + certFile + `
tls-key: ` + keyFile + `
no-grpc: true
no-dhcp: true
no-tftp: true
no-syslog: true
no-metadata: true
no-console: true
no-bmc: true
` + extra
	}
	writeConfig := func(text string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig(site(""))

	sock := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	next := func() string {
		t.Helper()
		buf := make([]byte, 4096)
		conn.SetReadDeadline(time.Now().Add(2 * time.Minute)) // a bound on failure, not a measurement
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("notify socket: %v", err)
		}
		return string(buf[:n])
	}
	// watchdog says whether msg is the watchdog's: a ping, or a check
	// that did not pass in time on a machine loaded by other tests (the
	// watchdog's own tests show what it sends when).
	watchdog := func(msg string) bool {
		return strings.HasPrefix(msg, "WATCHDOG=1\n") || strings.HasPrefix(msg, "STATUS=not alive: ")
	}
	// until reads datagrams until one starting with prefix, skipping the
	// watchdog's and, if skipStatus, status updates.
	until := func(prefix string, skipStatus bool) string {
		t.Helper()
		for {
			msg := next()
			switch {
			case strings.HasPrefix(msg, prefix):
				return msg
			case watchdog(msg), skipStatus && strings.HasPrefix(msg, "STATUS="):
				continue
			}
			t.Fatalf("notify: %q; want %s", msg, prefix)
		}
	}

	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	fi, err := stderr.Stat()
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	logs := func() string {
		b, err := os.ReadFile(stderr.Name())
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	cmd := exec.Command(bin, "serve", "--config", file)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, config.EnvPrefix) || strings.HasPrefix(kv, "WATCHDOG_")
	})
	cmd.Env = append(cmd.Env, "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=400000",
		fmt.Sprintf("JOURNAL_STREAM=%d:%d", st.Dev, st.Ino))
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("anvil's log:\n%s", logs())
		}
	}()

	base := "http://127.0.0.1:" + strconv.Itoa(httpPort)
	https := "127.0.0.1:" + strconv.Itoa(httpsPort)
	ready := until("READY=1\n", true)
	if !strings.Contains(ready, "STATUS=serving: http 127.0.0.1:"+strconv.Itoa(httpPort)) {
		t.Errorf("READY=1 with %q; want the listeners in its status", ready)
	}
	// No retry: READY=1 means the ports answer now.
	if code := status(t, base+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz right after READY=1: %d", code)
	}
	if cn := servedCN(t, https); cn != "a.example.org" {
		t.Errorf("HTTPS serves %q", cn)
	}
	for range 2 { // pings, nothing else
		until("WATCHDOG=1\n", false)
	}

	// A reload: a new certificate, a changed log level (applied) and a
	// changed port (at the next start).
	writeCertPair(t, certFile, keyFile, "b.example.org")
	writeConfig(strings.Replace(site("log-level: debug\n"), "http-port: "+strconv.Itoa(httpPort), "http-port: "+strconv.Itoa(httpPort+1), 1))
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	reloading := until("RELOADING=1\n", false)
	if !regexp.MustCompile(`\nMONOTONIC_USEC=\d+\n`).MatchString(reloading) {
		t.Errorf("RELOADING=1 without MONOTONIC_USEC: %q", reloading)
	}
	if msg := until("READY=1\n", false); !strings.Contains(msg, "STATUS=serving; reloaded at ") {
		t.Errorf("after the reload: %q", msg)
	}
	if cn := servedCN(t, https); cn != "b.example.org" {
		t.Errorf("after SIGHUP the HTTPS port serves %q; want b.example.org", cn)
	}
	for _, want := range []string{
		`<6>level=INFO msg="setting changed, applied" key=log-level value=debug source=file`,
		`<4>level=WARN msg="setting changed, takes effect at restart" key=http-port value=` + strconv.Itoa(httpPort+1) + ` source=file`,
		`<6>level=INFO msg="TLS certificate reloaded" cert=` + certFile,
	} {
		if !strings.Contains(logs(), want) {
			t.Errorf("the log lacks %q", want)
		}
	}
	// no-console turns console-port to 0 and boot-iso gets Debian's ISO
	// after the file is read: no change of the file's, nothing to report.
	if n := strings.Count(logs(), "takes effect at restart"); n != 1 {
		t.Errorf("%d settings reported changed; want http-port alone", n)
	}
	if code := status(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz on the running port after the reload: %d", code)
	}

	// A file that does not parse: logged with its line, nothing else
	// changes, the server serves on.
	writeConfig(site("log-level: debug\nhttp-prot: 1\n"))
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	until("RELOADING=1\n", false)
	if msg := until("READY=1\n", false); !strings.Contains(msg, "failed: config: "+file+`:15: unknown key "http-prot"`) {
		t.Errorf("after a bad reload: %q; want the failure and its line in the status", msg)
	}
	if !strings.Contains(logs(), `<3>level=ERROR msg="config not reloaded; the running configuration stays"`) {
		t.Error("the bad file's reload was not logged as an error")
	}
	if code := status(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz after a bad reload: %d", code)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if msg := until("STOPPING=1\n", false); msg != "STOPPING=1\nSTATUS=shutting down\n" {
		t.Errorf("at SIGTERM: %q", msg)
	}
	if err := testtool.Receive(t, exited, "anvil to exit after SIGTERM"); err != nil {
		t.Errorf("anvil serve after SIGTERM: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(logs()), "\n") {
		if !regexp.MustCompile(`^<[3467]>level=`).MatchString(line) {
			t.Errorf("a line without journald's priority prefix, or with a time: %q", line)
		}
	}
}

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// servedCN makes a new TLS handshake with addr and returns the common name
// of the certificate served.
func servedCN(t *testing.T, addr string) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test looks at which certificate is served
	if err != nil {
		t.Fatalf("handshake with %s: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// writeCertPair writes a self-signed certificate for name and its key,
// each replaced whole (renamed over), as a deployment tool would.
func writeCertPair(t *testing.T, certFile, keyFile, name string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{name}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for f, b := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(f+".new", pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(f+".new", f); err != nil {
			t.Fatal(err)
		}
	}
}
