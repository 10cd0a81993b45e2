//go:build !linux

package kmod

import "errors"

// SyscallLoader loads modules into the running kernel; only on Linux.
type SyscallLoader struct {
	// Params are the module parameters passed to every module.
	Params string
}

// Load fails: modules are a Linux thing.
func (SyscallLoader) Load(string) error { return errors.New("kernel modules: only on Linux") }

// RunningDir fails: modules are a Linux thing.
func RunningDir() (string, error) { return "", errors.New("kernel modules: only on Linux") }
