// Package container runs a program in a container made of Linux
// namespaces, as `docker run --privileged --network host` runs a Tinkerbell
// action in Hook: a root filesystem of its own (the image's, read-only,
// under a fresh writable layer), its own mount, PID (unless the action asks
// for the host's), UTS and IPC namespaces, and otherwise the machine's
// powers: the host's network, every device of /dev, /sys, all
// capabilities, no seccomp filter, root.
//
// There is no container runtime to ship: the container's init is this very
// binary, started again (/proc/self/exe) under a name its main recognises
// (InitIfChild). In the new namespaces it mounts a tmpfs, the image's root
// filesystem under an overlayfs whose upper layer is on that tmpfs, a new
// /proc, the host's /dev and /sys, /etc/resolv.conf and the action's
// volumes, moves into it (pivot_root; MS_MOVE and chroot where the root is
// the initramfs, which pivot_root refuses), and execs the program. Each
// container gets a cgroup (v2) of its own: a timeout or a cancellation
// kills every process in it (cgroup.kill), daemons that left the session
// included, and when the program exits what it left running is killed too.
// Everything it mounted lived in its mount namespace and goes with it; its
// writes to the image's files went to the tmpfs and go with it too.
//
// Why not runc or crun from Debian: the boot environment is RAM, and every
// byte of it is downloaded and unpacked at every boot. runc is 8.8 MB and
// links libseccomp and glibc (10.8 MB with them), crun 0.5 MB with 5.6 MB of
// libraries; either would also need an OCI bundle written for each action
// and a cgroup setup of its own. What the actions need of a container is
// the few system calls above, which the agent's own binary already
// carries. docs/design.md has the measurements.
//
// It owns namespaces, mounts inside them, the container's cgroup and its
// processes. It knows nothing of images (internal/oci pulls them), of
// actions or of the server.
package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults for Config's zero values.
const (
	// DefaultKillWait bounds the wait for a killed container's processes
	// to be gone (a process in uninterruptible sleep on a dead disk may
	// never go).
	DefaultKillWait = 10 * time.Second
	// DefaultPath is the PATH of a container whose image sets none, as
	// Docker's.
	DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// outputDrain bounds how long, once every process of the container is
// gone, its output may still be read: nothing can hold the pipes then,
// except a process that escaped the cgroup.
const outputDrain = 2 * time.Second

// initArg0 is the argv[0] a container's init is started with: how
// InitIfChild knows it is one.
const initArg0 = "anvil-container-init"

// The container's init reads its initConfig from fd 3 and writes why it
// failed to fd 4, which closes on exec: nothing read there means the
// program runs.
const (
	configFD = 3
	errorFD  = 4
)

// initConfig is what Run tells the container's init.
type initConfig struct {
	Rootfs   string
	Scratch  string
	Args     []string
	Env      []string
	Dir      string
	UID, GID *int
	Volumes  []Volume
	HostPID  bool
	Hostname string
	NoPivot  bool
}

// Volume is a bind mount of a host path into the container.
type Volume struct {
	// Source is the host's path. A missing one is made as a directory,
	// as Docker does for -v.
	Source string
	// Target is the path in the container.
	Target string
	// ReadOnly mounts it read-only.
	ReadOnly bool
}

// String is the volume as Docker writes it: SOURCE:TARGET[:ro].
func (v Volume) String() string {
	s := v.Source + ":" + v.Target
	if v.ReadOnly {
		s += ":ro"
	}
	return s
}

// ParseVolume reads a volume as Tinkerbell templates and `docker run -v`
// write it: HOST:CONTAINER[:OPTIONS], both paths absolute, OPTIONS a comma
// separated list of ro, rw and the propagation and SELinux options Docker
// accepts (which change nothing here: mounts are private, and there is no
// SELinux in the boot environment). A bare "/path" is HOST and CONTAINER
// both.
func ParseVolume(s string) (Volume, error) {
	parts := strings.Split(s, ":")
	var v Volume
	switch len(parts) {
	case 1:
		v.Source, v.Target = parts[0], parts[0]
	case 2:
		v.Source, v.Target = parts[0], parts[1]
	case 3:
		v.Source, v.Target = parts[0], parts[1]
		for _, o := range strings.Split(parts[2], ",") {
			switch o {
			case "ro":
				v.ReadOnly = true
			case "rw":
				v.ReadOnly = false
			case "z", "Z", "private", "rprivate", "shared", "rshared", "slave", "rslave", "nocopy":
			default:
				return Volume{}, fmt.Errorf("volume %q: unknown option %q (want ro or rw)", s, o)
			}
		}
	default:
		return Volume{}, fmt.Errorf("volume %q: want HOST:CONTAINER[:ro]", s)
	}
	for _, p := range []string{v.Source, v.Target} {
		if !filepath.IsAbs(p) || strings.IndexByte(p, 0) >= 0 {
			return Volume{}, fmt.Errorf("volume %q: %q is not an absolute path", s, p)
		}
	}
	v.Source, v.Target = filepath.Clean(v.Source), filepath.Clean(v.Target)
	return v, nil
}

// Spec is one container to run.
type Spec struct {
	// Rootfs is the image's root filesystem. The container sees it under
	// a writable layer of its own; Rootfs itself is never written.
	// Required.
	Rootfs string
	// Args is the program and its arguments. A program without a slash
	// is looked up in the PATH of Env (DefaultPath when Env has none),
	// inside the container. Required.
	Args []string
	// Env is the program's environment, KEY=VALUE. PATH (DefaultPath)
	// and HOME (/root, or / for another user) are added when missing.
	Env []string
	// Dir is the working directory in the container, made if missing. If
	// "", "/".
	Dir string
	// User is "", "UID" or "UID:GID" (numeric: an image's user names are
	// not looked up). "": root.
	User string
	// Volumes are bound into the container, in order, after /proc, /dev
	// and /sys.
	Volumes []Volume
	// HostPID shares the host's PID namespace (Tinkerbell's `pid: host`):
	// the program sees every process and /proc is the host's view.
	HostPID bool
	// Hostname, when set, is the container's host name; "" keeps the
	// host's (as Docker does with the host's network).
	Hostname string
	// Stdout and Stderr receive the program's output; nil discards it.
	// Each is written from one goroutine.
	Stdout, Stderr io.Writer
}

// Config configures a Runtime. Every field is optional.
type Config struct {
	// Self is the program started as each container's init: this binary,
	// whose main must call InitIfChild first. If "", /proc/self/exe.
	Self string
	// ScratchDir is the directory each container mounts its tmpfs on, in
	// its own mount namespace: nothing ever appears there on the host. It
	// is made if missing. If "", os.TempDir()/anvil-containers.
	ScratchDir string
	// CgroupRoot is the cgroup v2 directory containers get their cgroups
	// under (in an "anvil" child). If "", the cgroup2 filesystem mounted
	// at /sys/fs/cgroup or /sys/fs/cgroup/unified; when neither is and
	// /sys/fs/cgroup is an empty sysfs directory (the boot environment),
	// one is mounted there.
	CgroupRoot string
	// KillWait bounds the wait for a killed container's processes to be
	// gone. If 0, DefaultKillWait.
	KillWait time.Duration
	// NoPivot always uses MS_MOVE and chroot instead of pivot_root (what
	// is used anyway when the root is the initramfs). For tests of that
	// path on a machine whose root is not.
	NoPivot bool
}

// Runtime runs containers. It is safe for concurrent use.
type Runtime struct {
	cfg     Config
	cgroups string // the "anvil" cgroup containers' cgroups go in
	seq     atomic.Uint64
}

// New checks what containers need (a cgroup v2 hierarchy, the scratch
// directory) and returns a Runtime.
func New(cfg Config) (*Runtime, error) {
	if cfg.Self == "" {
		cfg.Self = "/proc/self/exe"
	}
	if cfg.ScratchDir == "" {
		cfg.ScratchDir = filepath.Join(os.TempDir(), "anvil-containers")
	}
	if cfg.KillWait <= 0 {
		cfg.KillWait = DefaultKillWait
	}
	if err := os.MkdirAll(cfg.ScratchDir, 0o700); err != nil {
		return nil, fmt.Errorf("container: scratch directory: %w", err)
	}
	root := cfg.CgroupRoot
	if root == "" {
		var err error
		if root, err = findCgroup2(); err != nil {
			return nil, fmt.Errorf("container: %w", err)
		}
	}
	cg := filepath.Join(root, "anvil")
	if err := os.Mkdir(cg, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("container: cgroup %s: %w", cg, err)
	}
	return &Runtime{cfg: cfg, cgroups: cg}, nil
}

// Cgroups is the cgroup directory the containers' cgroups are made in
// (each removed when its container is gone).
func (r *Runtime) Cgroups() string { return r.cgroups }

// StartError is a container whose program did not start: its setup (a
// mount, a volume, the working directory) or the exec of its program
// failed. Nothing of the program ran.
type StartError struct {
	// Msg is what the container's init reported.
	Msg string
}

func (e *StartError) Error() string { return e.Msg }

// ExitError is a program that did not exit 0.
type ExitError struct {
	// Code is the exit status; -1 when a signal ended the program.
	Code int
	// Signal is the signal that ended it, if one did.
	Signal syscall.Signal
}

func (e *ExitError) Error() string {
	if e.Code >= 0 {
		return fmt.Sprintf("exited with status %d", e.Code)
	}
	return fmt.Sprintf("killed by signal %d (%s)", int(e.Signal), e.Signal)
}

// Run runs s and returns once every process of the container is gone and
// its output is read: nil when the program exited 0, an *ExitError when it
// exited otherwise, a *StartError when it never started. When ctx ends
// first, every process of the container is killed and the error wraps
// ctx's cause.
func (r *Runtime) Run(ctx context.Context, s Spec) error {
	if s.Rootfs == "" || len(s.Args) == 0 || s.Args[0] == "" {
		return errors.New("container: no root filesystem or no program")
	}
	cfg, err := r.initConfig(s)
	if err != nil {
		return err
	}
	cg, err := newCgroup(r.cgroups, fmt.Sprintf("c%d-%d", os.Getpid(), r.seq.Add(1)))
	if err != nil {
		return fmt.Errorf("container: %w", err)
	}
	defer cg.remove()

	var files openFiles
	defer files.closeAll()
	cfgR, cfgW, err := files.pipe()
	if err != nil {
		return err
	}
	errR, errW, err := files.pipe()
	if err != nil {
		return err
	}
	outR, outW, err := files.pipe()
	if err != nil {
		return err
	}
	stderrR, stderrW, err := files.pipe()
	if err != nil {
		return err
	}
	cmd := &exec.Cmd{
		Path:       r.cfg.Self,
		Args:       []string{initArg0},
		Env:        []string{},
		Stdout:     outW,
		Stderr:     stderrW,
		ExtraFiles: []*os.File{cfgR, errW},
	}
	cmd.SysProcAttr = sysProcAttr(s.HostPID, cg.fd())
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("container: start its init: %w", err)
	}
	// The child has its ends; ours must close, or our reads never end.
	files.close(cfgR, errW, outW, stderrW)

	var copiers sync.WaitGroup
	for _, c := range []struct {
		r *os.File
		w io.Writer
	}{{outR, s.Stdout}, {stderrR, s.Stderr}} {
		w := c.w
		if w == nil {
			w = io.Discard
		}
		copiers.Add(1)
		go func() {
			defer copiers.Done()
			io.Copy(w, c.r)
		}()
	}

	// Whatever happens from here, the cgroup is emptied before Run
	// returns: killed on ctx's end, and after the program's exit (what
	// it left running goes with it, as a container's processes do).
	stopKiller := context.AfterFunc(ctx, func() { cg.kill() })
	json.NewEncoder(cfgW).Encode(cfg) // an init that died early shows in its error pipe and exit
	files.close(cfgW)
	startMsg, _ := io.ReadAll(errR) // until its exec (close-on-exec) or its exit
	waitErr := cmd.Wait()
	stopKiller()
	cg.kill()
	gone := cg.waitEmpty(r.cfg.KillWait)

	drained := make(chan struct{})
	go func() { copiers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(outputDrain):
		files.close(outR, stderrR)
		<-drained
	}

	switch {
	case ctx.Err() != nil:
		err = fmt.Errorf("killed: %w", context.Cause(ctx))
	case len(startMsg) > 0:
		err = &StartError{Msg: strings.TrimSpace(string(startMsg))}
	case waitErr != nil:
		err = exitError(waitErr)
	}
	if gone != nil {
		err = errors.Join(err, gone)
	}
	return err
}

// initConfig is what Run tells the container's init, checked.
func (r *Runtime) initConfig(s Spec) (*initConfig, error) {
	c := &initConfig{
		Rootfs: s.Rootfs, Scratch: r.cfg.ScratchDir, Args: s.Args, Env: withDefaults(s.Env, s.User),
		Dir: s.Dir, HostPID: s.HostPID, Hostname: s.Hostname, NoPivot: r.cfg.NoPivot, Volumes: s.Volumes,
	}
	if c.Dir == "" {
		c.Dir = "/"
	}
	if !filepath.IsAbs(c.Dir) {
		return nil, fmt.Errorf("container: working directory %q is not absolute", s.Dir)
	}
	if s.User != "" {
		uid, gid, err := parseUser(s.User)
		if err != nil {
			return nil, err
		}
		c.UID, c.GID = &uid, &gid
	}
	if st, err := os.Stat(s.Rootfs); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("container: root filesystem %s: not a directory (%v)", s.Rootfs, err)
	}
	return c, nil
}

// parseUser reads "UID" or "UID:GID" (numeric).
func parseUser(u string) (uid, gid int, err error) {
	us, gs, hasGID := strings.Cut(u, ":")
	uid, err = strconv.Atoi(us)
	if err == nil && hasGID {
		gid, err = strconv.Atoi(gs)
	} else if err == nil {
		gid = uid
	}
	if err != nil || uid < 0 || gid < 0 {
		return 0, 0, fmt.Errorf("container: user %q: want a numeric UID or UID:GID (user names are not looked up in the image)", u)
	}
	return uid, gid, nil
}

// withDefaults adds PATH and HOME to env when it has none.
func withDefaults(env []string, user string) []string {
	out := append([]string(nil), env...)
	has := func(k string) bool {
		for _, e := range env {
			if strings.HasPrefix(e, k+"=") {
				return true
			}
		}
		return false
	}
	if !has("PATH") {
		out = append(out, "PATH="+DefaultPath)
	}
	if !has("HOME") {
		home := "/root"
		if user != "" && user != "0" && !strings.HasPrefix(user, "0:") {
			home = "/"
		}
		out = append(out, "HOME="+home)
	}
	return out
}

// openFiles closes what Run opened, whatever path it returns by.
type openFiles struct{ fs []*os.File }

func (o *openFiles) pipe() (r, w *os.File, err error) {
	r, w, err = os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("container: pipe: %w", err)
	}
	o.fs = append(o.fs, r, w)
	return r, w, nil
}

func (o *openFiles) close(fs ...*os.File) {
	for _, f := range fs {
		f.Close() // a second close (closeAll) just fails
	}
}

func (o *openFiles) closeAll() { o.close(o.fs...) }
