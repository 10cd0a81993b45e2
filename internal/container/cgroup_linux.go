package container

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Where cgroup v2 is found: its own mount point, or the unified hierarchy
// of a hybrid (v1 and v2) setup.
var cgroup2Candidates = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}

// findCgroup2 is the mount point of the cgroup v2 filesystem, mounted at
// /sys/fs/cgroup when there is none and that directory is sysfs's own (the
// boot environment mounts only sysfs): never over another filesystem.
func findCgroup2() (string, error) {
	for _, p := range cgroup2Candidates {
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return p, nil
		}
	}
	const p = "/sys/fs/cgroup"
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil || st.Type != unix.SYSFS_MAGIC {
		return "", fmt.Errorf("no cgroup v2 filesystem at %s (containers need one to kill their processes)", strings.Join(cgroup2Candidates, " or "))
	}
	if err := unix.Mount("cgroup2", p, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return "", fmt.Errorf("mount cgroup2 on %s: %w", p, err)
	}
	return p, nil
}

// cgroup is one container's cgroup: its processes are born in it
// (CLONE_INTO_CGROUP), and cgroup.kill ends them all.
type cgroup struct {
	dir string
	f   *os.File
}

func newCgroup(parent, name string) (*cgroup, error) {
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	f, err := os.Open(dir)
	if err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	return &cgroup{dir: dir, f: f}, nil
}

func (c *cgroup) fd() int { return int(c.f.Fd()) }

// kill sends SIGKILL to every process in the cgroup: cgroup.kill (Linux
// 5.14), else each process listed, again while new ones appear.
func (c *cgroup) kill() {
	if err := os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0); err == nil {
		return
	}
	for range 100 {
		pids := c.procs()
		if len(pids) == 0 {
			return
		}
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
}

func (c *cgroup) procs() []int {
	b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

// populated reads cgroup.events' "populated" line.
func (c *cgroup) populated() (bool, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.events"))
	if err != nil {
		return false, err
	}
	return bytes.Contains(b, []byte("populated 1")), nil
}

// waitEmpty returns when no process is left in the cgroup, or an error
// naming those left after d. The kernel signals each change of
// cgroup.events as a modification (inotify), so nothing polls.
func (c *cgroup) waitEmpty(d time.Duration) error {
	events := filepath.Join(c.dir, "cgroup.events")
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("cgroup: inotify: %w", err)
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, events, unix.IN_MODIFY); err != nil {
		return fmt.Errorf("cgroup: watch %s: %w", events, err)
	}
	deadline := time.Now().Add(d)
	buf := make([]byte, 4096)
	for {
		full, err := c.populated()
		if err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
		if !full {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("processes %v of the container are still there %s after they were killed", c.procs(), d)
		}
		fds := []unix.PollFd{{Fd: int32(in), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, int(left/time.Millisecond)+1); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("cgroup: poll: %w", err)
		}
		for {
			if n, _ := unix.Read(in, buf); n <= 0 {
				break
			}
		}
	}
}

// remove deletes the cgroup (empty by now: Run waited for it).
func (c *cgroup) remove() {
	c.f.Close()
	os.Remove(c.dir)
}

// sysProcAttr makes the container's init: new mount, UTS, IPC and (unless
// the host's is shared) PID namespaces, in its cgroup from birth, in a
// session of its own (no console signals), killed if the agent dies.
func sysProcAttr(hostPID bool, cgroupFD int) *syscall.SysProcAttr {
	flags := uintptr(unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC)
	if !hostPID {
		flags |= unix.CLONE_NEWPID
	}
	return &syscall.SysProcAttr{
		Cloneflags:  flags,
		Setsid:      true,
		Pdeathsig:   syscall.SIGKILL,
		UseCgroupFD: true,
		CgroupFD:    cgroupFD,
	}
}
