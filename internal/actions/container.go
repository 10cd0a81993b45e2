package actions

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/anvilproj/anvil/internal/container"
	"github.com/anvilproj/anvil/internal/oci"
)

// Values of Spec.Runtime: the template's `runtime` field of an action.
const (
	// RuntimeAuto (no field): native when Anvil implements the image,
	// else a container.
	RuntimeAuto = ""
	// RuntimeContainer runs the image in a container even when Anvil
	// implements it natively: for an image whose behaviour differs from
	// Anvil's implementation, or to run an image exactly as Tinkerbell
	// would.
	RuntimeContainer = "container"
	// RuntimeNative refuses to run the image in a container: an image
	// without a native implementation fails (the behaviour before
	// containers existed).
	RuntimeNative = "native"
)

// Path is how an action runs.
type Path string

// The two paths.
const (
	PathNative    Path = "native"
	PathContainer Path = "container"
)

// Selection is how one action runs, decided by Catalog.Select.
type Selection struct {
	// Run runs the action.
	Run Runner
	// Path is native or container.
	Path Path
	// Why says in a few words why this path, for the machine's log:
	// "native image2disk", "runtime: container", "no native oci2disk".
	Why string
}

// containerProgressInterval is how often a pull reports progress.
const containerProgressInterval = 3 * time.Second

// Select decides how s runs: natively when Anvil implements its image
// (the fast path: no pull, no container), in a container when the action
// asks for one (runtime: container) or its image has no native
// implementation. It fails for an action that cannot run at all: an
// unknown runtime, runtime: native for an image Anvil does not implement,
// or no container runtime configured (Config.Images and Containers).
func (c *Catalog) Select(s Spec) (Selection, error) {
	path, why, err := c.route(s.Image, s.Runtime)
	switch {
	case errors.Is(err, errBadRuntime):
		return Selection{}, fmt.Errorf("action %q: %w", s.Name, err)
	case err != nil:
		return Selection{}, err
	case path == PathNative:
		return Selection{Run: c.runners[actionName(s.Image)], Path: PathNative, Why: why}, nil
	case !c.containers() && s.Runtime == RuntimeContainer:
		return Selection{}, fmt.Errorf("action %q asks for runtime: container, and no container runtime is configured (the agent's image cache or cgroups are missing)", s.Name)
	case !c.containers():
		return Selection{}, fmt.Errorf("%w %q, and no container runtime is configured (the agent's image cache or cgroups are missing), so only native actions run (%s)",
			ErrUnknownImage, s.Image, strings.Join(c.Names(), ", "))
	}
	return Selection{Run: c.container, Path: PathContainer, Why: why}, nil
}

// PathOf says how an action of image with runtime runs (Select's rule),
// whether or not this Catalog can run containers: apply asks it of a
// Template's images. The error is an unknown runtime, or runtime: native
// for an image with no native action.
func (c *Catalog) PathOf(image, runtime string) (Path, error) {
	path, _, err := c.route(image, runtime)
	return path, err
}

// route is Select's rule: the path and why, in a few words.
func (c *Catalog) route(image, runtime string) (Path, string, error) {
	name := actionName(image)
	_, native := c.runners[name]
	switch runtime {
	case RuntimeAuto:
		if native {
			return PathNative, "native " + name, nil
		}
		return PathContainer, "no native " + name, nil
	case RuntimeContainer:
		if name == NameWaitDaemon {
			// Upstream's waitdaemon image works only beside Docker's
			// socket, which the boot environment has not: what the
			// runtime chooses is how its IMAGE runs.
			return PathNative, "native waitdaemon; runtime: container is for its IMAGE", nil
		}
		return PathContainer, "runtime: container", nil
	case RuntimeNative:
		if !native {
			return "", "", fmt.Errorf("%w %q, and the action asks for runtime: native (native actions: %s)", ErrUnknownImage, image, strings.Join(c.Names(), ", "))
		}
		return PathNative, "runtime: native", nil
	}
	return "", "", CheckRuntime(runtime)
}

// errBadRuntime is wrapped by CheckRuntime's error.
var errBadRuntime = errors.New("want container, native or nothing")

// CheckRuntime says whether r is a runtime Select knows: "" (auto),
// container or native.
func CheckRuntime(r string) error {
	switch r {
	case RuntimeAuto, RuntimeContainer, RuntimeNative:
		return nil
	}
	return fmt.Errorf("runtime %q: %w", r, errBadRuntime)
}

// containers reports whether the container path is configured.
func (c *Catalog) containers() bool { return c.cfg.Images != nil && c.cfg.Containers != nil }

// container is the Runner of the container path: pull, then run.
func (c *Catalog) container(ctx context.Context, s Spec, out Output) (Result, error) {
	p, err := c.PrepareContainer(ctx, s, out)
	if err != nil {
		return Result{}, err
	}
	defer p.Release()
	return Result{}, p.Run(ctx, out)
}

// PreparedContainer is an action's image pulled, verified and unpacked,
// with the process it runs decided: what is left is to Run it. Release
// returns the image to the cache.
type PreparedContainer struct {
	c     *Catalog
	spec  Spec
	image *oci.Image
	run   container.Spec
}

// PrepareContainer pulls s.Image (as s.Images says to reach it) and
// decides what runs: everything that can fail before the program starts,
// so that an action can pull first and run later (waitdaemon runs its
// IMAGE after the action is reported). Nothing is written to any disk but
// the image cache. The error names the image and the cause.
func (c *Catalog) PrepareContainer(ctx context.Context, s Spec, out Output) (*PreparedContainer, error) {
	if !c.containers() {
		return nil, fmt.Errorf("%s: no container runtime is configured", s.Image)
	}
	src, err := s.source(s.Image)
	if err != nil {
		return nil, err
	}
	volumes := make([]container.Volume, 0, len(s.Volumes))
	for _, v := range s.Volumes {
		vol, err := container.ParseVolume(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Image, err)
		}
		volumes = append(volumes, vol)
	}
	if s.Pid != "" && s.Pid != "host" {
		return nil, fmt.Errorf("%s: pid %q: want host or nothing", s.Image, s.Pid)
	}

	linef(out, "pulling %s", src)
	start := c.cfg.Clock.Now()
	var prog oci.Progress
	var written atomic.Int64 // a pull writes nothing to a disk
	stop := c.reportProgress(out, containerProgressInterval, prog.Total.Load, prog.Fetched.Load, written.Load)
	im, err := c.cfg.Images.Pull(ctx, src, &prog)
	stop()
	if err != nil {
		return nil, err
	}
	took := c.cfg.Clock.Now().Sub(start).Round(time.Millisecond)
	if im.Cached {
		linef(out, "%s is in the image cache (%s, %s unpacked); resolved in %s", s.Image, im.Digest, sizeText(im.Size), took)
	} else {
		linef(out, "pulled %s (%s): %d layers, %s fetched, %s unpacked, in %s", s.Image, im.Digest, im.Layers,
			sizeText(im.Fetched), sizeText(im.Size), took)
	}
	args := ContainerArgs(im.Config.Entrypoint, im.Config.Cmd, s.Command)
	if len(args) == 0 {
		im.Release()
		return nil, fmt.Errorf("%s: the image has no entrypoint and no command, and the action gives no command", s.Image)
	}
	return &PreparedContainer{c: c, spec: s, image: im, run: container.Spec{
		Rootfs:  im.Rootfs,
		Args:    args,
		Env:     ContainerEnv(im.Config.Env, s.Env),
		Dir:     im.Config.WorkingDir,
		User:    im.Config.User,
		Volumes: volumes,
		HostPID: s.Pid == "host",
	}}, nil
}

// Image is the pulled image.
func (p *PreparedContainer) Image() *oci.Image { return p.image }

// Args is the program and arguments the container runs.
func (p *PreparedContainer) Args() []string { return slices.Clone(p.run.Args) }

// Run runs the container and streams its output as the action's stdout
// and stderr lines. It returns when every process of the container is
// gone: nil when the program exited 0, an *ExitError (with its last lines)
// when it did not; the error names the image.
func (p *PreparedContainer) Run(ctx context.Context, out Output) error {
	s, im := p.spec, p.image
	how := ""
	if s.Pid == "host" {
		how += ", pid: host"
	}
	for _, v := range p.run.Volumes {
		how += ", " + v.String()
	}
	linef(out, "running %q in a container of %s%s", p.run.Args, s.Image, how)
	tail := &tailBuffer{}
	stdout := &lineWriter{stream: StreamStdout, out: out, tail: tail}
	stderr := &lineWriter{stream: StreamStderr, out: out, tail: tail}
	run := p.run
	run.Stdout, run.Stderr = stdout, stderr
	err := p.c.cfg.Containers.Run(ctx, run)
	stdout.flush()
	stderr.flush()
	var (
		se *container.StartError
		ee *container.ExitError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return fmt.Errorf("%s: the container did not start: %w", im.Source.Image, err)
	case errors.As(err, &ee):
		return fmt.Errorf("%s in a container: %w", im.Source.Image, &ExitError{Code: ee.Code, Signal: ee.Signal, Last: tail.lines()})
	}
	if last := tail.lines(); len(last) > 0 {
		err = fmt.Errorf("%w; its last lines:\n%s", err, strings.Join(last, "\n"))
	}
	return fmt.Errorf("%s in a container: %w", im.Source.Image, err)
}

// Release returns the image to the cache. Calling it more than once is
// harmless.
func (p *PreparedContainer) Release() { p.image.Release() }

// source is how to pull image: as the server resolved it for this
// action, else straight from its registry, anonymously.
func (s Spec) source(image string) (oci.Source, error) {
	if src, ok := s.Images[image]; ok {
		if src.Err != "" {
			return oci.Source{}, fmt.Errorf("%s: the server could not resolve its registry settings: %s", image, src.Err)
		}
		return src.Source, nil
	}
	return oci.Settings{}.Resolve(image)
}

// ImageSource is how one image the action names is pulled, as the server
// resolved it from its registry settings and the Hardware's.
type ImageSource struct {
	oci.Source
	// Err is why the server could not resolve the image (an invalid
	// reference); the action fails with it if it needs the image.
	Err string
}

// ContainerArgs is the process a container of an image runs for an
// action, as Tinkerbell's tink-agent decides it (built from
// tinkerbell/tinkerbell 9111b51c; the same in its docker, containerd and
// kubernetes runtimes): the action's command is the container's CMD, the
// arguments of the image's ENTRYPOINT — `docker run IMAGE COMMAND...`.
// Without a command, the image's ENTRYPOINT and CMD; without an
// ENTRYPOINT, the command alone is the program.
func ContainerArgs(entrypoint, cmd, command []string) []string {
	if len(command) > 0 {
		cmd = command
	}
	return append(slices.Clone(entrypoint), cmd...)
}

// ContainerEnv is a container's environment: the image's, then the
// action's variables (sorted) replacing any of the same name.
func ContainerEnv(image []string, action map[string]string) []string {
	out := make([]string, 0, len(image)+len(action))
	for _, kv := range image {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := action[k]; !ok {
			out = append(out, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(action)) {
		out = append(out, k+"="+action[k])
	}
	return out
}
