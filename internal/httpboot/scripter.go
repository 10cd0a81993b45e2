package httpboot

import (
	"context"
	"errors"
	"net/netip"

	"github.com/anvilproj/anvil/internal/macaddr"
)

// ScriptRequest is what the handler knows about a script request.
type ScriptRequest struct {
	// MAC is from the URL path (/ipxe/script/<mac>/auto.ipxe); the zero
	// MAC when the client asked by source IP only (/ipxe/script/auto.ipxe).
	MAC macaddr.MAC
	// Source is the client's IP address (the TCP peer).
	Source netip.Addr
	// Platform and BuildArch are iPXE's ${platform} and ${buildarch} when
	// the client passed them as query parameters, else empty.
	Platform, BuildArch string
}

// Script is the boot policy's answer.
type Script struct {
	// Body is the iPXE script, starting with "#!ipxe".
	Body string
	// Reason is one line saying why this script (for the log and the
	// machine's record), e.g. "workflow default/install is PENDING".
	Reason string
}

// ErrNoScript is wrapped by a Scripter's error when it has no script for
// the request (unknown machine): the handler answers 404 with the error's
// text as the reason.
var ErrNoScript = errors.New("no script for this machine")

// Scripter decides a machine's iPXE script. The boot policy implements it.
// It must be safe for concurrent use.
type Scripter interface {
	Script(ctx context.Context, r ScriptRequest) (*Script, error)
}

// ScripterFunc adapts a function to a Scripter.
type ScripterFunc func(ctx context.Context, r ScriptRequest) (*Script, error)

// Script calls f(ctx, r).
func (f ScripterFunc) Script(ctx context.Context, r ScriptRequest) (*Script, error) { return f(ctx, r) }
