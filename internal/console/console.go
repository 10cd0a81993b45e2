// Package console owns the serial-console service: an SSH server on which
// `ssh -p 2222 node1@anvil` attaches an operator to machine node1's serial
// console through its BMC (IPMI Serial over LAN), as Tinkerbell's
// SecondStar does. Logins are authenticated by the public keys of the
// machine's Hardware (spec.metadata.instance.ssh_keys); everything the
// console shows also goes to the machine's record (`anvil logs
// hardware/node1`), with who attached and when.
//
// A machine's console is one SOL session however many operators watch it:
// the first login attaches it, later ones share it (each sees the output
// from when it joined, and all may type), the last one to leave releases
// it. A BMC allows one SOL session at a time, so this is the only way two
// people can look at once.
//
// It reads Hardware and Machines from the store and reaches BMCs through
// an injected Attach (bmc.Executor.Console); it must not import the API,
// the CLI or the workflow engine, and it never writes to the store.
package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// DefaultPort is the console's SSH port (SecondStar's).
const DefaultPort = 2222

// Defaults of Config.
const (
	DefaultMaxConns         = 64
	DefaultHandshakeTimeout = 10 * time.Second
	// A BMC under load or rebooting drops a SOL session now and then;
	// operators watching an install should not have to notice.
	DefaultReattachFor  = 2 * time.Minute
	DefaultReattachWait = 500 * time.Millisecond
)

// lookupTimeout bounds reading a login's Hardware and Machine.
const lookupTimeout = 5 * time.Second

// Config configures a Server.
type Config struct {
	// Store holds the Hardware and Machines. Required.
	Store store.Store
	// HostKey is the server's SSH host key (HostKey). Required.
	HostKey ssh.Signer
	// Attach connects in and out to Machine m's serial console until ctx
	// ends or in does (bmc.Executor.Console). Required. An error wrapping
	// ErrLost says the console was attached and then lost: it is attached
	// again while anybody watches (see ReattachFor).
	Attach func(ctx context.Context, m *model.Machine, in io.Reader, out io.Writer) error
	// Events receives the console's output, line by line, and its logins,
	// for the machine's record. If nil, none.
	Events machinelog.Sink
	// Logger receives logins, refusals and consoles that fail. If nil,
	// uses slog.Default().
	Logger *slog.Logger
	// MaxConns bounds the SSH connections at once; more are closed at
	// once. If 0, uses DefaultMaxConns.
	MaxConns int
	// HandshakeTimeout bounds a connection's SSH handshake and login. If
	// 0, uses DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// ReattachFor is how long a lost console is tried again (each try
	// after a wait doubling from ReattachWait to 8 s) before its sessions
	// are told it ended; a console that stays attached that long again
	// starts afresh. If 0, uses DefaultReattachFor.
	ReattachFor time.Duration
	// ReattachWait is the first wait; if 0, uses DefaultReattachWait.
	ReattachWait time.Duration
	// Clock paces reattaching. If nil, clock.Real.
	Clock clock.Clock
}

// ErrLost marks an Attach error of a console that was attached and then
// lost, which is attached again, as opposed to one that could not be
// attached (a wrong password), which ends its sessions at once.
var ErrLost = errors.New("console lost")

// Server is the console's SSH server. Serve is called once.
type Server struct {
	cfg   Config
	log   *slog.Logger
	slots chan struct{}

	mu    sync.Mutex
	hubs  map[string]*hub // Hardware key -> its console
	conns map[net.Conn]struct{}
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReattachFor <= 0 {
		cfg.ReattachFor = DefaultReattachFor
	}
	if cfg.ReattachWait <= 0 {
		cfg.ReattachWait = DefaultReattachWait
	}
	cfg.Clock = clock.Or(cfg.Clock)
	return &Server{cfg: cfg, log: cfg.Logger, slots: make(chan struct{}, cfg.MaxConns),
		hubs: map[string]*hub{}, conns: map[net.Conn]struct{}{}}
}

// Serve accepts connections on ln until ctx ends, then closes ln and
// every connection (detaching their consoles) and returns nil once they
// are gone; or returns the error that ended accepting.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for c := range s.conns {
			c.Close()
		}
	})
	defer stop()
	defer wg.Wait()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("console: %w", err)
		}
		select {
		case s.slots <- struct{}{}:
		default:
			connsRefused.Inc()
			s.log.Warn("console: too many connections, closing one", "remote", nc.RemoteAddr().String(), "max", s.cfg.MaxConns)
			nc.Close()
			continue
		}
		s.mu.Lock()
		if ctx.Err() != nil {
			s.mu.Unlock()
			nc.Close()
			<-s.slots
			continue
		}
		s.conns[nc] = struct{}{}
		s.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-s.slots }()
			defer func() {
				s.mu.Lock()
				delete(s.conns, nc)
				s.mu.Unlock()
				nc.Close()
			}()
			s.serveConn(ctx, nc)
		}()
	}
}

// Extension keys of a login's ssh.Permissions.
const (
	extHardware    = "anvil-hardware" // "namespace/name"
	extFingerprint = "anvil-key"      // SHA256:… of the key that logged in
)

// login is what a connection's authentication attempts learnt, for the
// refusal's log line and record.
type login struct {
	user  string
	keys  int
	known *model.Hardware // a Hardware the user named, if any
}

func (s *Server) serveConn(ctx context.Context, nc net.Conn) {
	_ = nc.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	var l login
	conf := &ssh.ServerConfig{
		ServerVersion: "SSH-2.0-anvil-console",
		PublicKeyCallback: func(md ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			return s.authorize(ctx, md, key, &l)
		},
	}
	conf.AddHostKey(s.cfg.HostKey)
	sc, chans, reqs, err := ssh.NewServerConn(nc, conf)
	if err != nil {
		s.refused(nc, &l, err)
		return
	}
	defer sc.Close()
	_ = nc.SetDeadline(time.Time{})
	logins.WithLabelValues("ok").Inc()
	go ssh.DiscardRequests(reqs)
	var wg sync.WaitGroup
	defer wg.Wait()
	for nch := range chans {
		if nch.ChannelType() != "session" {
			_ = nch.Reject(ssh.UnknownChannelType, "the console serves session channels only")
			continue
		}
		ch, creqs, err := nch.Accept()
		if err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.session(ctx, sc, ch, creqs)
		}()
	}
}

// refused logs a failed handshake; a login to a known machine is put in
// its record too, so an operator whose key is refused can see why.
func (s *Server) refused(nc net.Conn, l *login, err error) {
	if l.user == "" {
		s.log.Debug("console: ssh handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
		return
	}
	logins.WithLabelValues("refused").Inc()
	why := fmt.Sprintf("none of the %d key(s) offered is in its spec.metadata.instance.ssh_keys", l.keys)
	if l.known == nil {
		why = "no Hardware has that name"
	}
	s.log.Warn("console: ssh login refused", "user", l.user, "remote", nc.RemoteAddr().String(), "why", why)
	if l.known != nil {
		s.record(l.known, outcomeRefused, fmt.Sprintf("ssh login as %q from %s refused: %s", l.user, nc.RemoteAddr(), why))
	}
}

// authorize accepts key for the login user when it is one of the
// spec.metadata.instance.ssh_keys of the Hardware the user names:
// "namespace/name", or "name" when that key belongs to exactly one
// Hardware of that name.
func (s *Server) authorize(ctx context.Context, md ssh.ConnMetadata, key ssh.PublicKey, l *login) (*ssh.Permissions, error) {
	l.user = md.User()
	l.keys++
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	candidates, err := s.hardwareNamed(ctx, md.User())
	if err != nil {
		s.log.Warn("console: cannot read the Hardware of a login", "user", md.User(), "err", err)
		return nil, errors.New("cannot read Hardware")
	}
	want := key.Marshal()
	var match []*model.Hardware
	for _, h := range candidates {
		if l.known == nil {
			l.known = h
		}
		if hasKey(h, want) {
			match = append(match, h)
		}
	}
	if len(match) != 1 {
		return nil, errors.New("key refused")
	}
	h := match[0]
	return &ssh.Permissions{Extensions: map[string]string{
		extHardware:    h.Namespace + "/" + h.Name,
		extFingerprint: ssh.FingerprintSHA256(key),
	}}, nil
}

// hardwareNamed returns the Hardware the login user names.
func (s *Server) hardwareNamed(ctx context.Context, user string) ([]*model.Hardware, error) {
	if ns, name, ok := strings.Cut(user, "/"); ok {
		o, err := s.cfg.Store.Get(ctx, model.KindHardware, ns, name)
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return []*model.Hardware{o.(*model.Hardware)}, nil
	}
	objs, _, err := s.cfg.Store.List(ctx, model.KindHardware, store.ListOptions{
		Fields: []store.FieldRequirement{{Field: "metadata.name", Value: user}}})
	if err != nil {
		return nil, err
	}
	out := make([]*model.Hardware, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*model.Hardware))
	}
	return out, nil
}

// hasKey reports whether h's ssh_keys (authorized_keys lines) hold the
// public key whose wire form is want.
func hasKey(h *model.Hardware, want []byte) bool {
	if h.Spec.Metadata == nil || h.Spec.Metadata.Instance == nil {
		return false
	}
	for _, line := range h.Spec.Metadata.Instance.SSHKeys {
		pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err == nil && bytes.Equal(pk.Marshal(), want) {
			return true
		}
	}
	return false
}

// session serves one session channel: a shell request attaches the
// console; a command is refused (there is nothing here to run).
func (s *Server) session(ctx context.Context, sc *ssh.ServerConn, ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	started := false
	gone := make(chan struct{})       // the console is detached
	clientGone := make(chan struct{}) // the client closed the channel
	for req := range reqs {
		switch req.Type {
		case "shell":
			if started {
				_ = req.Reply(false, nil)
				continue
			}
			started = true
			_ = req.Reply(true, nil)
			go func() {
				defer close(gone)
				status := s.attach(ctx, sc, ch, clientGone)
				_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
				ch.Close()
			}()
		case "exec", "subsystem":
			if started {
				_ = req.Reply(false, nil)
				continue
			}
			// Accepted to be answered: a refused request leaves the
			// client saying only "exec request failed".
			_ = req.Reply(true, nil)
			fmt.Fprintf(ch.Stderr(), "anvil: this server attaches serial consoles only: run ssh without a command\r\n")
			_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{2}))
			return
		case "pty-req", "env", "window-change":
			// A terminal is welcome but changes nothing: the machine's
			// serial port has no size.
			if req.WantReply {
				_ = req.Reply(true, nil)
			}
		default:
			if req.WantReply {
				_ = req.Reply(false, nil)
			}
		}
	}
	// The client closed the channel (or the connection went): the
	// attached console leaves.
	close(clientGone)
	if started {
		<-gone
	}
}

// attach connects the session to its machine's console until either ends
// and returns the session's exit status.
func (s *Server) attach(ctx context.Context, sc *ssh.ServerConn, ch ssh.Channel, clientGone <-chan struct{}) uint32 {
	key := sc.Permissions.Extensions[extHardware]
	ns, name, _ := strings.Cut(key, "/")
	h, m, err := s.machineOf(ctx, ns, name)
	if err != nil {
		fmt.Fprintf(ch.Stderr(), "anvil: %v\r\n", err)
		return 1
	}
	hb, sub := s.join(key, h, m)
	defer s.leave(hb, sub)
	who := fmt.Sprintf("ssh user %q from %s (key %s)", sc.User(), sc.RemoteAddr(), sc.Permissions.Extensions[extFingerprint])
	s.log.Info("console: attached", "hardware", key, "machine", m.Namespace+"/"+m.Name, "user", sc.User(), "remote", sc.RemoteAddr().String())
	s.record(h, outcomeAttached, who+" attached through machine/"+m.Name)
	fmt.Fprintf(ch.Stderr(), "anvil: serial console of hardware/%s through machine/%s (IPMI Serial over LAN); ~. leaves\r\n", name, m.Name)
	sessions.Inc()
	defer sessions.Dec()
	defer s.record(h, outcomeDetached, who+" detached")

	// Keystrokes go to the shared console; the client's end of input
	// (ssh -T < /dev/null) leaves it watching.
	go func() { _, _ = io.Copy(hb.input(), ch) }()
	for {
		select {
		case b := <-sub.out:
			if _, err := ch.Write(b); err != nil {
				return 0
			}
		case <-hb.done:
			for {
				select {
				case b := <-sub.out:
					_, _ = ch.Write(b)
					continue
				default:
				}
				break
			}
			if hb.err != nil {
				fmt.Fprintf(ch.Stderr(), "\r\nanvil: console of hardware/%s ended: %v\r\n", name, hb.err)
				return 1
			}
			fmt.Fprintf(ch.Stderr(), "\r\nanvil: console of hardware/%s ended\r\n", name)
			return 0
		case <-clientGone:
			return 0
		case <-ctx.Done():
			fmt.Fprintf(ch.Stderr(), "\r\nanvil: the server is stopping\r\n")
			return 1
		}
	}
}

// machineOf reads Hardware ns/name and the Machine its spec.bmcRef names,
// or says why there is no console to attach.
func (s *Server) machineOf(ctx context.Context, ns, name string) (*model.Hardware, *model.Machine, error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	o, err := s.cfg.Store.Get(ctx, model.KindHardware, ns, name)
	if err != nil {
		return nil, nil, fmt.Errorf("hardware/%s: %w", name, err)
	}
	h := o.(*model.Hardware)
	ref := h.Spec.BMCRef
	if ref == nil || ref.Name == "" {
		return h, nil, fmt.Errorf("hardware/%s has no spec.bmcRef: its console is reached through its BMC (a bmc.tinkerbell.org Machine; see docs/bmc.md)", name)
	}
	o, err = s.cfg.Store.Get(ctx, model.KindMachine, ns, ref.Name)
	if errors.Is(err, store.ErrNotFound) {
		return h, nil, fmt.Errorf("hardware/%s: spec.bmcRef names machine/%s, which does not exist", name, ref.Name)
	}
	if err != nil {
		return h, nil, fmt.Errorf("hardware/%s: read machine/%s: %w", name, ref.Name, err)
	}
	return h, o.(*model.Machine), nil
}
