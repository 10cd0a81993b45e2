package httpboot

import (
	"net/http"
	"strings"

	"github.com/anvilproj/anvil/internal/ipxe"
	"github.com/anvilproj/anvil/internal/macaddr"
)

// Smee, Tinkerbell's boot server, also serves a machine's script at the
// root of its HTTP port, and iPXE builds, HookOS ISOs and DHCP servers set
// up for it point there: /auto.ipxe (the machine is found by its source
// address) and /<mac>/auto.ipxe (what Smee's DHCP hands out with its
// --dhcp-ipxe-http-script-prepend-mac). These aliases serve them as
// /ipxe/script/auto.ipxe and /ipxe/script/<mac>/auto.ipxe.
//
// They cannot be mux patterns of their own: "/{mac}/auto.ipxe" overlaps
// "/bootenv/{path...}" and the other prefix routes without either being
// more specific, which net/http refuses. So WithScriptAliases rewrites the
// path in front of the mux instead.

// ScriptAlias returns the path of Anvil's script route that path, one of
// Smee's script paths, stands for, and true; for any other path it returns
// "", false. A MAC may be in any case, ':' or '-' separated.
func ScriptAlias(path string) (string, bool) {
	rest, ok := strings.CutSuffix(path, "/"+ipxe.ScriptName)
	if !ok {
		return "", false
	}
	if rest == "" {
		return ipxe.ScriptPrefix + ipxe.ScriptName, true
	}
	if rest[0] != '/' || strings.Contains(rest[1:], "/") { // rest starts with '/': path does
		return "", false
	}
	m, err := macaddr.Parse(rest[1:])
	if err != nil {
		return "", false
	}
	return ipxe.ScriptPath(m), true
}

// WithScriptAliases serves Smee's script paths (ScriptAlias) as Anvil's
// script routes of next, and every other request as next would.
func WithScriptAliases(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := ScriptAlias(r.URL.Path)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		r2 := new(http.Request)
		*r2 = *r
		u := *r.URL
		u.Path, u.RawPath = p, ""
		r2.URL = &u
		next.ServeHTTP(w, r2)
	})
}
