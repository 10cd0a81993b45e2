package server

import (
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/ui"
)

// TestCheckUIOIDC: an OIDC login to the UI is refused at start when the
// API could not accept the provider's tokens.
func TestCheckUIOIDC(t *testing.T) {
	o := &ui.OIDC{Issuer: "https://sso.example.com/realms/infra", ClientID: "anvil"}
	idp := auth.Config{JWKSURL: "https://sso.example.com/realms/infra/protocol/openid-connect/certs", Audience: "anvil"}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" for accepted
	}{
		{"with the provider's JWKS", Config{UIOIDC: o, Auth: idp}, ""},
		{"with its key file", Config{UIOIDC: o, Auth: auth.Config{KeyFiles: []string{"idp.jwks"}}}, ""},
		{"none", Config{}, ""},
		{"local issuer", Config{UIOIDC: o}, "needs --auth-jwks-url"},
		{"no auth", Config{UIOIDC: o, InsecureNoAuth: true, Auth: idp}, "--insecure-no-auth"},
		{"no client", Config{UIOIDC: &ui.OIDC{Issuer: o.Issuer}, Auth: idp}, "go together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkUIOIDC(tc.cfg)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("checkUIOIDC = %v; want %q", err, tc.want)
			}
		})
	}
}
