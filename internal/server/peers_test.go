package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/kubetest"
	"github.com/anvilproj/anvil/internal/peers"
	"github.com/anvilproj/anvil/internal/store/backend"
	"github.com/anvilproj/anvil/internal/testtool"
)

// TestKubernetesPeerReads: two replicas on one cluster, each keeping the
// machine records and audit entries it received on its own disk. A
// machine fetches its iPXE script from replica A, then from replica B; an
// admin creates its Hardware at A and makes a refused delete at B. Asked
// at either replica, the machine's record holds both fetches in time
// order, and the audit log both calls. Then B goes away without deleting
// its Lease (as after SIGKILL) and a third replica hangs: A still
// answers, with its own part, naming both in its answer.
func TestKubernetesPeerReads(t *testing.T) {
	c, kubeconfig := kubeCluster(t)
	dirs := []string{t.TempDir(), t.TempDir()}
	var bases []string
	var stops []context.CancelFunc
	var waits []func() error
	for _, dir := range dirs {
		base, _, cancel, wait, _ := startWith(t, func(cfg *Config) {
			cfg.Store = backend.Config{Kind: backend.Kubernetes, Kubeconfig: kubeconfig}
			cfg.InsecureNoAuth = false
			cfg.DataDir = dir
		})
		bases = append(bases, base)
		stops = append(stops, cancel)
		waits = append(waits, wait)
	}
	a, b := bases[0], bases[1]
	tok, err := os.ReadFile(filepath.Join(dirs[0], "auth", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	token := string(bytes.TrimSpace(tok))
	const replicaLeases = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
	testtool.WaitFor(t, "both replicas' Leases", func() bool {
		return len(replicaURLs(t, c)) == 2
	})

	const mac = "3c:ec:ef:12:34:07"
	if code, body := callJSON(t, a, "/anvil.v1.HardwareService/Create", token,
		`{"hardware":{"metadata":{"namespace":"default","name":"node07"},"spec":{"interfaces":[{"dhcp":{"mac":"`+mac+`"}}]}}}`); code != http.StatusOK {
		t.Fatalf("create Hardware at A: %d %s", code, body)
	}
	if code, body := callJSON(t, b, "/anvil.v1.HardwareService/Delete", token, `{"namespace":"default","name":"no-such-node"}`); code != http.StatusNotFound {
		t.Fatalf("delete a missing Hardware at B: %d %s; want 404", code, body)
	}
	// The same script by two spellings of the MAC, so each replica's line
	// says where it came from.
	fromA, fromB := "/ipxe/script/"+mac+"/auto.ipxe", "/ipxe/script/"+strings.ReplaceAll(mac, ":", "-")+"/auto.ipxe"
	get(t, a+fromA)
	get(t, b+fromB)

	machineLog := func(base string) ([]string, http.Header) {
		var resp v1.GetLogsResponse
		h := callProto(t, base, "/anvil.v1.LogService/GetLogs", token, `{"namespace":"default","hardware":"node07"}`, &resp)
		var got []string
		for _, l := range resp.GetLines() {
			if p, _, ok := strings.Cut(l.GetLine(), ": "); ok && l.GetStream() == "http" {
				got = append(got, strings.TrimPrefix(p, "GET "))
			}
		}
		return got, h
	}
	auditLog := func(base string) ([]string, http.Header) {
		var resp v1.ListAuditResponse
		h := callProto(t, base, "/anvil.v1.AuditService/List", token, `{}`, &resp)
		var got []string
		for _, r := range resp.GetRecords() {
			got = append(got, r.GetProcedure())
		}
		return got, h
	}
	wantLines := []string{fromA, fromB}
	wantAudit := []string{"/anvil.v1.HardwareService/Create", "/anvil.v1.HardwareService/Delete"}
	for i, base := range bases {
		var lines, procs []string
		var h http.Header
		// The records are written behind the requests.
		testtool.WaitFor(t, fmt.Sprintf("replica %d to show both replicas' lines", i), func() bool {
			lines, h = machineLog(base)
			return len(lines) >= len(wantLines)
		})
		if !slices.Equal(lines, wantLines) {
			t.Errorf("GetLogs at replica %d: %q; want A's fetch then B's", i, lines)
		}
		if u := h.Values(v1.PeersUnansweredHeader); len(u) != 0 {
			t.Errorf("GetLogs at replica %d says %q went unanswered; want every peer answering", i, u)
		}
		procs, h = auditLog(base)
		if !slices.Equal(procs, wantAudit) {
			t.Errorf("audit List at replica %d: %q; want A's create then B's refused delete", i, procs)
		}
		if u := h.Values(v1.PeersUnansweredHeader); len(u) != 0 {
			t.Errorf("audit List at replica %d says %q went unanswered", i, u)
		}
	}

	// A replica that stops cleanly releases its Lease.
	urlB := b // the registry publishes http://PUBLIC_IP:HTTP_PORT
	if got := replicaURLs(t, c); !slices.Contains(got, urlB) {
		t.Fatalf("replica Leases %v; want B's URL %s among them", got, urlB)
	}
	stops[1]()
	if err := waits[1](); err != nil {
		t.Fatalf("replica B: %v", err)
	}
	if got := replicaURLs(t, c); !slices.Equal(got, []string{a}) {
		t.Errorf("held replica Leases after B stopped: %v; want A's alone", got)
	}
	if lines, h := machineLog(a); !slices.Equal(lines, wantLines[:1]) || len(h.Values(v1.PeersUnansweredHeader)) != 0 {
		t.Errorf("GetLogs at A after B stopped cleanly: %q, unanswered %q; want A's own line and no peer to name", lines, h.Values(v1.PeersUnansweredHeader))
	}
	// Now B's Lease as a SIGKILL leaves it (its port closed), and a
	// replica that accepts a connection and never answers.
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	go func() {
		for {
			conn, err := hung.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				io.Copy(io.Discard, conn) // until the caller gives up
			}()
		}
	}()
	for name, u := range map[string]string{"killed-b": urlB, "hung-c": "http://" + hung.Addr().String()} {
		c.JSON(t, http.MethodPost, replicaLeases, map[string]any{
			"metadata": map[string]any{"name": peers.LeaseName(name),
				"labels":      map[string]any{peers.LabelComponent: peers.ComponentValue},
				"annotations": map[string]any{peers.AnnotationURL: u}},
			"spec": map[string]any{"holderIdentity": name, "leaseDurationSeconds": 3600,
				"renewTime": time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00")},
		}, http.StatusCreated)
	}
	lines, h := machineLog(a)
	if !slices.Equal(lines, wantLines[:1]) {
		t.Errorf("GetLogs at A with B gone: %q; want A's own line", lines)
	}
	u := h.Values(v1.PeersUnansweredHeader)
	slices.Sort(u)
	t.Logf("GetLogs at A with B killed and C hung: %q, %s: %q", lines, v1.PeersUnansweredHeader, u)
	if len(u) != 2 || !strings.HasPrefix(u[0], "hung-c (") || !strings.HasPrefix(u[1], "killed-b ("+urlB+")") {
		t.Errorf("%s = %q; want the hung and the killed replica named", v1.PeersUnansweredHeader, u)
	}
	if procs, h := auditLog(a); !slices.Equal(procs, wantAudit[:1]) || len(h.Values(v1.PeersUnansweredHeader)) != 2 {
		t.Errorf("audit List at A with B gone: %q, unanswered %q; want A's create, and 2 peers named", procs, h.Values(v1.PeersUnansweredHeader))
	}
}

// replicaURLs lists the URLs in the held replica Leases, sorted.
func replicaURLs(t *testing.T, c *kubetest.Cluster) []string {
	t.Helper()
	code, b := c.Do(t, http.MethodGet, "/apis/coordination.k8s.io/v1/namespaces/default/leases?labelSelector="+peers.LabelComponent+"%3D"+peers.ComponentValue, nil, "application/json")
	if code != http.StatusOK {
		t.Fatalf("list Leases: %d %s", code, b)
	}
	var list struct {
		Items []struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Spec struct {
				HolderIdentity string `json:"holderIdentity"`
			} `json:"spec"`
		} `json:"items"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range list.Items {
		if l.Spec.HolderIdentity != "" {
			out = append(out, l.Metadata.Annotations[peers.AnnotationURL])
		}
	}
	slices.Sort(out)
	return out
}

// callProto makes a Connect JSON call that must succeed, decodes its
// answer into out and returns the answer's headers.
func callProto(t *testing.T, base, procedure, token, body string, out proto.Message) http.Header {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+procedure, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s at %s: %d %s", procedure, base, resp.StatusCode, b)
	}
	if err := protojson.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %v in %s", procedure, err, b)
	}
	return resp.Header
}
