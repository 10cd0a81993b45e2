package actions

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Unmounting: a busy filesystem (a process that just exited still
// closing files) is retried unmountTries times, unmountPause apart, then
// detached (MNT_DETACH) so the action never leaves a mount behind.
const (
	unmountTries = 5
	unmountPause = 100 * time.Millisecond
	// devicePoll is how often a missing partition node is looked for.
	devicePoll = 50 * time.Millisecond
)

// mountStack is a filesystem mounted at a fresh temporary directory and
// whatever is mounted inside it; unmount takes everything down in
// reverse order.
type mountStack struct {
	c      *Catalog
	dir    string
	points []mountPoint
}

type mountPoint struct {
	target string
	detach bool // recursive binds: their submounts go with MNT_DETACH
}

// mountDevice mounts device (a partition) with fstype at a new directory
// under Config.TempDir. It waits up to Config.DeviceWait for the device
// node to appear.
func (c *Catalog) mountDevice(ctx context.Context, device, fstype string) (*mountStack, error) {
	if err := c.waitDevice(ctx, device); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(c.cfg.TempDir, "anvil-mnt-")
	if err != nil {
		return nil, err
	}
	if err := c.cfg.Mount(device, dir, fstype, 0, ""); err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("mount %s (%s) at %s: %w", device, fstype, dir, err)
	}
	return &mountStack{c: c, dir: dir, points: []mountPoint{{target: dir}}}, nil
}

// waitDevice returns once path exists, or an error after DeviceWait.
func (c *Catalog) waitDevice(ctx context.Context, path string) error {
	deadline := c.cfg.Clock.Now().Add(c.cfg.DeviceWait)
	for {
		_, err := os.Stat(path)
		if err == nil || !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if c.cfg.DeviceWait < 0 || !c.cfg.Clock.Now().Before(deadline) {
			return fmt.Errorf("%s does not exist (waited %s for it to appear)", path, max(c.cfg.DeviceWait, 0))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", path, context.Cause(ctx))
		case <-c.cfg.Clock.After(devicePoll):
		}
	}
}

// bind mounts the host's src (recursively) at rel inside the stack's
// filesystem, creating the directory if it is missing.
func (m *mountStack) bind(src, rel string) (created bool, err error) {
	target := filepath.Join(m.dir, rel)
	switch st, err := os.Lstat(target); {
	case errors.Is(err, os.ErrNotExist):
		if err := os.Mkdir(target, 0o755); err != nil {
			return false, err
		}
		created = true
	case err != nil:
		return false, err
	case !st.IsDir():
		// mount(2) follows a symbolic link on the host: a filesystem
		// whose /dev leads elsewhere must not get the host's /dev
		// mounted there.
		kind := "file"
		if st.Mode()&os.ModeSymlink != 0 {
			kind = "symbolic link"
		}
		return false, fmt.Errorf("%s in the filesystem is a %s, not a directory: refusing to bind %s over it", rel, kind, src)
	}
	if err := m.c.cfg.Mount(src, target, "", mountBind|mountRecursive, ""); err != nil {
		return created, fmt.Errorf("bind %s at %s: %w", src, target, err)
	}
	m.points = append(m.points, mountPoint{target: target, detach: true})
	return created, nil
}

// unmount takes down every mount of the stack, last first, and removes
// the directory. It returns the first error but always tries them all.
func (m *mountStack) unmount() error {
	var first error
	for i := len(m.points) - 1; i >= 0; i-- {
		if err := m.c.unmountOne(m.points[i]); err != nil && first == nil {
			first = err
		}
	}
	m.points = nil
	if first == nil {
		if err := os.Remove(m.dir); err != nil {
			first = err
		}
	}
	return first
}

func (c *Catalog) unmountOne(p mountPoint) error {
	if p.detach {
		if err := c.cfg.Unmount(p.target, unmountDetach); err != nil {
			return fmt.Errorf("unmount %s: %w", p.target, err)
		}
		return nil
	}
	var err error
	for range unmountTries {
		if err = c.cfg.Unmount(p.target, 0); !errors.Is(err, errBusy) {
			break
		}
		<-c.cfg.Clock.After(unmountPause)
	}
	if errors.Is(err, errBusy) {
		if derr := c.cfg.Unmount(p.target, unmountDetach); derr == nil {
			return fmt.Errorf("unmount %s: %w (detached instead; writes may not be flushed)", p.target, err)
		}
	}
	if err != nil {
		return fmt.Errorf("unmount %s: %w", p.target, err)
	}
	return nil
}
