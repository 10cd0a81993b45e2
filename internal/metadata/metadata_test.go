package metadata

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/anvilproj/anvil/internal/clientip"
	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/model"
)

// The fixtures: two machines whose every value differs, so that a leak of
// one's data into the other's answers shows.
const node07YAML = `
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: rack1-node07, namespace: lab}
spec:
  userData: |
    #cloud-config
    hostname: rack1-node07
  vendorData: "vendor: node07"
  metadata:
    facility: {plan_slug: c3.small.x86, facility_code: lab1}
    instance:
      id: inst-node07
      hostname: rack1-node07
      tags: [web, blue]
      ssh_keys: ["ssh-ed25519 AAAAnode07a ops@lab", "ssh-rsa AAAAnode07b ci@lab"]
      operating_system: {slug: debian_12, distro: debian, version: "12", image_tag: img-node07}
      ips:
        - {address: 203.0.113.7, family: 4, public: true}
        - {address: 10.99.0.7, family: 4, public: false}
        - {address: "2001:db8::7", family: 6, public: true}
      storage:
        disks:
          - device: /dev/nvme0n1
            wipe_table: true
            partitions: [{label: ROOT, number: 1, size: 0}]
  interfaces:
    - dhcp:
        mac: 3C:EC:EF:12:34:07
        hostname: node07-dhcp
        ip: {address: 10.20.0.17, netmask: 255.255.255.0}
    - dhcp:
        mac: 3c:ec:ef:12:34:70
        ip: {address: 10.30.0.17, netmask: 255.255.255.0}
`

const node08YAML = `
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: rack1-node08, namespace: lab}
spec:
  metadata:
    instance:
      ssh_keys: ["ssh-ed25519 AAAAnode08 ops@lab"]
  interfaces:
    - dhcp:
        mac: 3c:ec:ef:12:34:08
        hostname: node08-dhcp
        ip: {address: 10.20.0.18, netmask: 255.255.255.0}
`

func parseHardware(t testing.TB, doc string) *model.Hardware {
	t.Helper()
	res, err := model.ParseManifests("fixture.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return res.Docs[0].Object.(*model.Hardware)
}

// fleet is a Finder over a fixed set of Hardware, answering by the
// interfaces' addresses as the store's IP index does.
type fleet []*model.Hardware

func (f fleet) HardwareByIP(_ context.Context, ip netip.Addr) (*model.Hardware, error) {
	var found []*model.Hardware
	for _, h := range f {
		if ifaceOf(h, ip) >= 0 {
			found = append(found, h)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("%s: %w", ip, ErrUnknownIP)
	case 1:
		return model.DeepCopy(found[0]), nil
	}
	return nil, fmt.Errorf("%s: %w", ip, ErrAmbiguousIP)
}

// events collects a Handler's Events.
type events struct {
	mu  sync.Mutex
	all []machinelog.Event
}

func (e *events) Record(ev machinelog.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

func (e *events) last(t *testing.T) machinelog.Event {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.all) == 0 {
		t.Fatal("no event recorded")
	}
	return e.all[len(e.all)-1]
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newHandler(t testing.TB, finder Finder, trusted ...string) (*Handler, *events) {
	t.Helper()
	prefixes, err := clientip.ParseTrustedProxies(trusted)
	if err != nil {
		t.Fatal(err)
	}
	ev := &events{}
	h, err := New(Config{Finder: finder, TrustedProxies: prefixes, Logger: quiet, Events: ev})
	if err != nil {
		t.Fatal(err)
	}
	return h, ev
}

// get asks h for path from remote ("10.20.0.17:40000"), with extra headers.
func get(t testing.TB, h http.Handler, method, path, remote string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

const node07Addr = "10.20.0.17:40000"

// TestItems asks for every route as node07, under both versions.
func TestItems(t *testing.T) {
	h, ev := newHandler(t, fleet{parseHardware(t, node07YAML), parseHardware(t, node08YAML)})
	tests := []struct {
		name     string
		item     string // after the version
		wantCode int
		want     string // the whole body for 200, a substring otherwise
		route    string
	}{
		{name: "root", item: "", wantCode: 200, want: "meta-data/\nuser-data\nvendor-data", route: "/{version}/"},
		{name: "root slash", item: "/", wantCode: 200, want: "meta-data/\nuser-data\nvendor-data", route: "/{version}/"},
		{name: "user-data", item: "/user-data", wantCode: 200, want: "#cloud-config\nhostname: rack1-node07\n", route: "/{version}/user-data"},
		{name: "vendor-data", item: "/vendor-data", wantCode: 200, want: "vendor: node07", route: "/{version}/vendor-data"},
		{name: "meta-data listing", item: "/meta-data", wantCode: 200, route: "/{version}/meta-data",
			want: "facility\nhostname\ninstance-id\niqn\nlocal-hostname\nlocal-ipv4\noperating-system/\nplan\npublic-ipv4\npublic-ipv6\npublic-keys\ntags"},
		{name: "meta-data listing slash", item: "/meta-data/", wantCode: 200, route: "/{version}/meta-data",
			want: "facility\nhostname\ninstance-id\niqn\nlocal-hostname\nlocal-ipv4\noperating-system/\nplan\npublic-ipv4\npublic-ipv6\npublic-keys\ntags"},
		{name: "instance-id", item: "/meta-data/instance-id", wantCode: 200, want: "inst-node07", route: "/{version}/meta-data/instance-id"},
		{name: "hostname", item: "/meta-data/hostname", wantCode: 200, want: "rack1-node07", route: "/{version}/meta-data/hostname"},
		{name: "local-hostname", item: "/meta-data/local-hostname", wantCode: 200, want: "rack1-node07", route: "/{version}/meta-data/local-hostname"},
		{name: "iqn", item: "/meta-data/iqn", wantCode: 200, want: "", route: "/{version}/meta-data/iqn"},
		{name: "plan", item: "/meta-data/plan", wantCode: 200, want: "c3.small.x86", route: "/{version}/meta-data/plan"},
		{name: "facility", item: "/meta-data/facility", wantCode: 200, want: "lab1", route: "/{version}/meta-data/facility"},
		{name: "tags", item: "/meta-data/tags", wantCode: 200, want: "web\nblue", route: "/{version}/meta-data/tags"},
		{name: "public-ipv4", item: "/meta-data/public-ipv4", wantCode: 200, want: "203.0.113.7", route: "/{version}/meta-data/public-ipv4"},
		{name: "public-ipv6", item: "/meta-data/public-ipv6", wantCode: 200, want: "2001:db8::7", route: "/{version}/meta-data/public-ipv6"},
		{name: "local-ipv4", item: "/meta-data/local-ipv4", wantCode: 200, want: "10.99.0.7", route: "/{version}/meta-data/local-ipv4"},
		{name: "public-keys", item: "/meta-data/public-keys", wantCode: 200, route: "/{version}/meta-data/public-keys",
			want: "ssh-ed25519 AAAAnode07a ops@lab\nssh-rsa AAAAnode07b ci@lab"},
		{name: "public-keys slash", item: "/meta-data/public-keys/", wantCode: 200, route: "/{version}/meta-data/public-keys",
			want: "ssh-ed25519 AAAAnode07a ops@lab\nssh-rsa AAAAnode07b ci@lab"},
		{name: "key 0 listing", item: "/meta-data/public-keys/0", wantCode: 200, want: "openssh-key", route: "/{version}/meta-data/public-keys/{n}"},
		{name: "key 1", item: "/meta-data/public-keys/1/openssh-key", wantCode: 200, want: "ssh-rsa AAAAnode07b ci@lab",
			route: "/{version}/meta-data/public-keys/{n}/openssh-key"},
		{name: "key 2 missing", item: "/meta-data/public-keys/2/openssh-key", wantCode: 404, want: "no public key 2: the Hardware has 2",
			route: "/{version}/meta-data/public-keys/{n}/openssh-key"},
		{name: "key 2 listing missing", item: "/meta-data/public-keys/2", wantCode: 404, want: "no public key 2",
			route: "/{version}/meta-data/public-keys/{n}"},
		{name: "key index with a leading zero", item: "/meta-data/public-keys/01", wantCode: 404, want: "no metadata item", route: routeOther},
		{name: "key index negative", item: "/meta-data/public-keys/-1/openssh-key", wantCode: 404, want: "no metadata item", route: routeOther},
		{name: "key other leaf", item: "/meta-data/public-keys/0/x509", wantCode: 404, want: "no metadata item", route: routeOther},
		{name: "os listing", item: "/meta-data/operating-system", wantCode: 200, want: "distro\nimage_tag\nslug\nversion",
			route: "/{version}/meta-data/operating-system"},
		{name: "os slug", item: "/meta-data/operating-system/slug", wantCode: 200, want: "debian_12", route: "/{version}/meta-data/operating-system/slug"},
		{name: "os distro", item: "/meta-data/operating-system/distro", wantCode: 200, want: "debian", route: "/{version}/meta-data/operating-system/distro"},
		{name: "os version", item: "/meta-data/operating-system/version", wantCode: 200, want: "12", route: "/{version}/meta-data/operating-system/version"},
		{name: "os image_tag", item: "/meta-data/operating-system/image_tag", wantCode: 200, want: "img-node07",
			route: "/{version}/meta-data/operating-system/image_tag"},
		{name: "unknown item", item: "/meta-data/spot", wantCode: 404, want: `no metadata item "meta-data/spot"`, route: routeOther},
		{name: "unknown top", item: "/dynamic", wantCode: 404, want: `no metadata item "dynamic"`, route: routeOther},
	}
	for _, v := range Versions {
		for _, tc := range tests {
			t.Run(v+" "+tc.name, func(t *testing.T) {
				before := counter(t, requestsTotal.WithLabelValues(tc.route, outcomeFor(tc.wantCode)))
				w := get(t, h, http.MethodGet, "/"+v+tc.item, node07Addr)
				body := w.Body.String()
				if w.Code != tc.wantCode {
					t.Fatalf("GET /%s%s = %d %q; want %d", v, tc.item, w.Code, body, tc.wantCode)
				}
				if tc.wantCode == 200 && body != tc.want || tc.wantCode != 200 && !strings.Contains(body, tc.want) {
					t.Errorf("GET /%s%s = %q; want %q", v, tc.item, body, tc.want)
				}
				if ct := w.Header().Get("Content-Type"); ct != "text/plain; charset=utf-8" {
					t.Errorf("Content-Type = %q; want text/plain", ct)
				}
				if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
					t.Errorf("Cache-Control = %q; want no-store", cc)
				}
				if d := counter(t, requestsTotal.WithLabelValues(tc.route, outcomeFor(tc.wantCode))) - before; d != 1 {
					t.Errorf("anvil_metadata_requests_total{route=%q,outcome=%q} went up by %v; want 1", tc.route, outcomeFor(tc.wantCode), d)
				}
				e := ev.last(t)
				if e.Service != machinelog.ServiceMetadata || e.IP != netip.MustParseAddr("10.20.0.17") ||
					e.MAC.String() != "3c:ec:ef:12:34:07" || e.Outcome != outcomeFor(tc.wantCode) ||
					!strings.HasPrefix(e.Message, "GET /"+v+tc.item+": ") {
					t.Errorf("event = %+v; want service metadata, node07's IP and MAC, outcome %s", e, outcomeFor(tc.wantCode))
				}
			})
		}
	}
}

func counter(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func outcomeFor(code int) string {
	switch code {
	case 200:
		return OutcomeServed
	case 404:
		return OutcomeNotFound
	}
	return OutcomeError
}

// TestHead: HEAD answers the headers of GET, without a body.
func TestHead(t *testing.T) {
	h, _ := newHandler(t, fleet{parseHardware(t, node07YAML)})
	w := get(t, h, http.MethodHead, "/latest/meta-data/hostname", node07Addr)
	if w.Code != 200 || w.Body.Len() != 0 || w.Header().Get("Content-Length") != "12" {
		t.Errorf("HEAD = %d, body %q, Content-Length %q; want 200, no body, 12", w.Code, w.Body, w.Header().Get("Content-Length"))
	}
}

// rootioWrapper is the shape Tinkerbell's rootio action decodes /metadata
// into.
type rootioWrapper struct {
	Metadata struct {
		Instance struct {
			Hostname string `json:"hostname"`
			Storage  struct {
				Disks []struct {
					Device     string `json:"device"`
					WipeTable  bool   `json:"wipe_table"`
					Partitions []struct {
						Label  string `json:"label"`
						Number int    `json:"number"`
					} `json:"partitions"`
				} `json:"disks"`
			} `json:"storage"`
		} `json:"instance"`
	} `json:"metadata"`
}

func TestMetadataJSON(t *testing.T) {
	node07 := parseHardware(t, node07YAML)
	h, ev := newHandler(t, fleet{node07, parseHardware(t, node08YAML)})
	w := get(t, h, http.MethodGet, "/metadata", node07Addr)
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET /metadata = %d %s %q; want 200 application/json", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	var rootio rootioWrapper
	if err := json.Unmarshal(w.Body.Bytes(), &rootio); err != nil {
		t.Fatal(err)
	}
	in := rootio.Metadata.Instance
	if in.Hostname != "rack1-node07" || len(in.Storage.Disks) != 1 || in.Storage.Disks[0].Device != "/dev/nvme0n1" ||
		!in.Storage.Disks[0].WipeTable || len(in.Storage.Disks[0].Partitions) != 1 || in.Storage.Disks[0].Partitions[0].Label != "ROOT" {
		t.Errorf("rootio reads %+v; want node07's hostname and storage", in)
	}
	// The document is {"metadata": spec.metadata}, nothing more or less.
	var got, want map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]any{"metadata": node07.Spec.Metadata})
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("GET /metadata = %v; want %v", got, want)
	}
	if e := ev.last(t); e.Outcome != OutcomeServed || e.MAC.String() != "3c:ec:ef:12:34:07" {
		t.Errorf("event = %+v; want served for node07", e)
	}

	// A Hardware without metadata still answers the shape rootio reads.
	h2, _ := newHandler(t, fleet{parseHardware(t, `
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: bare}
spec: {interfaces: [{dhcp: {mac: "02:00:00:00:00:01", ip: {address: 10.20.0.50}}}]}`)})
	if w := get(t, h2, http.MethodGet, "/metadata", "10.20.0.50:1"); w.Code != 200 || w.Body.String() != `{"metadata":{}}` {
		t.Errorf("GET /metadata for a Hardware without metadata = %d %q; want 200 {\"metadata\":{}}", w.Code, w.Body)
	}
}

// TestFallbacks: without instance values, hostname and local-ipv4 come from
// the interface the call came from.
func TestFallbacks(t *testing.T) {
	h, _ := newHandler(t, fleet{parseHardware(t, node08YAML)})
	for item, want := range map[string]string{
		"meta-data/hostname":    "node08-dhcp",
		"meta-data/local-ipv4":  "10.20.0.18",
		"meta-data/public-ipv4": "",
		"meta-data/instance-id": "",
		"user-data":             "",
		"meta-data/tags":        "",
	} {
		if w := get(t, h, http.MethodGet, "/2009-04-04/"+item, "10.20.0.18:1"); w.Code != 200 || w.Body.String() != want {
			t.Errorf("GET %s = %d %q; want 200 %q", item, w.Code, w.Body, want)
		}
	}
}

func TestUnknownCaller(t *testing.T) {
	h, ev := newHandler(t, fleet{parseHardware(t, node07YAML)})
	for _, path := range []string{"/metadata", "/2009-04-04/meta-data/hostname", "/latest", "/2009-04-04/no-such-item"} {
		t.Run(path, func(t *testing.T) {
			w := get(t, h, http.MethodGet, path, "10.20.0.99:5000")
			want := "no Hardware has IP 10.20.0.99 in spec.interfaces[].dhcp.ip.address"
			if w.Code != 404 || !strings.Contains(w.Body.String(), want) ||
				!strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
				t.Errorf("GET %s from an unknown IP = %d %q; want 404 saying %q", path, w.Code, w.Body, want)
			}
			if e := ev.last(t); e.Outcome != OutcomeUnknownIP || e.IP != netip.MustParseAddr("10.20.0.99") || e.MAC.IsValid() {
				t.Errorf("event = %+v; want unknown-ip from 10.20.0.99", e)
			}
		})
	}
}

func TestAmbiguousAndFailingFinder(t *testing.T) {
	dup := parseHardware(t, node07YAML)
	dup.Name = "impostor"
	h, _ := newHandler(t, fleet{parseHardware(t, node07YAML), dup})
	if w := get(t, h, http.MethodGet, "/metadata", node07Addr); w.Code != http.StatusConflict ||
		!strings.Contains(w.Body.String(), "several Hardware") || strings.Contains(w.Body.String(), "inst-node07") {
		t.Errorf("two Hardware with the caller's IP: %d %q; want 409 and no data", w.Code, w.Body)
	}
	failing := FinderFunc(func(context.Context, netip.Addr) (*model.Hardware, error) {
		return nil, errors.New("store closed")
	})
	h, _ = newHandler(t, failing)
	if w := get(t, h, http.MethodGet, "/metadata", node07Addr); w.Code != 500 || !strings.Contains(w.Body.String(), "store closed") {
		t.Errorf("failing finder: %d %q; want 500 with the reason", w.Code, w.Body)
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New without a Finder succeeded")
	}
}

// TestIsolation: for every item, each machine gets only its own data, and
// a header naming the other machine changes nothing without a trusted
// proxy.
func TestIsolation(t *testing.T) {
	node07, node08 := parseHardware(t, node07YAML), parseHardware(t, node08YAML)
	h, _ := newHandler(t, fleet{node07, node08})
	paths := []string{"/metadata"}
	for p := range items {
		paths = append(paths, "/2009-04-04/"+p)
	}
	paths = append(paths, "/latest/meta-data/public-keys/0/openssh-key")
	for _, p := range paths {
		a := get(t, h, http.MethodGet, p, node07Addr, clientip.HeaderForwardedFor, "10.20.0.18").Body.String()
		b := get(t, h, http.MethodGet, p, "10.20.0.18:40000", clientip.HeaderForwardedFor, "10.20.0.17").Body.String()
		if strings.Contains(a, "node08") {
			t.Errorf("node07 asking %s got node08's data: %q", p, a)
		}
		if strings.Contains(b, "node07") {
			t.Errorf("node08 asking %s got node07's data: %q", p, b)
		}
	}
}

func TestForwardedFor(t *testing.T) {
	h, _ := newHandler(t, fleet{parseHardware(t, node07YAML), parseHardware(t, node08YAML)}, "10.0.0.0/24", "192.0.2.9")
	tests := []struct {
		name     string
		peer     string
		xff      []string
		wantCode int
		want     string // hostname, or a substring of the error
	}{
		{name: "untrusted peer: header ignored", peer: "10.20.0.17:1", xff: []string{"10.20.0.18"}, wantCode: 200, want: "rack1-node07"},
		{name: "untrusted peer lying about a trusted hop", peer: "10.20.0.17:1", xff: []string{"10.20.0.18, 10.0.0.5"}, wantCode: 200, want: "rack1-node07"},
		{name: "trusted peer", peer: "10.0.0.5:1", xff: []string{"10.20.0.18"}, wantCode: 200, want: "node08-dhcp"},
		{name: "trusted single address", peer: "192.0.2.9:1", xff: []string{"10.20.0.18"}, wantCode: 200, want: "node08-dhcp"},
		{name: "trusted peer, IPv4-mapped", peer: "[::ffff:10.0.0.5]:1", xff: []string{"10.20.0.18"}, wantCode: 200, want: "node08-dhcp"},
		{name: "right-most untrusted wins over a forged left", peer: "10.0.0.5:1", xff: []string{"10.20.0.18, 10.20.0.17"}, wantCode: 200, want: "rack1-node07"},
		{name: "chain of trusted proxies", peer: "10.0.0.5:1", xff: []string{"10.20.0.17, 10.0.0.6, 10.0.0.7"}, wantCode: 200, want: "rack1-node07"},
		{name: "several headers are one list", peer: "10.0.0.5:1", xff: []string{"10.20.0.18", "10.0.0.6"}, wantCode: 200, want: "node08-dhcp"},
		{name: "port", peer: "10.0.0.5:1", xff: []string{"10.20.0.18:5555"}, wantCode: 200, want: "node08-dhcp"},
		{name: "trusted peer without the header is the caller", peer: "10.0.0.5:1", wantCode: 404, want: "no Hardware has IP 10.0.0.5"},
		{name: "all trusted: the left-most", peer: "10.0.0.5:1", xff: []string{"10.0.0.8, 10.0.0.6"}, wantCode: 404, want: "no Hardware has IP 10.0.0.8"},
		{name: "garbage left of the client is never read", peer: "10.0.0.5:1", xff: []string{"forged, 10.20.0.17"}, wantCode: 200, want: "rack1-node07"},
		{name: "garbage", peer: "10.0.0.5:1", xff: []string{"10.20.0.17, not-an-ip"}, wantCode: 400, want: `"not-an-ip" is not an IP address`},
		{name: "unknown", peer: "10.0.0.5:1", xff: []string{"unknown"}, wantCode: 400, want: "is not an IP address"},
		{name: "empty element", peer: "10.0.0.5:1", xff: []string{"10.20.0.17,,10.0.0.6"}, wantCode: 400, want: `"" is not an IP address`},
		{name: "empty header", peer: "10.0.0.5:1", xff: []string{""}, wantCode: 400, want: "is not an IP address"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var hd []string
			for _, x := range tc.xff {
				hd = append(hd, clientip.HeaderForwardedFor, x)
			}
			w := get(t, h, http.MethodGet, "/2009-04-04/meta-data/local-hostname", tc.peer, hd...)
			if w.Code != tc.wantCode || tc.wantCode == 200 && w.Body.String() != tc.want || !strings.Contains(w.Body.String(), tc.want) {
				t.Errorf("from %s with X-Forwarded-For %q: %d %q; want %d %q", tc.peer, tc.xff, w.Code, w.Body, tc.wantCode, tc.want)
			}
		})
	}
}

// TestOverHTTP serves the handler on a real loopback listener; two machines
// (127.0.0.1 and 127.0.0.2, the same host on Linux's 127/8) each read their
// own data.
func TestOverHTTP(t *testing.T) {
	one := parseHardware(t, strings.ReplaceAll(node07YAML, "10.20.0.17", "127.0.0.1"))
	two := parseHardware(t, strings.ReplaceAll(node08YAML, "10.20.0.18", "127.0.0.2"))
	h, _ := newHandler(t, fleet{one, two})
	srv := httptest.NewServer(h)
	defer srv.Close()
	from := func(local string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	for _, tc := range []struct {
		local, path, want string
	}{
		{"127.0.0.1", "/2009-04-04/meta-data/hostname", "rack1-node07"},
		{"127.0.0.2", "/2009-04-04/meta-data/hostname", "node08-dhcp"},
		{"127.0.0.2", "/latest/meta-data/public-keys/0/openssh-key", "ssh-ed25519 AAAAnode08 ops@lab"},
		{"127.0.0.1", "/latest/meta-data/public-keys/0/openssh-key", "ssh-ed25519 AAAAnode07a ops@lab"},
	} {
		resp, err := from(tc.local).Get(srv.URL + tc.path)
		if err != nil {
			t.Fatalf("GET %s from %s: %v", tc.path, tc.local, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || string(body) != tc.want {
			t.Errorf("GET %s from %s = %d %q; want 200 %q", tc.path, tc.local, resp.StatusCode, body, tc.want)
		}
	}
	resp, err := from("127.0.0.3").Get(srv.URL + "/metadata")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("GET /metadata from 127.0.0.3 = %d; want 404", resp.StatusCode)
	}
}

// TestAmbiguousIPNamesNoHardware: the 409 for an address several Hardware
// claim goes to whatever machine asks, anonymously; it must not tell it
// the names of those Hardware (other organisations' objects). The
// server's log, read by its operator, names them.
func TestAmbiguousIPNamesNoHardware(t *testing.T) {
	var log strings.Builder
	finder := FinderFunc(func(_ context.Context, ip netip.Addr) (*model.Hardware, error) {
		// What the server's store finder says.
		return nil, fmt.Errorf("%w (%s): acme/n1, globex/g1", ErrAmbiguousIP, ip)
	})
	ev := &events{}
	h, err := New(Config{Finder: finder, Logger: slog.New(slog.NewTextHandler(&log, nil)), Events: ev})
	if err != nil {
		t.Fatal(err)
	}
	w := get(t, h, http.MethodGet, "/metadata", node07Addr)
	if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "several Hardware have IP 10.20.0.17") {
		t.Errorf("GET /metadata = %d %q; want 409 saying several Hardware have the address", w.Code, w.Body)
	}
	for _, name := range []string{"acme/n1", "globex/g1"} {
		if strings.Contains(w.Body.String(), name) {
			t.Errorf("the 409 names %s: %q", name, w.Body)
		}
		if e := ev.last(t); strings.Contains(e.Message, name) {
			t.Errorf("the machine's record names %s: %q", name, e.Message)
		}
		if !strings.Contains(log.String(), name) {
			t.Errorf("the server log does not name %s:\n%s", name, log.String())
		}
	}
}
