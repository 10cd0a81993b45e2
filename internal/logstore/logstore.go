// Package logstore keeps the output lines agents stream for their actions:
// append-only JSON-lines files under one directory, one file per workflow and
// one per agent, each bounded to a number of lines.
//
// It owns only its directory (DATA_DIR/logs). It must not touch the object
// store, the workflow engine or any transport: logs are not state, and a lost
// tail of log lines after a crash never changes what a machine does.
//
// # Durability
//
// Appends go to the page cache at once and are visible to Read immediately.
// Files are fsynced on a timer (Config.SyncInterval, default one second) and
// on Close, so a power loss can drop up to one interval of lines, never
// corrupt older ones: a torn last line is skipped on read.
//
// # Layout
//
// A line naming a workflow goes to "wf-<escaped workflow ID>.jsonl"; a line
// naming an agent also goes to "agent-<escaped agent ID>.jsonl". The second
// copy costs disk but makes both queries a sequential read of one file with
// no index to keep consistent. An ID whose escaped form is too long for a
// file name is replaced by its SHA-256.
package logstore

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Defaults for the zero values of Config.
const (
	DefaultMaxLines     = 10000
	DefaultSyncInterval = time.Second
	// DefaultMaxOpenFiles bounds the append handles kept open.
	DefaultMaxOpenFiles = 64
)

// maxNameLen is the longest escaped ID used verbatim in a file name (most
// file systems allow 255 bytes; leave room for the prefix and suffix).
const maxNameLen = 200

// ErrClosed is returned by Append and Read after Close.
var ErrClosed = errors.New("log store closed")

// Line is one output line of an action.
type Line struct {
	WorkflowID string    `json:"workflowID,omitempty"` // "namespace/name"
	AgentID    string    `json:"agentID,omitempty"`
	TaskName   string    `json:"task,omitempty"`
	ActionName string    `json:"action,omitempty"`
	Time       time.Time `json:"time"`
	// Stream is "stdout", "stderr" or "agent".
	Stream string `json:"stream,omitempty"`
	Line   string `json:"line"`
}

// Config configures a Store.
type Config struct {
	// Dir holds the log files; it is created if missing. Required.
	Dir string
	// MaxLines bounds each file. A file is trimmed back to MaxLines once it
	// grows a tenth over it, dropping the oldest lines. If 0, uses
	// DefaultMaxLines.
	MaxLines int
	// SyncInterval is how often written files are fsynced. If 0, uses
	// DefaultSyncInterval; if negative, files are synced only on Close.
	SyncInterval time.Duration
	// MaxOpenFiles bounds the append handles kept open between appends. If
	// 0, uses DefaultMaxOpenFiles.
	MaxOpenFiles int
	// Logger receives sync errors. If nil, uses slog.Default().
	Logger *slog.Logger
}

// Store is a directory of bounded log files. It is safe for concurrent use.
// Close it to stop the sync timer and flush.
type Store struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	files  map[string]*file // by file name
	closed bool

	stop chan struct{}
	done chan struct{}
}

// file is the state of one log file. Guarded by Store.mu.
type file struct {
	f     *os.File // nil when not open
	lines int      // lines in the file; -1 until counted
	dirty bool     // written since last sync
}

// Open creates cfg.Dir if needed and returns a Store on it.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("logstore: no directory")
	}
	if cfg.MaxLines <= 0 {
		cfg.MaxLines = DefaultMaxLines
	}
	if cfg.SyncInterval == 0 {
		cfg.SyncInterval = DefaultSyncInterval
	}
	if cfg.MaxOpenFiles <= 0 {
		cfg.MaxOpenFiles = DefaultMaxOpenFiles
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("logstore: %w", err)
	}
	s := &Store{
		cfg:   cfg,
		log:   cfg.Logger,
		files: map[string]*file{},
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go s.syncLoop()
	return s, nil
}

// Append writes lines, each to its workflow's and its agent's file. A line
// with neither ID is an error and nothing is written. Lines are readable when
// Append returns, durable after the next sync.
func (s *Store) Append(lines ...Line) error {
	type entry struct {
		name string
		data []byte
	}
	var entries []entry
	for i, l := range lines {
		if l.WorkflowID == "" && l.AgentID == "" {
			return fmt.Errorf("logstore: line %d names neither a workflow nor an agent", i)
		}
		b, err := json.Marshal(l)
		if err != nil {
			return fmt.Errorf("logstore: encode line %d: %w", i, err)
		}
		b = append(b, '\n')
		if l.WorkflowID != "" {
			entries = append(entries, entry{fileName("wf-", l.WorkflowID), b})
		}
		if l.AgentID != "" {
			entries = append(entries, entry{fileName("agent-", l.AgentID), b})
		}
	}
	// Group by file to write each file once.
	byFile := map[string][]byte{}
	counts := map[string]int{}
	var order []string
	for _, e := range entries {
		if _, ok := byFile[e.name]; !ok {
			order = append(order, e.name)
		}
		byFile[e.name] = append(byFile[e.name], e.data...)
		counts[e.name]++
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	for _, name := range order {
		if err := s.appendLocked(name, byFile[name], counts[name]); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) appendLocked(name string, data []byte, n int) error {
	fs, err := s.openLocked(name)
	if err != nil {
		return err
	}
	if _, err := fs.f.Write(data); err != nil {
		return fmt.Errorf("logstore: write %s: %w", name, err)
	}
	fs.dirty = true
	fs.lines += n
	if fs.lines > s.cfg.MaxLines+s.cfg.MaxLines/10 {
		return s.trimLocked(name, fs)
	}
	return nil
}

// openLocked returns the state of name with an open append handle, closing
// other handles first if too many are open.
func (s *Store) openLocked(name string) (*file, error) {
	fs := s.files[name]
	if fs == nil {
		fs = &file{lines: -1}
		s.files[name] = fs
	}
	if fs.f != nil {
		return fs, nil
	}
	open := 0
	for _, o := range s.files {
		if o.f != nil {
			open++
		}
	}
	if open >= s.cfg.MaxOpenFiles {
		for _, o := range s.files {
			s.closeFileLocked(o)
		}
	}
	path := filepath.Join(s.cfg.Dir, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("logstore: %w", err)
	}
	fs.f = f
	if fs.lines < 0 {
		n, err := countLines(path)
		if err != nil {
			s.closeFileLocked(fs)
			return nil, err
		}
		fs.lines = n
	}
	return fs, nil
}

// closeFileLocked syncs (if dirty) and closes fs's handle.
func (s *Store) closeFileLocked(fs *file) {
	if fs.f == nil {
		return
	}
	if fs.dirty {
		if err := fs.f.Sync(); err != nil {
			s.log.Warn("log sync failed", "file", fs.f.Name(), "err", err)
		}
		fs.dirty = false
	}
	if err := fs.f.Close(); err != nil {
		s.log.Warn("log close failed", "file", fs.f.Name(), "err", err)
	}
	fs.f = nil
}

// trimLocked rewrites name keeping its newest MaxLines lines. The new file
// is written and synced beside the old one and renamed over it, so a crash
// leaves either the old or the new file.
func (s *Store) trimLocked(name string, fs *file) error {
	s.closeFileLocked(fs)
	path := filepath.Join(s.cfg.Dir, name)
	keep, err := tailRaw(path, s.cfg.MaxLines)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("logstore: trim: %w", err)
	}
	w := bufio.NewWriter(f)
	for _, l := range keep {
		w.Write(l)
		w.WriteByte('\n')
	}
	err = w.Flush()
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("logstore: trim %s: %w", name, err)
	}
	fs.lines = len(keep)
	return nil
}

// Read returns the lines of a workflow, or of an agent if workflowID is
// empty, oldest first. With both set it returns the workflow's lines from
// that agent. With tail > 0 it returns at most the newest tail lines. An ID
// with no lines yields an empty result, not an error.
func (s *Store) Read(workflowID, agentID string, tail int) ([]Line, error) {
	var name string
	switch {
	case workflowID != "":
		name = fileName("wf-", workflowID)
	case agentID != "":
		name = fileName("agent-", agentID)
	default:
		return nil, errors.New("logstore: read needs a workflow or an agent ID")
	}
	// Holding the lock while reading keeps Read from seeing a half-written
	// append or a trim's rename; reads are short sequential scans.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	f, err := os.Open(filepath.Join(s.cfg.Dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("logstore: %w", err)
	}
	defer f.Close()

	var out []Line
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			continue // a torn line from a crash; skip it
		}
		if workflowID != "" && agentID != "" && l.AgentID != agentID {
			continue
		}
		out = append(out, l)
		if tail > 0 && len(out) >= 2*tail {
			// Keep memory bounded by the tail, amortised.
			out = append(out[:0], out[len(out)-tail:]...)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("logstore: read %s: %w", name, err)
	}
	if tail > 0 && len(out) > tail {
		out = out[len(out)-tail:]
	}
	return out, nil
}

// Sync fsyncs every file written since the last sync.
func (s *Store) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, fs := range s.files {
		if fs.f != nil && fs.dirty {
			if err := fs.f.Sync(); err != nil {
				errs = append(errs, fmt.Errorf("logstore: sync %s: %w", fs.f.Name(), err))
				continue
			}
			fs.dirty = false
		}
	}
	return errors.Join(errs...)
}

// Close stops the sync timer, syncs and closes every file. Later calls to
// Append and Read return ErrClosed. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	s.mu.Unlock()
	<-s.done

	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, fs := range s.files {
		if fs.f == nil {
			continue
		}
		if fs.dirty {
			if err := fs.f.Sync(); err != nil {
				errs = append(errs, err)
			}
		}
		if err := fs.f.Close(); err != nil {
			errs = append(errs, err)
		}
		fs.f = nil
	}
	return errors.Join(errs...)
}

func (s *Store) syncLoop() {
	defer close(s.done)
	if s.cfg.SyncInterval < 0 {
		<-s.stop
		return
	}
	t := time.NewTicker(s.cfg.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if err := s.Sync(); err != nil {
				s.log.Warn("log sync failed", "err", err)
			}
		}
	}
}

// fileName maps an ID to a file name that is safe on any file system: the ID
// path-escaped ("/" becomes %2F, so no ID can leave the directory), or its
// SHA-256 if that is too long.
func fileName(prefix, id string) string {
	esc := url.PathEscape(id)
	if len(esc) > maxNameLen {
		sum := sha256.Sum256([]byte(id))
		esc = "sha256-" + hex.EncodeToString(sum[:])
	}
	return prefix + esc + ".jsonl"
}

// countLines counts the newline-terminated lines of path (0 if missing).
func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("logstore: %w", err)
	}
	defer f.Close()
	buf := make([]byte, 64*1024)
	n := 0
	for {
		k, err := f.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return 0, fmt.Errorf("logstore: count %s: %w", path, err)
		}
	}
}

// tailRaw returns the last n complete lines of path, without their newlines.
func tailRaw(path string, n int) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("logstore: %w", err)
	}
	defer f.Close()
	var out [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		out = append(out, append([]byte(nil), sc.Bytes()...))
		if len(out) >= 2*n {
			out = append(out[:0], out[len(out)-n:]...)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("logstore: read %s: %w", path, err)
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out, nil
}
