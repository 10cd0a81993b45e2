package httpboot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path"
	"strconv"
	"time"
)

// DirFS returns the files under dir as an fs.FS for Config.BootEnv. Unlike
// os.DirFS, no path — through ".." or a symbolic link — can reach outside
// dir (it is an os.Root). The directory stays open for the life of the
// process.
func DirFS(dir string) (fs.FS, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("boot environment directory: %w", err)
	}
	return root.FS(), nil
}

// etagEntry caches a file's ETag with the size and modification time it was
// computed for.
type etagEntry struct {
	size    int64
	modTime time.Time
	etag    string
}

// etag returns a strong ETag for the file: from its size and modification
// time when it has one (files on disk), else from a SHA-256 of its content,
// computed once (embedded files have no modification time). f is left at
// its start.
func (h *Handler) etag(route, name string, st fs.FileInfo, f fs.File) (string, error) {
	key := route + "\x00" + name
	if v, ok := h.etags.Load(key); ok {
		e := v.(etagEntry)
		if e.size == st.Size() && e.modTime.Equal(st.ModTime()) {
			return e.etag, nil
		}
	}
	var tag string
	if !st.ModTime().IsZero() {
		tag = fmt.Sprintf(`"%x-%x"`, st.Size(), st.ModTime().UnixNano())
	} else {
		s, ok := f.(io.Seeker)
		if !ok {
			return "", nil // cannot rewind after hashing: no ETag
		}
		sum := sha256.New()
		if _, err := io.Copy(sum, f); err != nil {
			return "", err
		}
		if _, err := s.Seek(0, io.SeekStart); err != nil {
			return "", err
		}
		tag = `"sha256-` + hex.EncodeToString(sum.Sum(nil))[:32] + `"`
	}
	h.etags.Store(key, etagEntry{size: st.Size(), modTime: st.ModTime(), etag: tag})
	return tag, nil
}

// serveFile serves name from fsys with http.ServeContent: Content-Length,
// Range, If-None-Match / If-Modified-Since and HEAD. Directories, special
// files and invalid paths ("..", absolute, empty) are 404.
func (h *Handler) serveFile(w http.ResponseWriter, r *http.Request, route string, fsys fs.FS, name string) {
	q := &request{r: r, route: route, start: time.Now(), src: sourceAddr(r)}
	defer h.finish(q)
	cw := &countingWriter{ResponseWriter: w}

	fail := func(code int, detail string) {
		q.code, q.detail = code, fmt.Sprintf("%d, %s", code, detail)
		q.bytes = writeText(cw, r, code, http.StatusText(code)+": "+detail+"\n")
	}
	if fsys == nil {
		fail(http.StatusNotFound, "not served here")
		return
	}
	if name == "" || !fs.ValidPath(name) || name == "." {
		fail(http.StatusNotFound, "not a file path")
		return
	}
	f, err := fsys.Open(name)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrInvalid):
		fail(http.StatusNotFound, "no such file")
		return
	case errors.Is(err, fs.ErrPermission):
		fail(http.StatusForbidden, "permission denied")
		return
	case err != nil:
		// Most often a path that leaves the directory through a symbolic
		// link (os.Root refuses it with an unexported error); log it.
		h.log.Warn("http boot: open failed", "route", route, "name", name, "err", err)
		fail(http.StatusNotFound, "cannot open the file")
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		h.log.Warn("http boot: stat failed", "route", route, "name", name, "err", err)
		fail(http.StatusInternalServerError, "cannot stat the file")
		return
	}
	if !st.Mode().IsRegular() {
		fail(http.StatusNotFound, "not a file")
		return
	}
	tag, err := h.etag(route, name, st, f)
	if err != nil {
		h.log.Warn("http boot: read failed", "route", route, "name", name, "err", err)
		fail(http.StatusInternalServerError, "cannot read the file")
		return
	}
	hd := cw.Header()
	if tag != "" {
		hd.Set("ETag", tag)
	}
	ctype := mime.TypeByExtension(path.Ext(name))
	if ctype == "" {
		ctype = "application/octet-stream" // kernels, initramfs, .efi, .kpxe: do not sniff
	}
	hd.Set("Content-Type", ctype)

	if rs, ok := f.(io.ReadSeeker); ok {
		http.ServeContent(cw, r, name, st.ModTime(), rs)
	} else {
		// No seeking, so no ranges; still a full, sized response.
		hd.Set("Content-Length", strconv.FormatInt(st.Size(), 10))
		cw.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = io.Copy(cw, f) // a client gone away shows in the byte count
		}
	}
	q.code, q.bytes = cw.status(), cw.n
	switch {
	case q.code == http.StatusNotModified:
		q.detail = "304, not modified"
	case q.code == http.StatusPartialContent:
		q.detail = fmt.Sprintf("206, %s bytes (of %s, %s)", commas(q.bytes), commas(st.Size()), r.Header.Get("Range"))
	case q.code == http.StatusRequestedRangeNotSatisfiable:
		q.detail = fmt.Sprintf("416, range %s not satisfiable (size %s)", r.Header.Get("Range"), commas(st.Size()))
	case r.Method == http.MethodHead:
		q.detail = fmt.Sprintf("%d, %s bytes (HEAD)", q.code, commas(st.Size()))
	default:
		q.detail = fmt.Sprintf("%d, %s bytes", q.code, commas(q.bytes))
		if q.code == http.StatusOK && q.bytes < st.Size() {
			q.detail += fmt.Sprintf(" of %s (the client went away)", commas(st.Size()))
		}
	}
}

// countingWriter records the status and the body bytes actually written.
type countingWriter struct {
	http.ResponseWriter
	code int
	n    int64
}

func (c *countingWriter) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

// ReadFrom keeps the server's sendfile path for files on disk.
func (c *countingWriter) ReadFrom(src io.Reader) (int64, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	if rf, ok := c.ResponseWriter.(io.ReaderFrom); ok {
		n, err := rf.ReadFrom(src)
		c.n += n
		return n, err
	}
	return io.Copy(struct{ io.Writer }{c}, src)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *countingWriter) status() int {
	if c.code == 0 {
		return http.StatusOK
	}
	return c.code
}
