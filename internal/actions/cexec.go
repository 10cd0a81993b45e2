package actions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// cexec limits.
const (
	// tailLines is how many of the command's last lines an ExitError
	// carries.
	tailLines = 10
	// maxLine splits longer output lines, so a command that prints
	// without newlines cannot hold unbounded memory.
	maxLine = 16 << 10
	// cexecWaitDelay is how long, once the command and its process
	// group are gone, its output may still be read from processes that
	// left the group and keep the pipes open. Real time: it bounds
	// plumbing, not the action.
	cexecWaitDelay = 2 * time.Second
	// cexecPath is the command's PATH.
	cexecPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// chrootBinds are the host directories bound into a chroot, in order.
var chrootBinds = []string{"/dev", "/proc", "/sys"}

// ExitError is a cexec command that did not exit 0.
type ExitError struct {
	// Code is the exit status; -1 when a signal ended the command.
	Code int
	// Signal is the signal that ended the command, if one did.
	Signal syscall.Signal
	// Last holds the command's last output lines (stdout and stderr
	// interleaved as they came), at most 10.
	Last []string
}

func (e *ExitError) Error() string {
	var b strings.Builder
	if e.Code >= 0 {
		fmt.Fprintf(&b, "command exited with status %d", e.Code)
	} else {
		fmt.Fprintf(&b, "command killed by signal %d (%s)", int(e.Signal), e.Signal)
	}
	if len(e.Last) == 0 {
		b.WriteString("; it printed nothing")
	} else {
		fmt.Fprintf(&b, "; its last lines:\n%s", strings.Join(e.Last, "\n"))
	}
	return b.String()
}

// cexec mounts BLOCK_DEVICE (FS_TYPE) and runs CMD_LINE — with
// DEFAULT_INTERPRETER when set, else split on spaces; the action's
// command when CMD_LINE is empty — chrooted into it with /dev, /proc and
// /sys bound when CHROOT is set, else on the host with the filesystem's
// mount point as its working directory.
func (c *Catalog) cexec(ctx context.Context, s Spec, out Output) (Result, error) {
	e := env(s.Env)
	dev, err := e.required("BLOCK_DEVICE")
	if err != nil {
		return Result{}, fmt.Errorf("cexec: %w", err)
	}
	fstype, err := e.required("FS_TYPE")
	if err != nil {
		return Result{}, fmt.Errorf("cexec: %w", err)
	}
	chroot, err := e.boolean("CHROOT", false)
	if err != nil {
		return Result{}, fmt.Errorf("cexec: %w", err)
	}
	argv, err := commandLine(e.str("CMD_LINE"), e.str("DEFAULT_INTERPRETER"), s.Command)
	if err != nil {
		return Result{}, fmt.Errorf("cexec: %w", err)
	}

	m, err := c.mountDevice(ctx, dev, fstype)
	if err != nil {
		return Result{}, fmt.Errorf("cexec: %w", err)
	}
	err = c.runIn(ctx, m, chroot, argv, s.Env, out)
	if uerr := m.unmount(); err == nil && uerr != nil {
		err = uerr
	}
	if err != nil {
		return Result{}, fmt.Errorf("cexec: %w", err)
	}
	return Result{}, nil
}

// commandLine is the argv cexec runs.
func commandLine(cmdLine, interpreter string, command []string) ([]string, error) {
	switch {
	case cmdLine != "" && interpreter != "":
		return append(strings.Fields(interpreter), cmdLine), nil
	case cmdLine != "":
		return strings.Fields(cmdLine), nil
	case len(command) > 0:
		return command, nil
	}
	return nil, errors.New("CMD_LINE is empty and the action has no command")
}

// runIn runs argv against the filesystem at m.
func (c *Catalog) runIn(ctx context.Context, m *mountStack, chroot bool, argv []string, vars map[string]string, out Output) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if chroot {
		for _, d := range chrootBinds {
			created, err := m.bind(d, d)
			if created {
				linef(out, "made %s in the chroot", d)
			}
			if err != nil {
				return err
			}
		}
		p, err := chrootLookPath(m.dir, argv[0])
		if err != nil {
			return err
		}
		// exec.CommandContext looked on the host; the chroot is what counts.
		cmd.Path, cmd.Err = p, nil
		cmd.SysProcAttr.Chroot = m.dir
		cmd.Dir = "/"
		linef(out, "running %q chrooted in %s", argv, m.dir)
	} else {
		cmd.Dir = m.dir
		linef(out, "running %q on the host in %s", argv, m.dir)
	}
	cmd.Env = commandEnv(vars)
	// Cancel kills the whole process group: a shell's children too.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }

	// Pipes of our own (not io.Writers): Wait returns when the command
	// exits, not when the last holder of its output does.
	tail := &tailBuffer{}
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		where := "on the host"
		if chroot {
			where = "in the chroot"
		}
		return fmt.Errorf("start %s %s: %w", argv[0], where, err)
	}
	var readers sync.WaitGroup
	for _, p := range []struct {
		r      *os.File
		stream string
	}{{outR, StreamStdout}, {errR, StreamStderr}} {
		readers.Add(1)
		go func() {
			defer readers.Done()
			lw := &lineWriter{stream: p.stream, out: out, tail: tail}
			io.Copy(lw, p.r)
			lw.flush()
		}()
	}
	err = cmd.Wait()
	// What the command left running in its group would keep the
	// filesystem busy: it goes with the command, as a container's
	// processes go with the container.
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(cexecWaitDelay):
		// A process outside the group (setsid) still holds the output.
		outR.Close()
		errR.Close()
		<-drained
	}
	outR.Close()
	errR.Close()

	if ctx.Err() != nil {
		return fmt.Errorf("%q stopped: %w; its last lines:\n%s", argv, context.Cause(ctx), strings.Join(tail.lines(), "\n"))
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		x := &ExitError{Code: ee.ExitCode(), Last: tail.lines()}
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			x.Signal = ws.Signal()
		}
		return x
	}
	return err
}

// commandEnv is the command's environment: a standard PATH and the
// action's variables, sorted.
func commandEnv(vars map[string]string) []string {
	env := []string{"PATH=" + cexecPath}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		if k != "PATH" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+vars[k])
	}
	if p, ok := vars["PATH"]; ok {
		env[0] = "PATH=" + p
	}
	return env
}

// tailBuffer keeps the last tailLines lines of both streams.
type tailBuffer struct {
	mu   sync.Mutex
	last []string
}

func (t *tailBuffer) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.last) == tailLines {
		t.last = append(t.last[:0], t.last[1:]...)
	}
	t.last = append(t.last, line)
}

func (t *tailBuffer) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.last...)
}

// lineWriter turns a command's output into Output lines. os/exec calls
// Write from one goroutine per stream.
type lineWriter struct {
	stream string
	out    Output
	tail   *tailBuffer
	buf    []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := strings.IndexByte(string(p), '\n')
		if i < 0 {
			room := maxLine - len(w.buf)
			if len(p) < room {
				w.buf = append(w.buf, p...)
				break
			}
			w.buf = append(w.buf, p[:room]...)
			p = p[room:]
			w.emit()
			continue
		}
		if len(w.buf)+i > maxLine {
			take := maxLine - len(w.buf)
			w.buf = append(w.buf, p[:take]...)
			p = p[take:]
			w.emit()
			continue
		}
		w.buf = append(w.buf, p[:i]...)
		p = p[i+1:]
		w.emit()
	}
	return n, nil
}

// emit sends the buffered line.
func (w *lineWriter) emit() {
	line := strings.TrimSuffix(string(w.buf), "\r")
	w.buf = w.buf[:0]
	w.out.Line(w.stream, line)
	w.tail.add(line)
}

// flush sends a last line that had no newline.
func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.emit()
	}
}

// chrootLookPath finds name in the chroot at dir like a shell's PATH
// search would from inside it; a name with a slash is used as it is.
// Paths resolve inside dir only (os.Root), so the check is Lstat-deep:
// the last element may be a symbolic link the kernel follows at exec.
func chrootLookPath(dir, name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	for _, d := range strings.Split(cexecPath, ":") {
		p := path.Join(d, name)
		if st, err := root.Lstat(strings.TrimPrefix(p, "/")); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in the chroot's %s", name, cexecPath)
}
