package render_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/render"
)

// memFinder is an in-memory Finder: configs by MAC (in canonical
// prints it) and name, plus an error to return for one MAC.
type memFinder struct {
	hosts   map[string]render.Data
	configs map[string]render.Config
	failMAC string
}

func (f *memFinder) Config(_ context.Context, mac macaddr.MAC, name string) (render.Config, render.Data, error) {
	if mac.String() == f.failMAC {
		return render.Config{}, render.Data{}, fmt.Errorf("two profiles match %s: a, b", mac)
	}
	d, ok := f.hosts[mac.String()]
	if !ok {
		return render.Config{}, render.Data{}, fmt.Errorf("no Hardware has MAC %s: %w", mac, render.ErrNotFound)
	}
	c, ok := f.configs[name]
	if !ok {
		return render.Config{}, render.Data{}, fmt.Errorf("profile has no config %q: %w", name, render.ErrNotFound)
	}
	return c, d, nil
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestHandler(t *testing.T) {
	find := &memFinder{
		hosts: map[string]render.Data{},
		configs: map[string]render.Config{
			"ignition":  {Name: "ignition", Format: render.FormatButane, Template: readTestdata(t, "flatcar.bu")},
			"user-data": {Name: "user-data", Format: render.FormatCloudConfig, Template: readTestdata(t, "user-data.yaml")},
			"meta-data": {Name: "meta-data", Format: render.FormatNoCloudMetaData, Template: readTestdata(t, "meta-data.yaml")},
			"broken":    {Name: "broken", Format: render.FormatCloudConfig, Template: "#cloud-config\nhostname: {{ .Hostname }}\nkey: {{ .Vars.nope }}\n"},
			"invalid":   {Name: "invalid", Format: render.FormatButane, Template: "variant: flatcar\nversion: 1.1.0\nstorage:\n  files:\n    - path: {{ .Hostname }}\n"},
		},
		failMAC: "52:54:00:00:00:99",
	}
	for _, h := range hosts() {
		find.hosts[h.MAC] = h
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	srv := httptest.NewServer(render.Handler(find, newSecrets(t), log))
	defer srv.Close()

	tests := []struct {
		name     string
		path     string
		wantCode int
		wantType string
		wantBody []string // substrings
		wantLog  string
	}{
		{"ignition", "/configs/52:54:00:00:00:01/ignition", 200, "application/json", []string{`"source": "data:,node-1"`, sshKey1}, `msg="config served" mac=52:54:00:00:00:01 config=ignition`},
		{"other host", "/configs/52:54:00:00:00:02/ignition", 200, "application/json", []string{`"source": "data:,node-2"`, sshKey2}, "mac=52:54:00:00:00:02"},
		{"dashes upper case", "/configs/52-54-00-00-00-01/user-data", 200, "text/cloud-config; charset=utf-8", []string{"#cloud-config\nhostname: node-1\n"}, "config=user-data"},
		{"dotted", "/configs/5254.0000.0002/meta-data", 200, "application/yaml", []string{"local-hostname: node-2"}, "config=meta-data"},
		{"unknown mac", "/configs/52:54:00:00:00:03/ignition", 404, "text/plain; charset=utf-8", []string{"no Hardware has MAC 52:54:00:00:00:03"}, `msg="config not found" mac=52:54:00:00:00:03`},
		{"unknown config", "/configs/52:54:00:00:00:01/vendor-data", 404, "text/plain; charset=utf-8", []string{`profile has no config "vendor-data"`}, "config=vendor-data"},
		{"malformed mac", "/configs/not-a-mac/ignition", 400, "text/plain; charset=utf-8", []string{`malformed MAC address "not-a-mac"`}, "malformed MAC"},
		{"finder error", "/configs/52:54:00:00:00:99/ignition", 500, "text/plain; charset=utf-8", []string{"two profiles match"}, `msg="config lookup failed" mac=52:54:00:00:00:99`},
		{"missing var", "/configs/52:54:00:00:00:01/broken", 500, "text/plain; charset=utf-8", []string{`line 3 col 13: executing "broken" at <.Vars.nope>: map has no entry for key "nope"`}, `msg="config render failed" mac=52:54:00:00:00:01 config=broken`},
		{"invalid ignition", "/configs/52:54:00:00:00:01/invalid", 500, "text/plain; charset=utf-8", []string{"line 5 col 13 at $.storage.files.0.path: path not absolute"}, "config=invalid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Get(srv.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.wantCode {
				t.Errorf("GET %s = %d; want %d (%s)", tc.path, resp.StatusCode, tc.wantCode, body)
			}
			if got := resp.Header.Get("Content-Type"); got != tc.wantType {
				t.Errorf("Content-Type = %q; want %q", got, tc.wantType)
			}
			if tc.wantCode == 200 {
				if got := resp.Header.Get("Content-Length"); got != strconv.Itoa(len(body)) {
					t.Errorf("Content-Length = %q; want %d", got, len(body))
				}
				if got := resp.Header.Get("Cache-Control"); got != "no-store" {
					t.Errorf("Cache-Control = %q; want no-store", got)
				}
			} else if strings.Contains(string(body), "#cloud-config") || strings.Contains(string(body), "variant:") {
				t.Errorf("error response carries a partial config: %s", body)
			}
			for _, want := range tc.wantBody {
				if !strings.Contains(string(body), want) {
					t.Errorf("body lacks %q:\n%s", want, body)
				}
			}
			if !strings.Contains(logs.String(), tc.wantLog) {
				t.Errorf("log lacks %q:\n%s", tc.wantLog, logs.String())
			}
		})
	}
}
