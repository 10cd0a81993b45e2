package ui

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"net/http"
)

// The UI's stylesheet and script are linked under versioned URLs
// (/ui/static/style.css?v=VERSION, VERSION a digest of every embedded
// static file): a browser keeps them (a year, immutable) and loads a
// page with no request but the page's own, and a binary with other
// assets names other URLs, so none is ever stale. A request without the
// current version (an old page, a typed URL) is answered with the file
// but must be asked again next time.

// staticImmutable and staticRevalidate are the static files' caching.
const (
	staticImmutable  = "public, max-age=31536000, immutable"
	staticRevalidate = "no-cache"
)

// staticVersion is the digest of the embedded static files.
var staticVersion = digest(staticFS)

// digest is a short hex digest of every file of fsys, names and
// contents, in fs.WalkDir's (lexical) order.
func digest(fsys fs.FS) string {
	h := sha256.New()
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		h.Write([]byte(path))
		h.Write([]byte{0})
		h.Write(b)
		h.Write([]byte{0})
		return nil
	})
	if err != nil {
		panic("ui: the embedded static files cannot be read: " + err.Error())
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// asset is the versioned URL of static file name (a template function).
func asset(name string) string { return basePath + "static/" + name + "?v=" + staticVersion }

// staticCaching sets the caching of a static file's answer after
// ServeHTTP's no-store for pages: immutable under the current version,
// else revalidated.
func staticCaching(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cc := staticRevalidate
		if r.URL.Query().Get("v") == staticVersion {
			cc = staticImmutable
		}
		w.Header().Set("Cache-Control", cc)
		h.ServeHTTP(w, r)
	})
}
