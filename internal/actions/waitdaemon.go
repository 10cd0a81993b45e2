package actions

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"
)

// waitdaemon's environment, as ghcr.io/jacobweinstock/waitdaemon reads it.
const (
	// waitImageEnv names the image waitdaemon runs once the action is
	// reported.
	waitImageEnv = "IMAGE"
	// waitSecondsEnv is how long after the report it runs it.
	waitSecondsEnv = "WAIT_SECONDS"
	// defaultWaitSeconds is upstream's default for WAIT_SECONDS.
	defaultWaitSeconds = 10
	// maxWaitSeconds bounds WAIT_SECONDS: a day is already a mistake.
	maxWaitSeconds = 24 * 60 * 60
)

// NamedImages lists the images an action names, its own first: waitdaemon
// also names the image in its IMAGE variable, which the agent pulls before
// the action is reported. The server resolves registry settings for each.
func NamedImages(image string, env map[string]string) []string {
	out := []string{image}
	if actionName(image) == NameWaitDaemon {
		if im := strings.TrimSpace(env[waitImageEnv]); im != "" && im != image {
			out = append(out, im)
		}
	}
	return out
}

// takesMachineDown are the native actions that do all their work in
// their Result's Then (they only load or check something while they run):
// as waitdaemon's IMAGE they run before the action is reported, so that a
// kexec whose kernel is missing fails the action instead of failing
// unseen after it.
var takesMachineDown = map[string]bool{NameKexec: true, NameReboot: true, NamePowerOff: true}

// waitdaemon runs ghcr.io/jacobweinstock/waitdaemon's contract: the action
// succeeds at once and, WAIT_SECONDS (default 10) after it is reported,
// IMAGE runs with the action's command, environment, volumes and pid.
//
// Upstream pulls IMAGE only after the report, so a missing image fails
// unseen; here everything that can fail before IMAGE's program starts
// happens while the action runs, and fails it naming the image: the pull
// (container path), or the whole native action when it only prepares what
// its Then does (kexec loads the kernel, reboot and poweroff do nothing).
// Then waits and runs the rest; it runs only once the server has the
// SUCCESS.
//
// Without IMAGE, or with command [reboot] or [poweroff] (a path to either
// too), the action reboots or powers off through reboot(2) after the wait:
// that is what such a container's program does to the machine, and the
// image is not pulled.
func (c *Catalog) waitdaemon(ctx context.Context, s Spec, out Output) (Result, error) {
	e := env(s.Env)
	secs, err := e.integer(waitSecondsEnv, defaultWaitSeconds, 0, maxWaitSeconds)
	if err != nil {
		return Result{}, fmt.Errorf("waitdaemon: %w", err)
	}
	wait := time.Duration(secs) * time.Second
	image := e.str(waitImageEnv)
	if len(s.Command) > 0 {
		if name := path.Base(s.Command[0]); isPower(name) {
			if image != "" {
				linef(out, "command %q: %s through reboot(2); IMAGE %s is not pulled", s.Command, name, image)
			}
			return c.waitThen(out, wait, name, c.then(powerCommands[name])), nil
		}
	}
	if image == "" {
		return Result{}, fmt.Errorf("waitdaemon: %s is required (the image to run once the action is reported), unless the command is [reboot] or [poweroff]; command %q", waitImageEnv, s.Command)
	}
	if actionName(image) == NameWaitDaemon {
		return Result{}, fmt.Errorf("waitdaemon: %s %s is waitdaemon itself", waitImageEnv, image)
	}
	inner := s
	inner.Image = image
	sel, err := c.Select(inner)
	if err != nil {
		return Result{}, fmt.Errorf("waitdaemon: %s %s: %w", waitImageEnv, image, err)
	}
	// IMAGE's run after the report is not the action's: it gets a context
	// of its own, bounded by the action's timeout as the action was.
	later := func() (context.Context, context.CancelFunc) {
		if s.Timeout > 0 {
			return context.WithTimeout(context.WithoutCancel(ctx), s.Timeout)
		}
		return context.WithCancel(context.WithoutCancel(ctx))
	}
	switch {
	case sel.Path == PathContainer:
		p, err := c.PrepareContainer(ctx, inner, out)
		if err != nil {
			return Result{}, fmt.Errorf("waitdaemon: %s: %w", waitImageEnv, err)
		}
		return c.waitThen(out, wait, image+" in a container", func() error {
			defer p.Release()
			runCtx, cancel := later()
			defer cancel()
			return p.Run(runCtx, out)
		}), nil
	case takesMachineDown[actionName(image)]:
		res, err := sel.Run(ctx, inner, out)
		if err != nil {
			return Result{}, fmt.Errorf("waitdaemon: %s %s: %w", waitImageEnv, image, err)
		}
		return c.waitThen(out, wait, image+" natively", res.Then), nil
	default:
		return c.waitThen(out, wait, image+" natively", func() error {
			runCtx, cancel := later()
			res, err := sel.Run(runCtx, inner, out)
			cancel()
			if err != nil {
				return fmt.Errorf("%s: %w", image, err)
			}
			if res.Then != nil {
				return res.Then()
			}
			return nil
		}), nil
	}
}

// waitThen is waitdaemon's Result: say what will happen, and make Then
// wait before doing it.
func (c *Catalog) waitThen(out Output, wait time.Duration, what string, then func() error) Result {
	linef(out, "%s %s", what, waitText(wait))
	return Result{Then: func() error {
		if wait > 0 {
			<-c.cfg.Clock.After(wait)
		}
		linef(out, "waited %s; running %s", wait, what)
		if then == nil {
			return nil
		}
		return then()
	}}
}

func waitText(d time.Duration) string {
	if d == 0 {
		return "as soon as the action is reported"
	}
	return d.String() + " after the action is reported"
}

func isPower(name string) bool {
	_, ok := powerCommands[name]
	return ok
}
