package container

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Host files bound into every container when the host has them, as
// Docker's host network does: the name servers the agent got by DHCP.
var hostFiles = []string{"/etc/resolv.conf", "/etc/hosts"}

// InitIfChild is a container's init when this process was started as one
// by Run: it sets the container up and execs its program, and never
// returns. Otherwise it returns at once. A binary that uses Runtime must
// call it first thing in main (and a test binary in TestMain), before
// anything else that looks at the process: a container's init is PID 1 of
// its namespace.
func InitIfChild() {
	if filepath.Base(os.Args[0]) != initArg0 {
		return
	}
	errPipe := os.NewFile(errorFD, "error pipe")
	unix.CloseOnExec(errorFD)
	err := initContainer()
	fmt.Fprint(errPipe, err.Error())
	os.Exit(127)
}

// initContainer sets up the container and execs its program; it returns
// only an error.
func initContainer() error {
	var c initConfig
	f := os.NewFile(configFD, "config")
	if err := json.NewDecoder(f).Decode(&c); err != nil {
		return fmt.Errorf("container init: read its configuration: %w", err)
	}
	f.Close()
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the container's mounts private: %w", err)
	}
	root, err := mountRoot(c.Rootfs, c.Scratch)
	if err != nil {
		return err
	}
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the container's root: %w", err)
	}
	defer unix.Close(rootFD)
	in := inRoot{fd: rootFD}

	if err := in.mount("/proc", true, func(t string) error {
		return unix.Mount("proc", t, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	}); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	for _, d := range []string{"/dev", "/sys"} {
		if err := in.bind(Volume{Source: d, Target: d}, true); err != nil {
			return fmt.Errorf("bind the host's %s: %w", d, err)
		}
	}
	for _, p := range hostFiles {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			if err := in.bind(Volume{Source: p, Target: p}, false); err != nil {
				return fmt.Errorf("bind the host's %s: %w", p, err)
			}
		}
	}
	for _, v := range c.Volumes {
		st, err := os.Stat(v.Source)
		if errors.Is(err, os.ErrNotExist) {
			// As `docker run -v` does: a missing host path is a new
			// directory.
			if err = os.MkdirAll(v.Source, 0o755); err == nil {
				st, err = os.Stat(v.Source)
			}
		}
		if err != nil {
			return fmt.Errorf("volume %s: %w", v, err)
		}
		if err := in.bind(v, st.IsDir()); err != nil {
			return fmt.Errorf("volume %s: %w", v, err)
		}
	}
	if c.Hostname != "" {
		if err := unix.Sethostname([]byte(c.Hostname)); err != nil {
			return fmt.Errorf("set the host name: %w", err)
		}
	}
	if err := switchRoot(root, c.NoPivot); err != nil {
		return err
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("working directory %s: %w", c.Dir, err)
	}
	if err := unix.Chdir(c.Dir); err != nil {
		return fmt.Errorf("working directory %s: %w", c.Dir, err)
	}
	if c.UID != nil {
		if err := syscall.Setgroups(nil); err != nil {
			return fmt.Errorf("user %d:%d: %w", *c.UID, *c.GID, err)
		}
		if err := syscall.Setgid(*c.GID); err != nil {
			return fmt.Errorf("user %d:%d: %w", *c.UID, *c.GID, err)
		}
		if err := syscall.Setuid(*c.UID); err != nil {
			return fmt.Errorf("user %d:%d: %w", *c.UID, *c.GID, err)
		}
	}
	prog, err := lookPath(c.Args[0], c.Env)
	if err != nil {
		return err
	}
	err = unix.Exec(prog, c.Args, c.Env)
	return fmt.Errorf("exec %s: %w%s", prog, err, execHint(err))
}

// mountRoot mounts a tmpfs on scratch and the image's root filesystem
// under an overlayfs whose writable layer is on that tmpfs, and returns
// where: a fresh, writable root that leaves the image untouched and
// vanishes with the mount namespace.
func mountRoot(rootfs, scratch string) (string, error) {
	if err := unix.Mount("tmpfs", scratch, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return "", fmt.Errorf("mount the container's tmpfs on %s: %w", scratch, err)
	}
	upper, work, root := filepath.Join(scratch, "upper"), filepath.Join(scratch, "work"), filepath.Join(scratch, "root")
	for _, d := range []string{upper, work, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return "", err
		}
	}
	opts := "lowerdir=" + overlayEscape(rootfs) + ",upperdir=" + overlayEscape(upper) + ",workdir=" + overlayEscape(work)
	if err := unix.Mount("overlay", root, "overlay", 0, opts); err != nil {
		return "", fmt.Errorf("mount the image's root filesystem %s (overlayfs): %w", rootfs, err)
	}
	return root, nil
}

// overlayEscape escapes the characters overlayfs's options treat
// specially in a path.
func overlayEscape(p string) string {
	return strings.NewReplacer(`\`, `\\`, `,`, `\,`, `:`, `\:`).Replace(p)
}

// switchRoot makes root the container's "/": pivot_root, and the old root
// detached; where pivot_root is refused (the root is the initramfs, which
// cannot be unmounted) the new root is moved over "/" and chrooted into,
// as switch_root and runc's --no-pivot do.
func switchRoot(root string, noPivot bool) error {
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("enter the container's root: %w", err)
	}
	if !noPivot {
		err := unix.PivotRoot(".", ".")
		if err == nil {
			if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
				return fmt.Errorf("detach the host's root: %w", err)
			}
			return unix.Chdir("/")
		}
		if !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("pivot_root: %w", err)
		}
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the container's root over /: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	return unix.Chdir("/")
}

// lookPath finds the program as a container's runtime does: a name with a
// slash as it is, else the first match in the environment's PATH, inside
// the container (the root is switched). A file without an execute bit is
// returned when nothing better is found, so exec says what is wrong.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	pathVar := DefaultPath
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			pathVar = v
		}
	}
	var notExec string
	for _, dir := range filepath.SplitList(pathVar) {
		if dir == "" {
			dir = "."
		}
		p := path.Join(dir, name)
		st, err := os.Stat(p)
		if err != nil || st.IsDir() {
			continue
		}
		if st.Mode()&0o111 != 0 {
			return p, nil
		}
		if notExec == "" {
			notExec = p
		}
	}
	if notExec != "" {
		return notExec, nil
	}
	return "", fmt.Errorf("exec %s: not found in the image's PATH (%s)", name, pathVar)
}

// execHint says what an exec error usually means for an image.
func execHint(err error) string {
	switch {
	case errors.Is(err, unix.EACCES):
		return " (the entrypoint is not executable: no execute permission, or not a regular file)"
	case errors.Is(err, unix.ENOENT):
		return " (not in the image, or its interpreter or dynamic loader is missing from it)"
	case errors.Is(err, unix.ENOEXEC):
		return " (not a program this machine runs: another architecture, or a script without #!)"
	}
	return ""
}

// inRoot makes and mounts paths inside the container's root as if it were
// "/": a symbolic link in the image (even an absolute one, /var/run ->
// /run) resolves inside it, never onto the host (openat2 RESOLVE_IN_ROOT).
type inRoot struct{ fd int }

func (r inRoot) how(flags uint64) *unix.OpenHow {
	return &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
}

// open opens p inside the root as an O_PATH descriptor.
func (r inRoot) open(p string) (int, error) {
	return unix.Openat2(r.fd, "."+path.Clean("/"+p), r.how(unix.O_PATH))
}

// make makes p inside the root if it is missing: a directory (and its
// parents), or an empty file.
func (r inRoot) make(p string, dir bool) error {
	p = path.Clean("/" + p)
	if fd, err := r.open(p); err == nil {
		unix.Close(fd)
		return nil
	}
	parent := path.Dir(p)
	if parent != p {
		if err := r.make(parent, true); err != nil {
			return err
		}
	}
	pfd, err := r.open(parent)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if dir {
		if err := unix.Mkdirat(pfd, path.Base(p), 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("mkdir %s in the container: %w", p, err)
		}
		return nil
	}
	fd, err := unix.Openat(pfd, path.Base(p), unix.O_CREAT|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("create %s in the container: %w", p, err)
	}
	return unix.Close(fd)
}

// mount makes target and calls do with a path that names it (through
// /proc/self/fd, so nothing resolves it again outside the root).
func (r inRoot) mount(target string, dir bool, do func(string) error) error {
	if err := r.make(target, dir); err != nil {
		return err
	}
	fd, err := r.open(target)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return do("/proc/self/fd/" + strconv.Itoa(fd))
}

// bind binds the host's v.Source (recursively) at v.Target inside the
// root, read-only when v says so.
func (r inRoot) bind(v Volume, dir bool) error {
	if err := r.mount(v.Target, dir, func(t string) error {
		return unix.Mount(v.Source, t, "", unix.MS_BIND|unix.MS_REC, "")
	}); err != nil {
		return err
	}
	if !v.ReadOnly {
		return nil
	}
	// Opened again: the descriptor before the bind names what it covers.
	return r.mount(v.Target, dir, func(t string) error {
		return unix.Mount("", t, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, "")
	})
}

// exitError is cmd.Wait's error as an *ExitError.
func exitError(err error) error {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	x := &ExitError{Code: ee.ExitCode()}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		x.Code, x.Signal = -1, ws.Signal()
	}
	return x
}
