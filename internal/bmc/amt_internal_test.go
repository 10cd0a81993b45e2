package bmc

import (
	"testing"

	"github.com/anvilproj/anvil/internal/model"
)

// TestAMTConn: the scheme and port from Rufio's intelAMT options, the
// connection's port, and AMT's defaults.
func TestAMTConn(t *testing.T) {
	for _, tc := range []struct {
		name       string
		port       int
		opts       *model.IntelAMTOptions
		wantScheme string
		wantPort   int
	}{
		{"Rufio's defaults (port 623, no options)", 623, nil, "http", 16992},
		{"no port", 0, &model.IntelAMTOptions{}, "http", 16992},
		{"https", 623, &model.IntelAMTOptions{HostScheme: "https"}, "https", 16993},
		{"HTTPS in capitals", 0, &model.IntelAMTOptions{HostScheme: "HTTPS"}, "https", 16993},
		{"the option's port wins", 16000, &model.IntelAMTOptions{Port: 16992}, "http", 16992},
		{"the connection's port", 16999, nil, "http", 16999},
		{"16993 without a scheme is TLS", 0, &model.IntelAMTOptions{Port: 16993}, "https", 16993},
		{"16993 with http stays http", 0, &model.IntelAMTOptions{Port: 16993, HostScheme: "http"}, "http", 16993},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Conn{Port: tc.port}
			var o *model.ProviderOptions
			if tc.opts != nil {
				o = &model.ProviderOptions{IntelAMT: tc.opts}
			}
			amtConn(&c, o)
			if c.Scheme != tc.wantScheme || c.Port != tc.wantPort {
				t.Errorf("amtConn = %s:%d; want %s:%d", c.Scheme, c.Port, tc.wantScheme, tc.wantPort)
			}
		})
	}
}
