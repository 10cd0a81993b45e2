package logstore

import (
	"errors"
	"os"
	"syscall"
)

// appendFile is an append-only handle on a raw file descriptor. os.File
// costs three extra system calls per open (non-blocking mode, the poller
// probe) — the bulk of writing machine records during a boot storm, where
// thousands of machines' files are opened each second.
type appendFile struct{ fd int }

// openAppend opens path for appending, creating it (mode perm) if create.
func openAppend(path string, create bool, perm uint32) (*appendFile, error) {
	flags := syscall.O_WRONLY | syscall.O_APPEND | syscall.O_CLOEXEC
	if create {
		flags |= syscall.O_CREAT
	}
	for {
		fd, err := syscall.Open(path, flags, perm)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return &appendFile{fd: fd}, nil
	}
}

// Write writes all of b (a short write is retried, as os.File does).
func (f *appendFile) Write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := syscall.Write(f.fd, b[n:])
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

// Close closes the descriptor.
func (f *appendFile) Close() error { return syscall.Close(f.fd) }
