//go:build !linux

package container

import (
	"errors"
	"syscall"
	"time"
)

// Containers are Linux namespaces; elsewhere the package builds (so that
// the agent compiles everywhere) and New fails.

var errUnsupported = errors.New("containers need Linux")

// InitIfChild returns at once: no container's init runs here.
func InitIfChild() {}

func findCgroup2() (string, error) { return "", errUnsupported }

type cgroup struct{}

func newCgroup(string, string) (*cgroup, error) { return nil, errUnsupported }
func (c *cgroup) fd() int                       { return -1 }
func (c *cgroup) kill()                         {}
func (c *cgroup) waitEmpty(time.Duration) error { return nil }
func (c *cgroup) remove()                       {}

func sysProcAttr(bool, int) *syscall.SysProcAttr { return nil }

func exitError(err error) error { return err }
