package httpboot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// AssetsPrefix is the URL path under which Config.Assets is served:
// kernels, initrds, images, system extensions (.raw, .conf) that boot
// profiles point at.
const AssetsPrefix = "/assets/"

// SumsName is the name, under AssetsPrefix, of the generated checksum list
// (`sha256sum -c` reads it). A file of that name at the assets root is
// shadowed by it.
const SumsName = "SHA256SUMS"

// routeAssets serves the assets, SumsName and (at the prefix itself) the
// JSON listing.
const routeAssets = AssetsPrefix + "{path...}"

// Asset is one file of the listing at AssetsPrefix.
type Asset struct {
	// Name is the path relative to the assets directory, '/'-separated.
	Name string `json:"name"`
	// Size is the length in bytes.
	Size int64 `json:"size"`
	// SHA256 is the hex SHA-256 of the content.
	SHA256 string `json:"sha256"`
	// ModTime is the modification time, RFC 3339 in UTC.
	ModTime time.Time `json:"modTime"`
}

// AssetList is the JSON body of GET AssetsPrefix.
type AssetList struct {
	Files []Asset `json:"files"`
}

// sumEntry is a file's digest with the size and modification time it was
// computed for.
type sumEntry struct {
	size    int64
	modTime time.Time
	sum     string
}

// sumCache keeps the SHA-256 of every asset, recomputed only when a file's
// size or modification time changes, so a large image is hashed once, not
// per listing. It is safe for concurrent use; listings are computed one at
// a time, so concurrent first requests do not hash the same image twice.
type sumCache struct {
	mu   sync.Mutex
	sums map[string]sumEntry // by name
	// hashed counts the files hashed, for tests.
	hashed int
}

// list walks fsys and returns every regular file, sorted by name, with its
// digest. Symbolic links are listed when they resolve to a regular file
// inside the directory (what serveFile would serve); others are left out,
// as are special files. ctx ends the walk between files.
func (c *sumCache) list(ctx context.Context, fsys fs.FS) ([]Asset, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sums == nil {
		c.sums = map[string]sumEntry{}
	}
	var out []Asset
	seen := map[string]bool{}
	err := fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if name == "." {
				return err
			}
			return nil // an unreadable subdirectory is not listed
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if d.IsDir() || name == SumsName {
			return nil
		}
		st, err := fs.Stat(fsys, name) // follows links inside the root only
		if err != nil || !st.Mode().IsRegular() {
			return nil
		}
		sum, err := c.sum(fsys, name, st)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed while we walked
		}
		if err != nil {
			return fmt.Errorf("hash %s: %w", name, err)
		}
		seen[name] = true
		out = append(out, Asset{Name: name, Size: st.Size(), SHA256: sum, ModTime: st.ModTime().UTC()})
		return nil
	})
	for name := range c.sums {
		if !seen[name] {
			delete(c.sums, name) // forget removed files
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

// sum returns the cached digest of name, or hashes it. c.mu is held.
func (c *sumCache) sum(fsys fs.FS, name string, st fs.FileInfo) (string, error) {
	if e, ok := c.sums[name]; ok && e.size == st.Size() && e.modTime.Equal(st.ModTime()) {
		return e.sum, nil
	}
	f, err := fsys.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	// Cache what was hashed only if the file did not change meanwhile;
	// else the next listing hashes it again.
	sum := hex.EncodeToString(h.Sum(nil))
	if after, err := f.Stat(); err == nil && after.Size() == st.Size() && after.ModTime().Equal(st.ModTime()) {
		c.sums[name] = sumEntry{size: st.Size(), modTime: st.ModTime(), sum: sum}
	}
	c.hashed++
	return sum, nil
}

// serveAssets serves GET AssetsPrefix + path: the JSON listing for the
// prefix itself, the checksum list for SumsName, else the file.
func (h *Handler) serveAssets(w http.ResponseWriter, r *http.Request) {
	switch name := r.PathValue("path"); name {
	case "":
		h.serveListing(w, r, "application/json", func(files []Asset) ([]byte, error) {
			if files == nil {
				files = []Asset{}
			}
			b, err := json.MarshalIndent(AssetList{Files: files}, "", "  ")
			return append(b, '\n'), err
		})
	case SumsName:
		h.serveListing(w, r, "text/plain; charset=utf-8", func(files []Asset) ([]byte, error) {
			var b bytes.Buffer
			for _, f := range files {
				b.WriteString(sumsLine(f))
			}
			return b.Bytes(), nil
		})
	default:
		h.serveFile(w, r, routeAssets, h.assets, name)
	}
}

// sumsLine is one line of SumsName in GNU sha256sum's format: the digest,
// two spaces (text mode), the name. A name with a backslash or a newline
// has them escaped and the line starts with a backslash, as sha256sum
// writes and reads it.
func sumsLine(f Asset) string {
	if !strings.ContainsAny(f.Name, "\\\n") {
		return f.SHA256 + "  " + f.Name + "\n"
	}
	esc := strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(f.Name)
	return `\` + f.SHA256 + "  " + esc + "\n"
}

// serveListing answers with a body made from the assets' listing, with an
// ETag of that body, so a client can revalidate (If-None-Match) and ask
// for ranges like of any file.
func (h *Handler) serveListing(w http.ResponseWriter, r *http.Request, ctype string, render func([]Asset) ([]byte, error)) {
	q := &request{r: r, route: routeAssets, start: time.Now(), src: sourceAddr(r)}
	defer h.finish(q)
	cw := &countingWriter{ResponseWriter: w}
	if h.assets == nil {
		q.code, q.detail = http.StatusNotFound, "404, not served here"
		q.bytes = writeText(cw, r, q.code, "Not Found: not served here\n")
		return
	}
	files, err := h.sums.list(r.Context(), h.assets)
	var body []byte
	if err == nil {
		body, err = render(files)
	}
	if err != nil {
		h.log.Warn("http boot: asset listing failed", "err", err)
		q.code, q.detail = http.StatusInternalServerError, "500, cannot list the assets"
		q.bytes = writeText(cw, r, q.code, "Internal Server Error: cannot list the assets\n")
		return
	}
	sum := sha256.Sum256(body)
	hd := cw.Header()
	hd.Set("ETag", `"sha256-`+hex.EncodeToString(sum[:16])+`"`)
	hd.Set("Content-Type", ctype)
	hd.Set("Cache-Control", "no-cache") // revalidate: files come and go
	http.ServeContent(cw, r, "", time.Time{}, bytes.NewReader(body))
	q.code, q.bytes = cw.status(), cw.n
	q.detail = fmt.Sprintf("%d, %d files listed, %s bytes", q.code, len(files), commas(q.bytes))
}
