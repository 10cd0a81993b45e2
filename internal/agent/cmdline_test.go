package agent

import (
	"slices"
	"strings"
	"testing"
)

// TestParseCmdline: what the agent makes of the kernel command line beyond
// agentcmdline.Parse (tested there): the URLs it calls and the image cache's
// size in bytes.
func TestParseCmdline(t *testing.T) {
	tests := []struct {
		name      string
		cmdline   string
		wantURLs  []string
		wantGRPC  bool
		wantCache int64
		wantErr   string
	}{
		{name: "anvil.server", cmdline: "grpc_authority=10.0.0.1:42113 anvil.server=HTTP://10.0.0.1:7080/ worker_id=w1", wantURLs: []string{"http://10.0.0.1:7080"}},
		{name: "several replicas", cmdline: "anvil.server=http://10.0.0.3:7080,http://10.0.0.4:7080/ worker_id=w1",
			wantURLs: []string{"http://10.0.0.3:7080", "http://10.0.0.4:7080"}},
		{name: "grpc_authority with TLS", cmdline: "grpc_authority=tink.example:42113 tinkerbell_tls=true", wantURLs: []string{"https://tink.example:42113"}, wantGRPC: true},
		{name: "image cache size", cmdline: "anvil.server=http://s:7080 anvil.image_cache=2G", wantURLs: []string{"http://s:7080"}, wantCache: 2 << 30},
		{name: "bad image cache size", cmdline: "anvil.server=http://s:7080 anvil.image_cache=lots", wantErr: `anvil.image_cache="lots": size "lots": want a positive whole number`},
		{name: "agentcmdline's errors", cmdline: "worker_id=w1", wantErr: "names no server"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCmdline(tc.cmdline)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseCmdline(%q) error = %v; want one containing %q", tc.cmdline, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseCmdline(%q): %v", tc.cmdline, err)
			}
			if !slices.Equal(got.ServerURLs, tc.wantURLs) || got.GRPC != tc.wantGRPC || got.ImageCacheSize != tc.wantCache {
				t.Errorf("ParseCmdline(%q) = %q, GRPC %t, cache %d; want %q, %t, %d", tc.cmdline, got.ServerURLs, got.GRPC, got.ImageCacheSize, tc.wantURLs, tc.wantGRPC, tc.wantCache)
			}
		})
	}
}
