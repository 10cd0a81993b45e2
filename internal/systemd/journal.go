package systemd

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// IsJournalStream reports whether f is the stream systemd connected to
// journald for this service: JOURNAL_STREAM holds its device and inode
// ("DEV:INODE", systemd.exec(5)). The variable alone is not enough: it is
// inherited by the programs a service starts, whose standard error may be
// somewhere else entirely.
func IsJournalStream(f *os.File) bool {
	return matchesJournalStream(os.Getenv(EnvJournalStream), f)
}

func matchesJournalStream(env string, f *os.File) bool {
	if env == "" || f == nil {
		return false
	}
	d, i, ok := strings.Cut(env, ":")
	dev, err1 := strconv.ParseUint(d, 10, 64)
	ino, err2 := strconv.ParseUint(i, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return uint64(st.Dev) == dev && st.Ino == ino
}

// Priority is the syslog priority journald records for a log level
// (sd-daemon(3)'s SD_ERR … SD_DEBUG): error 3, warning 4, info 6, debug 7;
// a level between two takes the lower one's.
func Priority(l slog.Level) int {
	switch {
	case l >= slog.LevelError:
		return 3
	case l >= slog.LevelWarn:
		return 4
	case l >= slog.LevelInfo:
		return 6
	}
	return 7
}

// NewJournalHandler returns a handler for a journald stream: each record
// as the handler mk makes over w would write it, without its time (the
// journal stamps every line itself) and after a "<N>" priority prefix,
// which journald takes as the line's priority and strips. opts is passed
// to mk with a ReplaceAttr that drops the time first.
func NewJournalHandler(w io.Writer, opts *slog.HandlerOptions, mk func(io.Writer, *slog.HandlerOptions) slog.Handler) slog.Handler {
	o := slog.HandlerOptions{}
	if opts != nil {
		o = *opts
	}
	replace := o.ReplaceAttr
	o.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		if replace != nil {
			return replace(groups, a)
		}
		return a
	}
	pw := &prefixWriter{w: w}
	return &journalHandler{inner: mk(pw, &o), pw: pw}
}

// journalHandler sets its writer's prefix to each record's priority
// before the inner handler writes it. The handlers derived by WithAttrs
// and WithGroup share the writer, and so its lock.
type journalHandler struct {
	inner slog.Handler
	pw    *prefixWriter
}

// prefixWriter writes prefix and each Write's bytes in one write, so
// that a line reaches journald whole.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix []byte
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(append(p.buf[:0], p.prefix...), b...)
	if _, err := p.w.Write(p.buf); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (h *journalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	h.pw.mu.Lock()
	defer h.pw.mu.Unlock()
	h.pw.prefix = strconv.AppendInt(append(h.pw.prefix[:0], '<'), int64(Priority(r.Level)), 10)
	h.pw.prefix = append(h.pw.prefix, '>')
	return h.inner.Handle(ctx, r)
}

func (h *journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &journalHandler{inner: h.inner.WithAttrs(as), pw: h.pw}
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	return &journalHandler{inner: h.inner.WithGroup(name), pw: h.pw}
}
