// Package audit owns the audit log: one record per mutating management
// call (who, which organisation, what, on which object, how it ended),
// appended to a JSON-lines file and synced before the call is answered.
//
// It stores and reads records; it does not decide which calls are audited
// or who may read them (internal/api does). It must not be used for agent
// traffic, which the workflow's own status already records — except for
// refused agent calls, which change no workflow and so are recorded
// nowhere else.
package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Record is one audited call.
type Record struct {
	Time            time.Time `json:"time"`
	Subject         string    `json:"subject"`
	Org             string    `json:"org,omitempty"`
	Procedure       string    `json:"procedure"`
	Namespace       string    `json:"namespace,omitempty"`
	Object          string    `json:"object,omitempty"`
	Outcome         string    `json:"outcome"`
	Message         string    `json:"message,omitempty"`
	ClientIP        string    `json:"client_ip,omitempty"`
	Unauthenticated bool      `json:"unauthenticated,omitempty"`
}

// Filter selects records for List.
type Filter struct {
	// Since keeps records at or after it (zero: all).
	Since time.Time
	// Org keeps records that name the namespace Org or were made by a
	// caller of organisation Org ("" : all).
	Org string
	// Subject keeps one caller's records ("" : all).
	Subject string
	// Procedure keeps records whose procedure contains it, ignoring
	// case ("" : all).
	Procedure string
	// Object keeps records whose object contains it, ignoring case
	// ("" : all).
	Object string
	// Limit keeps the newest Limit records (0: all).
	Limit int
}

func (f Filter) match(r *Record) bool {
	return (f.Since.IsZero() || !r.Time.Before(f.Since)) &&
		(f.Org == "" || r.Namespace == f.Org || r.Org == f.Org) &&
		(f.Subject == "" || r.Subject == f.Subject) &&
		containsFold(r.Procedure, f.Procedure) && containsFold(r.Object, f.Object)
}

// containsFold reports whether s contains sub, ignoring case.
func containsFold(s, sub string) bool {
	return sub == "" || strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

// ErrClosed is returned after Close.
var ErrClosed = errors.New("audit log closed")

// Log is an append-only audit log file. It is safe for concurrent use.
type Log struct {
	mu   sync.Mutex
	f    *os.File
	path string
	// Corrupt counts lines List could not parse (a record torn by a
	// crash mid-write), for the caller's metrics.
	corrupt int
}

// Open opens (creating it and its directory) the log at path. A last line
// left without its newline by a crash is closed off, so the next record
// starts on a line of its own and only the torn one is lost.
func Open(path string) (*Log, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, fi.Size()-1); err == nil && last[0] != '\n' {
			if _, err := f.Write([]byte{'\n'}); err != nil {
				f.Close()
				return nil, fmt.Errorf("audit log: %w", err)
			}
		}
	}
	return &Log{f: f, path: path}, nil
}

// Append writes r and syncs it to disk before returning.
func (l *Log) Append(r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("audit record: %w", err)
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return ErrClosed
	}
	if _, err := l.f.Write(b); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	return nil
}

// List returns the records f selects, oldest first.
func (l *Log) List(f Filter) ([]Record, error) {
	l.mu.Lock()
	if l.f == nil {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	// A second handle: reading must not move the writer's offset, and
	// appends made while we read are simply not seen.
	rf, err := os.Open(l.path)
	l.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	defer rf.Close()
	var out []Record
	corrupt := 0
	br := bufio.NewReaderSize(rf, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var r Record
			if jerr := json.Unmarshal(line, &r); jerr != nil {
				corrupt++
			} else if f.match(&r) {
				out = append(out, r)
				if f.Limit > 0 && len(out) > 2*f.Limit {
					out = append(out[:0], out[len(out)-f.Limit:]...)
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("audit log: %w", err)
		}
	}
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[len(out)-f.Limit:]
	}
	l.mu.Lock()
	l.corrupt = corrupt
	l.mu.Unlock()
	return out, nil
}

// Corrupt returns how many unreadable lines the last List skipped.
func (l *Log) Corrupt() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.corrupt
}

// Close closes the file; later calls return ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
