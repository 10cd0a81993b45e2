package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/testtool"
)

// TestIngress puts Debian's nginx in front of anvil as an orchestrator's
// ingress would: nginx terminates TLS, passes gRPC to anvil's HTTP port
// over h2c, and serves files under /tink-stack/ by rewriting the prefix
// away. A client in its own namespace (10.88.1.2) provisions a device over
// gRPC and downloads a boot file through it; anvil trusts nginx
// (127.0.0.1) as a proxy and must see the client's address, not nginx's.
func TestIngress(t *testing.T) {
	requireLab(t)
	testtool.RequireBinary(t, "nginx", "nginx-light")
	srvNS, cliNS := newNetns(t, "ingsrv"), newNetns(t, "ingcli")
	run(t, "ip", "-n", srvNS.name, "link", "add", "ingv0", "type", "veth", "peer", "name", "ingv1", "netns", cliNS.name)
	srvNS.ip("addr", "add", "10.88.1.1/24", "dev", "ingv0")
	srvNS.ip("link", "set", "ingv0", "up")
	cliNS.ip("addr", "add", "10.88.1.2/24", "dev", "ingv1")
	cliNS.ip("link", "set", "ingv1", "up")

	a := startAnvil(t, srvNS, "127.0.0.1", "--no-dhcp", "--no-tftp", "--no-syslog", "--metadata-port", "0",
		"--trusted-proxies", "127.0.0.1")
	const mac = "52:54:00:88:01:02"
	a.apply(t, fmt.Sprintf(`apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: ingress-node}
spec:
  interfaces:
  - dhcp: {mac: %q, ip: {address: 10.88.1.2, netmask: 255.255.255.0}}
    netboot: {allowPXE: true, allowWorkflow: true}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: ingress-install}
spec:
  data: |
    version: "0.1"
    name: ingress-install
    tasks:
    - name: os
      worker: "{{.device_1}}"
      actions:
      - {name: hello, image: cexec, timeout: 60, environment: {CMD_LINE: "true"}}
`, mac))

	dir := t.TempDir()
	caPool := writeSelfSigned(t, dir, "10.88.1.1")
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(strings.ReplaceAll(`user root;
error_log DIR/error.log info;
pid DIR/nginx.pid;
events {}
http {
  access_log DIR/access.log;
  client_body_temp_path DIR/body;
  proxy_temp_path DIR/proxy;
  server {
    listen 10.88.1.1:8443 ssl http2;
    ssl_certificate DIR/cert.pem;
    ssl_certificate_key DIR/key.pem;
    # gRPC: to anvil's HTTP port, which speaks h2c.
    location /anvil.v1. {
      grpc_pass grpc://127.0.0.1:7080;
      grpc_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    }
    # Files: the prefix is rewritten away.
    location /tink-stack/ {
      rewrite ^/tink-stack/(.*)$ /$1 break;
      proxy_pass http://127.0.0.1:7080;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    }
  }
}
`, "DIR", dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	ngx := srvNS.background("nginx", "nginx", "-c", conf, "-p", dir, "-g", "daemon off;")
	waitListening(t, srvNS, "10.88.1.1:8443", ngx)

	// ProvisionDevice over gRPC, through nginx, from the client namespace.
	token, err := os.ReadFile(filepath.Join(a.data, "auth", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: caPool},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
			err = inNetns(cliNS, func() (err error) {
				conn, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		},
	}
	defer tr.CloseIdleConnections()
	jobs := anvilv1connect.NewJobServiceClient(&http.Client{Transport: tr}, "https://10.88.1.1:8443", connect.WithGRPC())
	req := connect.NewRequest(&v1.ProvisionDeviceRequest{DeviceId: mac, Template: "ingress-install", IdempotencyKey: "ingress-1"})
	req.Header().Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := jobs.ProvisionDevice(ctx, req)
	if err != nil {
		t.Fatalf("ProvisionDevice through nginx: %v\nnginx:\n%s", err, tail(ngx.output(), 20))
	}
	if resp.Msg.GetJobId() == "" || resp.Msg.GetStatus() != v1.JobState_JOB_STATE_ACCEPTED {
		t.Errorf("ProvisionDevice = %v; want an ACCEPTED job", resp.Msg)
	}
	// Without a token nginx passes the refusal through as gRPC status.
	_, err = jobs.ProvisionDevice(ctx, connect.NewRequest(&v1.ProvisionDeviceRequest{DeviceId: mac, Template: "ingress-install"}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("ProvisionDevice through nginx without a token: %v; want UNAUTHENTICATED", err)
	}

	// A file through the rewritten prefix: the same bytes as directly.
	got := filepath.Join(dir, "through-nginx.kpxe")
	if out, err := cliNS.exec(ctx, "curl", "-fsS", "--cacert", filepath.Join(dir, "cert.pem"),
		"-o", got, "https://10.88.1.1:8443/tink-stack/ipxe/binary/undionly.kpxe"); err != nil {
		t.Fatalf("download through nginx: %v\n%s", err, out)
	}
	direct := filepath.Join(dir, "direct.kpxe")
	if out, err := srvNS.exec(ctx, "curl", "-fsS", "-o", direct, a.base+"/ipxe/binary/undionly.kpxe"); err != nil {
		t.Fatalf("direct download: %v\n%s", err, out)
	}
	b1, _ := os.ReadFile(got)
	b2, _ := os.ReadFile(direct)
	if len(b1) == 0 || string(b1) != string(b2) {
		t.Errorf("through nginx %d bytes, directly %d: they differ", len(b1), len(b2))
	}

	// The client's address survived the proxy: in the audit record of the
	// provisioning call, and in the machine record the download was filed
	// under (the Hardware with that address).
	out := a.cli(t, "audit", "--subject", "admin")
	if !strings.Contains(out, "JobService/ProvisionDevice") || !strings.Contains(out, "10.88.1.2") {
		t.Errorf("audit lacks the provisioning call from 10.88.1.2:\n%s", out)
	}
	if strings.Contains(out, "ProvisionDevice") && strings.Contains(lineOf(out, "ProvisionDevice"), "127.0.0.1") {
		t.Errorf("audit records nginx's address, not the client's:\n%s", out)
	}
	logs := a.cli(t, "logs", "hardware/ingress-node")
	if !strings.Contains(logs, "GET /ipxe/binary/undionly.kpxe") {
		t.Errorf("the download through nginx is not in ingress-node's record (client address lost?):\n%s", logs)
	}
	var job struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	wfJSON := a.cli(t, "get", "workflow", strings.TrimPrefix(resp.Msg.GetJobId(), "default/"), "-o", "json")
	if err := json.Unmarshal([]byte(wfJSON), &job); err != nil || job.Metadata.Name == "" {
		t.Errorf("the job's workflow: %v\n%s", err, wfJSON)
	}
}

// lineOf returns the first line of s containing sub.
func lineOf(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// writeSelfSigned writes cert.pem and key.pem for ip into dir and returns
// a pool trusting the certificate.
func writeSelfSigned(t *testing.T, dir, ip string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ingress test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP(ip)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return pool
}

// waitListening waits until addr accepts connections inside ns, or p ends.
func waitListening(t *testing.T, ns *netns, addr string, p *proc) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := inNetns(ns, func() error {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			return
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited: %v\n%s", addr, p.err, tail(p.output(), 20))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s after 20s: %v\n%s", addr, err, tail(p.output(), 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
