// Package logstore keeps the log lines of Anvil's machines: the output lines
// agents stream for their actions, and each machine's record of what the
// network services (DHCP, TFTP, HTTP boot, syslog) did for it. They are
// append-only JSON-lines files under one directory, one file per workflow,
// per agent, per Hardware and per unknown machine, each bounded to a number
// of lines.
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
// corrupt older ones: a torn last line is skipped on read. The fsyncs run
// outside the store's lock, so a slow disk delays durability, not appends.
//
// # Layout
//
// A line naming a workflow goes to "wf-<escaped workflow ID>.jsonl"; a line
// naming an agent also goes to "agent-<escaped agent ID>.jsonl". A line of a
// Hardware's machine record goes to "hw-<escaped namespace/name>.jsonl"; a
// line about a machine no Hardware matches goes to "unknown-<escaped MAC or
// IP>.jsonl". The copies cost disk but make every query a sequential read of
// one file with no index to keep consistent. An ID whose escaped form is too
// long for a file name is replaced by its SHA-256.
//
// # Bounds
//
// Every file is trimmed to Config.MaxLines. Unknown machines are not chosen
// by the operator (every PXE client on the segment is one), so their files
// are also bounded in number: past Config.MaxUnknownMachines the files of
// the machines heard from least recently are deleted.
//
// # Following
//
// Follow hands a reader (the web UI's event streams) the lines appended to
// a Selection of records from then on, as Append writes them: no file is
// polled. A Subscription's queue is bounded (Config.FollowLines,
// FollowBytes); a reader that falls behind is told how many lines it
// missed, and Append never waits for it.
package logstore

import (
	"bufio"
	"bytes"
	"cmp"
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
	"slices"
	"strings"
	"sync"
	"time"
)

// Defaults for the zero values of Config.
const (
	DefaultMaxLines     = 10000
	DefaultSyncInterval = time.Second
	// DefaultMaxOpenFiles bounds the append handles kept open. Machine
	// records spread writes over one file per booting machine, so more
	// handles than agents alone need; 256 is well within the file limit
	// (Go raises the soft limit to the hard one at start).
	DefaultMaxOpenFiles = 256
	// DefaultMaxUnknownMachines bounds the files of unknown machines.
	DefaultMaxUnknownMachines = 1000
)

// File name prefixes, one per kind of record.
const (
	prefixWorkflow = "wf-"
	prefixAgent    = "agent-"
	prefixHardware = "hw-"
	prefixUnknown  = "unknown-"
	suffix         = ".jsonl"
)

// maxNameLen is the longest escaped ID used verbatim in a file name (most
// file systems allow 255 bytes; leave room for the prefix and suffix).
const maxNameLen = 200

// lastLineWindow is how far from a file's end UnknownMachines looks for its
// last line.
const lastLineWindow = 64 * 1024

// syncDirThreshold is how many dirty files make one syncfs of the whole
// file system cheaper than an fsync each.
const syncDirThreshold = 16

// ErrClosed is returned by Append and the Read methods after Close.
var ErrClosed = errors.New("log store closed")

// Line is one log line: an action's output line, or one event of a machine's
// record. It names at least one of WorkflowID, AgentID, HardwareID and
// Machine, and is kept in the file of each it names.
type Line struct {
	WorkflowID string `json:"workflowID,omitempty"` // "namespace/name"
	AgentID    string `json:"agentID,omitempty"`
	// HardwareID puts the line in the machine record of a Hardware
	// ("namespace/name").
	HardwareID string `json:"hardware,omitempty"`
	// Machine puts the line in the record of a machine no Hardware
	// matches: its MAC address (lower-case, colon-separated) or, when the
	// event carried none, its IP address.
	Machine    string    `json:"machine,omitempty"`
	TaskName   string    `json:"task,omitempty"`
	ActionName string    `json:"action,omitempty"`
	Time       time.Time `json:"time"`
	// Stream is "stdout", "stderr" or "agent" for an agent's line, and the
	// service ("dhcp", "tftp", "http", "syslog") for a machine record's.
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
	// MaxOpenFiles bounds the append handles kept open between appends;
	// past it the least recently used half is closed. If 0, uses
	// DefaultMaxOpenFiles.
	MaxOpenFiles int
	// MaxUnknownMachines bounds the number of unknown-machine records. Once
	// there are a tenth more, the least recently written are deleted down
	// to MaxUnknownMachines. If 0, uses DefaultMaxUnknownMachines.
	MaxUnknownMachines int
	// Logger receives sync errors. If nil, uses slog.Default().
	Logger *slog.Logger

	// FollowLines and FollowBytes bound what each Subscription (Follow)
	// holds that its reader has not taken; past them lines are dropped
	// and counted. If 0, use DefaultFollowLines and DefaultFollowBytes.
	FollowLines, FollowBytes int
	// MaxFollowers bounds the Subscriptions open at once. If 0, uses
	// DefaultMaxFollowers.
	MaxFollowers int
}

// Store is a directory of bounded log files. It is safe for concurrent use.
// Close it to stop the sync timer and flush.
type Store struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	files   map[string]*file    // by file name
	open    map[string]*file    // the files with an open handle
	dirty   map[string]struct{} // files written since their last fsync
	unknown map[string]uint64   // unknown-machine files → last write (tick)
	tick    uint64              // logical clock for LRU decisions
	closed  bool

	subs      map[string][]*Subscription // by file name: who follows it (follow.go)
	followers int                        // open Subscriptions

	syncMu sync.Mutex // serialises the fsync passes of Sync and Close

	stop chan struct{}
	done chan struct{}
}

// file is the state of one log file. Guarded by Store.mu.
type file struct {
	f     *appendFile // nil when not open
	lines int         // lines in the file; -1 until counted
	used  uint64      // tick of the last append, for closing idle handles
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
	if cfg.MaxUnknownMachines <= 0 {
		cfg.MaxUnknownMachines = DefaultMaxUnknownMachines
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	followBounds(&cfg)
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("logstore: %w", err)
	}
	s := &Store{
		cfg:     cfg,
		log:     cfg.Logger,
		files:   map[string]*file{},
		open:    map[string]*file{},
		dirty:   map[string]struct{}{},
		unknown: map[string]uint64{},
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if err := s.loadUnknown(); err != nil {
		return nil, err
	}
	go s.syncLoop()
	return s, nil
}

// loadUnknown finds the unknown-machine files of an earlier run and orders
// them by modification time, so the bound evicts the oldest first.
func (s *Store) loadUnknown() error {
	entries, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return fmt.Errorf("logstore: %w", err)
	}
	type named struct {
		name string
		mod  time.Time
	}
	var found []named
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(name, prefixUnknown) || !strings.HasSuffix(name, suffix) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		found = append(found, named{name, info.ModTime()})
	}
	slices.SortFunc(found, func(a, b named) int { return a.mod.Compare(b.mod) })
	for _, f := range found {
		s.tick++
		s.unknown[f.name] = s.tick
	}
	return nil
}

// entry is one line's encoding bound for one file.
type entry struct {
	name string
	data []byte
	line int // index of the line in Append's lines
}

// Append writes lines, each to the file of every ID it names. A line naming
// none is an error and nothing is written. Lines are readable when Append
// returns, durable after the next sync; the Subscriptions following their
// files (Follow) have them when Append returns.
func (s *Store) Append(lines ...Line) error {
	var entries []entry
	for i, l := range lines {
		if l.WorkflowID == "" && l.AgentID == "" && l.HardwareID == "" && l.Machine == "" {
			return fmt.Errorf("logstore: line %d names no workflow, agent, hardware or machine", i)
		}
		b, err := json.Marshal(l)
		if err != nil {
			return fmt.Errorf("logstore: encode line %d: %w", i, err)
		}
		b = append(b, '\n')
		if l.WorkflowID != "" {
			entries = append(entries, entry{fileName(prefixWorkflow, l.WorkflowID), b, i})
		}
		if l.AgentID != "" {
			entries = append(entries, entry{fileName(prefixAgent, l.AgentID), b, i})
		}
		if l.HardwareID != "" {
			entries = append(entries, entry{fileName(prefixHardware, l.HardwareID), b, i})
		}
		if l.Machine != "" {
			entries = append(entries, entry{fileName(prefixUnknown, l.Machine), b, i})
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
	newUnknown := false
	for _, name := range order {
		if err := s.appendLocked(name, byFile[name], counts[name]); err != nil {
			return err
		}
		if strings.HasPrefix(name, prefixUnknown) {
			if _, ok := s.unknown[name]; !ok {
				newUnknown = true
			}
			s.unknown[name] = s.tick
		}
	}
	if newUnknown && len(s.unknown) > s.cfg.MaxUnknownMachines+s.cfg.MaxUnknownMachines/10 {
		s.evictUnknownLocked()
	}
	if len(s.subs) > 0 {
		s.notifyLocked(lines, entries)
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
	s.dirty[name] = struct{}{}
	fs.lines += n
	if fs.lines > s.cfg.MaxLines+s.cfg.MaxLines/10 {
		return s.trimLocked(name, fs)
	}
	return nil
}

// openLocked returns the state of name with an open append handle, closing
// the least recently used half of the handles first if too many are open.
func (s *Store) openLocked(name string) (*file, error) {
	s.tick++
	fs := s.files[name]
	if fs == nil {
		fs = &file{lines: -1}
		s.files[name] = fs
	}
	fs.used = s.tick
	if fs.f != nil {
		return fs, nil
	}
	if len(s.open) >= s.cfg.MaxOpenFiles {
		s.closeIdleLocked()
	}
	path := filepath.Join(s.cfg.Dir, name)
	// Reopening a file that exists (its lines are counted) without O_CREAT
	// spares the kernel an exclusive lock on the directory.
	var f *appendFile
	var err error
	if fs.lines >= 0 {
		f, err = openAppend(path, false, 0)
	}
	if fs.lines < 0 || errors.Is(err, os.ErrNotExist) {
		f, err = openAppend(path, true, 0o640)
	}
	if err != nil {
		return nil, fmt.Errorf("logstore: %w", err)
	}
	fs.f = f
	s.open[name] = fs
	if fs.lines < 0 {
		n, torn, err := countLinesTorn(path)
		if err == nil && torn {
			// A crash's torn last line is closed off, so that the next
			// line starts on its own and only the torn one is lost.
			_, err = f.Write([]byte{'\n'})
		}
		if err != nil {
			s.closeFileLocked(name, fs)
			return nil, err
		}
		fs.lines = n
	}
	return fs, nil
}

// closeIdleLocked closes the least recently used half of the open handles.
// Their unsynced data stays marked dirty for the next sync.
func (s *Store) closeIdleLocked() {
	type opened struct {
		name string
		used uint64
	}
	all := make([]opened, 0, len(s.open))
	for name, fs := range s.open {
		all = append(all, opened{name, fs.used})
	}
	slices.SortFunc(all, func(a, b opened) int { return cmp.Compare(a.used, b.used) })
	for _, o := range all[:max(1, len(all)/2)] {
		s.closeFileLocked(o.name, s.open[o.name])
	}
}

// closeFileLocked closes fs's handle, if open. It does not fsync: the file
// stays in s.dirty until the next sync.
func (s *Store) closeFileLocked(name string, fs *file) {
	if fs.f == nil {
		return
	}
	if err := fs.f.Close(); err != nil {
		s.log.Warn("log close failed", "file", name, "err", err)
	}
	fs.f = nil
	delete(s.open, name)
}

// evictUnknownLocked deletes the least recently written unknown-machine
// files down to MaxUnknownMachines.
func (s *Store) evictUnknownLocked() {
	type written struct {
		name string
		tick uint64
	}
	all := make([]written, 0, len(s.unknown))
	for name, t := range s.unknown {
		all = append(all, written{name, t})
	}
	slices.SortFunc(all, func(a, b written) int { return cmp.Compare(a.tick, b.tick) })
	for _, w := range all[:len(all)-s.cfg.MaxUnknownMachines] {
		if fs := s.files[w.name]; fs != nil {
			s.closeFileLocked(w.name, fs)
		}
		delete(s.files, w.name)
		delete(s.dirty, w.name)
		delete(s.unknown, w.name)
		if err := os.Remove(filepath.Join(s.cfg.Dir, w.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("log eviction failed", "file", w.name, "err", err)
		}
	}
}

// trimLocked rewrites name keeping its newest MaxLines lines. The new file
// is written and synced beside the old one and renamed over it, so a crash
// leaves either the old or the new file.
func (s *Store) trimLocked(name string, fs *file) error {
	s.closeFileLocked(name, fs)
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
	delete(s.dirty, name) // the new file was synced whole
	return nil
}

// Read returns the lines of a workflow, or of an agent if workflowID is
// empty, oldest first. With both set it returns the workflow's lines from
// that agent. With tail > 0 it returns at most the newest tail lines. An ID
// with no lines yields an empty result, not an error.
func (s *Store) Read(workflowID, agentID string, tail int) ([]Line, error) {
	switch {
	case workflowID != "" && agentID != "":
		return s.readFile(fileName(prefixWorkflow, workflowID), tail, func(l *Line) bool { return l.AgentID == agentID })
	case workflowID != "":
		return s.readFile(fileName(prefixWorkflow, workflowID), tail, nil)
	case agentID != "":
		return s.readFile(fileName(prefixAgent, agentID), tail, nil)
	default:
		return nil, errors.New("logstore: read needs a workflow or an agent ID")
	}
}

// ReadHardware returns the machine record of a Hardware ("namespace/name"),
// oldest first: the lines appended with that HardwareID. Tail is as for
// Read. A Hardware with no record yields an empty result, not an error.
func (s *Store) ReadHardware(hardwareID string, tail int) ([]Line, error) {
	if hardwareID == "" {
		return nil, errors.New("logstore: read needs a hardware ID")
	}
	return s.readFile(fileName(prefixHardware, hardwareID), tail, nil)
}

// ReadMachine returns the record of an unknown machine, by the MAC or IP
// its lines were appended with as Machine, oldest first. Tail is as for
// Read. A machine with no record yields an empty result, not an error.
func (s *Store) ReadMachine(machine string, tail int) ([]Line, error) {
	if machine == "" {
		return nil, errors.New("logstore: read needs a machine")
	}
	return s.readFile(fileName(prefixUnknown, machine), tail, nil)
}

// UnknownMachines returns the newest line of each unknown machine's record,
// newest first; with limit > 0, of the limit most recent machines only.
func (s *Store) UnknownMachines(limit int) ([]Line, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	out := make([]Line, 0, len(s.unknown))
	for name := range s.unknown {
		l, ok, err := lastLine(filepath.Join(s.cfg.Dir, name))
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b Line) int {
		return cmp.Or(b.Time.Compare(a.Time), strings.Compare(a.Machine, b.Machine))
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// readFile returns the lines of one file that keep accepts (all if nil).
func (s *Store) readFile(name string, tail int, keep func(*Line) bool) ([]Line, error) {
	// Holding the lock while reading keeps Read from seeing a half-written
	// append or a trim's rename; reads are short sequential scans.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	return s.readFileLocked(name, tail, keep)
}

// readFileLocked is readFile for a caller holding s.mu.
func (s *Store) readFileLocked(name string, tail int, keep func(*Line) bool) ([]Line, error) {
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
		if keep != nil && !keep(&l) {
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

// Sync fsyncs every file written since the last sync. The fsyncs run
// without holding the store's lock, so appends and reads go on meanwhile.
func (s *Store) Sync() error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	names := s.takeDirtyLocked()
	s.mu.Unlock()
	failed, err := s.syncFiles(names)
	if len(failed) > 0 {
		s.mu.Lock()
		for _, name := range failed {
			if _, ok := s.files[name]; ok {
				s.dirty[name] = struct{}{} // try again next time
			}
		}
		s.mu.Unlock()
	}
	return err
}

func (s *Store) takeDirtyLocked() []string {
	names := make([]string, 0, len(s.dirty))
	for name := range s.dirty {
		names = append(names, name)
	}
	clear(s.dirty)
	return names
}

// syncFiles fsyncs each named file through a fresh read-only handle (the
// append handle may be closed meanwhile). A file that is gone — trimmed
// and replaced by a synced copy, or evicted — needs nothing.
func (s *Store) syncFiles(names []string) (failed []string, err error) {
	if haveSyncDir && len(names) > syncDirThreshold {
		if err := syncDir(s.cfg.Dir); err == nil {
			return nil, nil
		}
		// Fall back to one fsync per file.
	}
	var errs []error
	for _, name := range names {
		f, err := os.Open(filepath.Join(s.cfg.Dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err == nil {
			err = f.Sync()
			f.Close()
		}
		if err != nil {
			failed = append(failed, name)
			errs = append(errs, fmt.Errorf("logstore: sync %s: %w", name, err))
		}
	}
	return failed, errors.Join(errs...)
}

// Close stops the sync timer, closes every file and syncs those written
// since the last sync. Later calls to Append and the Read methods return
// ErrClosed. Close is idempotent.
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

	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	var errs []error
	for name, fs := range s.open {
		if err := fs.f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("logstore: close %s: %w", name, err))
		}
		fs.f = nil
	}
	clear(s.open)
	names := s.takeDirtyLocked()
	s.mu.Unlock()
	_, err := s.syncFiles(names)
	return errors.Join(append(errs, err)...)
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
	return prefix + esc + suffix
}

// countLinesTorn counts the newline-terminated lines of path (0 if
// missing) and reports whether it ends in a torn line (a crash's: its
// last byte is not a newline).
func countLinesTorn(path string) (int, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("logstore: %w", err)
	}
	defer f.Close()
	buf := make([]byte, 64*1024)
	n := 0
	torn := false
	for {
		k, err := f.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if k > 0 {
			torn = buf[k-1] != '\n'
		}
		if err == io.EOF {
			return n, torn, nil
		}
		if err != nil {
			return 0, false, fmt.Errorf("logstore: count %s: %w", path, err)
		}
	}
}

// lastLine decodes the last complete line of path, reading at most
// lastLineWindow bytes from its end. ok is false for a missing or empty
// file, or one whose last lines are all torn.
func lastLine(path string) (l Line, ok bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return Line{}, false, nil
	}
	if err != nil {
		return Line{}, false, fmt.Errorf("logstore: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return Line{}, false, fmt.Errorf("logstore: %w", err)
	}
	off := max(0, info.Size()-lastLineWindow)
	buf := make([]byte, info.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && err != io.EOF {
		return Line{}, false, fmt.Errorf("logstore: read %s: %w", path, err)
	}
	for len(buf) > 0 {
		end := bytes.LastIndexByte(buf, '\n')
		if end < 0 {
			break
		}
		buf = buf[:end]
		start := bytes.LastIndexByte(buf, '\n') + 1
		if json.Unmarshal(buf[start:], &l) == nil {
			return l, true, nil
		}
		buf = buf[:start]
	}
	return Line{}, false, nil
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
