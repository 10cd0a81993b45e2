package render

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/anvilproj/anvil/internal/macaddr"
)

// ErrNotFound is what a Finder returns (wrapped) when it has no config for
// a MAC and name: the machine is unknown, no profile applies, or the
// profile has no config of that name. Handler answers it with 404.
var ErrNotFound = errors.New("config not found")

// Finder finds the config a machine asks for and the data to render it
// with. The boot policy implements it. An error wrapping ErrNotFound is a
// 404; any other error a 500. Its message is sent to the machine and logged,
// so it must not contain secrets.
type Finder interface {
	Config(ctx context.Context, mac macaddr.MAC, name string) (Config, Data, error)
}

// FinderFunc adapts a function to Finder.
type FinderFunc func(ctx context.Context, mac macaddr.MAC, name string) (Config, Data, error)

// Config calls f.
func (f FinderFunc) Config(ctx context.Context, mac macaddr.MAC, name string) (Config, Data, error) {
	return f(ctx, mac, name)
}

// Handler serves GET (and HEAD) /configs/{mac}/{name}: it asks find for the
// machine's config, renders it with secrets and answers 200 with the body,
// its Content-Type and Content-Length; 400 for a malformed MAC; 404 with the
// reason when find reports ErrNotFound; 500 with the error and no partial
// body when finding or rendering fails. The MAC may be in any form
// macaddr.Parse accepts (52-54-00-AB-CD-EF, 5254.00ab.cdef, …). Every answer
// is logged with the MAC, the config name and the reason. A nil log
// discards. Responses carry Cache-Control: no-store, since configs may hold
// secrets.
func Handler(find Finder, secrets SecretSource, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /configs/{mac}/{name}", func(w http.ResponseWriter, r *http.Request) {
		rawMAC, name := r.PathValue("mac"), r.PathValue("name")
		mac, err := macaddr.Parse(rawMAC)
		if err != nil {
			log.Info("config refused: malformed MAC", "mac", rawMAC, "config", name, "remote", r.RemoteAddr)
			http.Error(w, "malformed MAC address "+strconv.Quote(rawMAC), http.StatusBadRequest)
			return
		}
		attrs := []any{"mac", mac.String(), "config", name, "remote", r.RemoteAddr}
		cfg, data, err := find.Config(r.Context(), mac, name)
		if errors.Is(err, ErrNotFound) {
			log.Info("config not found", append(attrs, "reason", err.Error())...)
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		if err != nil {
			log.Error("config lookup failed", append(attrs, "err", err.Error())...)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if data.MAC == "" {
			data.MAC = mac.String()
		}
		res, err := Render(r.Context(), cfg, data, secrets)
		if err != nil {
			log.Error("config render failed", append(attrs, "format", cfg.Format, "err", err.Error())...)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		for _, p := range res.Warnings {
			log.Warn("config warning", append(attrs, "warning", p.String())...)
		}
		h := w.Header()
		h.Set("Content-Type", res.ContentType)
		h.Set("Content-Length", strconv.Itoa(len(res.Body)))
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			if _, err := w.Write(res.Body); err != nil {
				log.Info("config write failed", append(attrs, "err", err.Error())...)
				return
			}
		}
		log.Info("config served", append(attrs, "format", cfg.Format, "bytes", len(res.Body), "warnings", len(res.Warnings))...)
	})
	return mux
}
