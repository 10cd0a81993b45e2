package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/anvilproj/anvil/internal/bootpolicy"
	"github.com/anvilproj/anvil/internal/clientip"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/render"
)

// configFinder answers render.Handler from the boot policy: the profile
// that applies to the machine with a MAC (the same choice its boot script
// made), that profile's config of a name, and the template data its
// kernel arguments saw.
//
// Configs carry secrets (a kubeadm token) and the boot path has no
// credentials, so a machine whose Hardware lists addresses gets its
// configs only from one of them (or from this server itself, for an
// operator checking what a machine will get); the MAC in the URL alone is
// not enough.
type configFinder struct {
	policy *bootpolicy.Policy
	self   netip.Addr // the server's public address
}

func (f configFinder) Config(ctx context.Context, mac macaddr.MAC, name string) (render.Config, render.Data, error) {
	hw, bp, err := f.policy.ProfileFor(ctx, mac)
	if errors.Is(err, bootpolicy.ErrNoProfile) {
		return render.Config{}, render.Data{}, fmt.Errorf("%w: %v", render.ErrNotFound, err)
	}
	if err != nil {
		return render.Config{}, render.Data{}, err
	}
	if c, ok := clientip.FromContext(ctx); ok && c.Addr.IsValid() && !c.Addr.IsLoopback() && c.Addr != f.self {
		if ips := hw.IPs(); len(ips) > 0 && !slices.Contains(ips, c.Addr.String()) {
			return render.Config{}, render.Data{}, fmt.Errorf("%w: hardware %s's configs are served to its own addresses (%s), not to %s",
				render.ErrNotFound, hw.Key(), strings.Join(ips, ", "), c.Addr)
		}
	}
	c, ok := bp.Spec.Configs[name]
	if !ok {
		have := make([]string, 0, len(bp.Spec.Configs))
		for k := range bp.Spec.Configs {
			have = append(have, k)
		}
		slices.Sort(have)
		return render.Config{}, render.Data{}, fmt.Errorf("%w: boot profile %s/%s (for hardware %s) has no config %q (it has: %s)",
			render.ErrNotFound, bp.Namespace, bp.Name, hw.Key(), name, strings.Join(have, ", "))
	}
	d := f.policy.ConfigData(hw, mac, bp)
	return render.Config{Name: name, Format: c.Format, Template: c.Template}, render.Data{
		Hardware: hw, Namespace: hw.Namespace, Name: hw.Name, Labels: d.Labels, Vars: d.Vars,
		MAC: d.MAC, IP: d.IP, Hostname: d.Hostname, ServerURL: d.ServerURL,
	}, nil
}

// registerConfigs serves /configs/<mac>/<name> on mux (the limited boot
// path), each request in the machine's record like its other boot files.
func registerConfigs(mux *http.ServeMux, boot *bootServices, secrets render.SecretSource, log *slog.Logger) {
	route := bootpolicy.ConfigPathPrefix + "{mac}/{name}"
	mux.Handle("GET "+route, boot.http.Recorded(route,
		render.Handler(configFinder{policy: boot.policy, self: boot.public}, secrets, log)))
}
