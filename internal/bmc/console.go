package bmc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/transport"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/anvilproj/anvil/internal/model"
)

// ConsoleProvider is a Provider that can attach to a machine's serial
// console through its BMC (IPMI's Serial over LAN).
type ConsoleProvider interface {
	Provider
	// Console attaches to the serial console of the BMC at c: what the
	// machine writes goes to out, what in yields is typed on the machine's
	// serial port. It returns when ctx ends, in ends (io.EOF: nil) or the
	// BMC fails; the console and the session are released either way.
	Console(ctx context.Context, c Conn, in io.Reader, out io.Writer) error
}

// ErrConsoleLost is wrapped by Console's error when the console was
// attached and then lost (the BMC stopped answering mid-stream), as
// opposed to one that could not be attached at all: a caller may attach
// again.
var ErrConsoleLost = errors.New("console lost")

// lost marks err as ErrConsoleLost without changing its message.
type lost struct{ error }

func (lost) Is(target error) bool { return target == ErrConsoleLost }

// solInstance is the SOL payload instance Anvil activates: instance 1,
// the console itself (OpenIPMI's simulator keeps a history buffer on 2).
const solInstance = 1

// solPollInterval is how often an idle SOL session asks the BMC for output:
// the delay a console line can have, and one small packet per interval.
const solPollInterval = 50 * time.Millisecond

// Console implements ConsoleProvider with IPMI 2.0 Serial over LAN (IPMI
// 2.0 section 15): it opens an RMCP+ session, activates the SOL payload
// with encryption and authentication, streams until the end, then
// deactivates the payload and closes the session on a fresh context (a
// payload left active blocks the next attach until the BMC times it out).
func (p IPMI) Console(ctx context.Context, c Conn, in io.Reader, out io.Writer) error {
	s, err := openMeasured(ctx, p, c)
	if err != nil {
		return err
	}
	cl := s.(measured).s.(*ipmiSession).c
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		_ = s.Close(cctx)
	}()
	activate := &transport.ActivatePayloadRequest{PayloadType: types.PayloadTypeSOL, PayloadInstance: solInstance,
		EnableEncryption: true, EnableAuthentication: true}
	err = observe(p.Name(), opActivateSOL, func() error {
		_, err := cl.ActivatePayload(ctx, activate)
		return err
	})
	if err != nil {
		return explainSOL(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		_, _ = cl.DeactivatePayload(cctx, &transport.DeactivatePayloadRequest{PayloadType: types.PayloadTypeSOL, PayloadInstance: solInstance})
	}()
	err = cl.SOLStream(ctx, in, out, &client.SOLStreamOptions{PollInterval: solPollInterval})
	if err != nil && ctx.Err() == nil {
		return lost{explainIPMI(fmt.Errorf("serial over LAN: %w", err))}
	}
	return nil
}

// explainSOL says what a refused activation means (IPMI 2.0 table 24-2,
// Activate Payload completion codes).
func explainSOL(err error) error {
	var cc *types.ResponseError
	if errors.As(err, &cc) {
		switch uint8(cc.CompletionCode()) {
		case 0x80:
			return fmt.Errorf("activate serial over LAN: %w (the console is already attached elsewhere, e.g. an `ipmitool sol activate`: end that session or run `ipmitool sol deactivate`)", err)
		case 0x81:
			return fmt.Errorf("activate serial over LAN: %w (SOL is disabled on this BMC: enable it with `ipmitool sol set enabled true`)", err)
		case 0x82:
			return fmt.Errorf("activate serial over LAN: %w (the BMC has no free SOL session)", err)
		case 0x83:
			return fmt.Errorf("activate serial over LAN: %w (the BMC requires settings Anvil did not ask for: encryption and authentication are on)", err)
		}
	}
	if strings.Contains(err.Error(), "payload") && strings.Contains(err.Error(), "active") {
		return fmt.Errorf("activate serial over LAN: %w (the console is already attached elsewhere)", err)
	}
	return explainIPMI(fmt.Errorf("activate serial over LAN: %w", err))
}

// Console attaches in and out to the serial console of Machine m, reached
// as Jobs and polls reach it (its preferred provider, its Secret), for as
// long as ctx lasts and in does not end. It takes none of the per-BMC
// locks: a console is a second, long session beside the short ones of
// Jobs and polls, which must not wait for it. Its error says which
// Machine and provider and why, the password scrubbed.
func (e *Executor) Console(ctx context.Context, m *model.Machine, in io.Reader, out io.Writer) error {
	get := func(kind, ns, name string) (model.Object, error) { return e.cfg.Store.Get(ctx, kind, ns, name) }
	prov, conn, err := e.connect(m, get, "")
	scrub := func(err error) error {
		if conn.Password == "" {
			return err
		}
		return errors.New(strings.ReplaceAll(err.Error(), conn.Password, "[redacted]"))
	}
	if err != nil {
		return scrub(err)
	}
	cp, ok := prov.(ConsoleProvider)
	if !ok {
		return fmt.Errorf("machine %s/%s: provider %s: serial console: %w (Anvil attaches consoles through IPMI Serial over LAN: put ipmitool first in providerOptions.preferredOrder)", m.Namespace, m.Name, prov.Name(), ErrUnsupported)
	}
	if err := cp.Console(ctx, conn, in, out); err != nil {
		msg := scrub(fmt.Errorf("machine %s/%s: provider %s: %w", m.Namespace, m.Name, prov.Name(), err))
		if errors.Is(err, ErrConsoleLost) {
			return lost{msg} // scrubbing made a new error: keep the mark
		}
		return msg
	}
	return nil
}
