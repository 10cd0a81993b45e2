// Package actions runs Tinkerbell's actions natively, without a container
// runtime: image2disk, archive2disk, writefile, cexec, kexec, reboot and
// poweroff, selected by Tinkerbell's image name
// (quay.io/tinkerbell/actions/image2disk:v1.0.0) or by a short name
// ("image2disk"), configured by the same environment variables.
//
// It owns what an action does to the machine: disks, filesystems, chroots,
// power. It must not talk to the server: the agent reports for it, through
// Output, and decides when a Result's Then may run.
package actions

import (
	"context"
	"errors"
	"time"
)

// Spec is one action as the server hands it to the agent.
type Spec struct {
	Name    string
	Image   string
	Command []string
	Env     map[string]string
	Volumes []string
	// Timeout bounds the run; 0 means none. The caller enforces it via ctx.
	Timeout time.Duration
}

// Progress is how far a long action (image2disk) has come.
type Progress struct {
	Bytes       int64
	TotalBytes  int64 // 0 when unknown
	BytesPerSec float64
}

// Output receives what an action does while it runs. Implementations must
// be safe for concurrent use (a command's stdout and stderr are read by two
// goroutines).
type Output interface {
	// Line is one line of output; stream is "stdout", "stderr" or "action"
	// (a line the action itself writes about what it does).
	Line(stream, line string)
	// Progress is called every few seconds by actions that move bytes.
	Progress(p Progress)
}

// Result is what a successful action leaves to do. Then, when not nil,
// takes the machine down (reboot, poweroff, kexec): the agent calls it only
// after the server has acknowledged the action's SUCCESS, so that a finished
// install is never left RUNNING.
type Result struct {
	Then func() error
}

// Runner runs one action.
type Runner func(ctx context.Context, s Spec, out Output) (Result, error)

// ErrUnknownImage is wrapped by Lookup's error for an image that has no
// native implementation.
var ErrUnknownImage = errors.New("no native action for image")
