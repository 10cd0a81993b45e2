package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
)

// Server is one address of the Anvil API the agent may call: in
// Kubernetes mode every replica of `anvil serve` serves the agent API, and
// anvil.server= lists them (internal/agentcmdline).
type Server struct {
	// URL names the server in the agent's lines (its base URL).
	URL string
	// Client calls its AgentService.
	Client anvilv1connect.AgentServiceClient
}

// Bounds of one call to one server, past which the agent takes it for
// gone (a replica whose host vanished answers nothing, not even a reset)
// and moves to the next. The long poll's own wait comes on top of
// pollGrace.
const (
	pollGrace     = 15 * time.Second
	reportTimeout = 30 * time.Second
	logsTimeout   = 30 * time.Second
)

// failoverRoundsQuiet is how many rounds of all servers failing pass
// between two lines saying so: every move of the first round is told, the
// rounds after it only now and then.
const failoverRoundsQuiet = 10

// servers is the agent's way to the API over every address it knows. All
// of the agent's calls (the long poll, reports, progress, log shipping)
// go to one current server; a connection-level failure there moves every
// call on to the next (in order, wrapping), an application error does
// not. It is safe for concurrent use.
type servers struct {
	list []Server
	logf func(format string, args ...any)

	mu  sync.Mutex
	cur int
	// failed counts moves since a server last answered: len(list) of them
	// is a round in which no server answered.
	failed int
}

func newServers(list []Server, logf func(format string, args ...any)) *servers {
	return &servers{list: list, logf: logf}
}

// current returns the index and the server calls go to now.
func (s *servers) current() (int, Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur, s.list[s.cur]
}

// call runs fn against the current server, giving it timeout; on a
// connection-level failure it moves to the next server and runs fn again
// there, each server once at most. It returns fn's last error: an
// application error as the server answered it, or, when every server
// failed, the last server's failure (the caller backs off and calls again,
// which starts a new round). fn must be safe to run again: every call the
// agent makes is (the server applies a report it already has as a no-op,
// and a long poll that broke is simply asked again).
func (s *servers) call(ctx context.Context, timeout time.Duration, what string,
	fn func(ctx context.Context, c anvilv1connect.AgentServiceClient) error) error {
	var err error
	for range len(s.list) {
		i, srv := s.current()
		cctx, cancel := context.WithTimeout(ctx, timeout)
		err = fn(cctx, srv.Client)
		cancel()
		if err == nil {
			s.answered(i)
			return nil
		}
		if ctx.Err() != nil {
			return err // the caller's end, not the server's failure
		}
		why, down := connectionFailure(err)
		if !down {
			s.answered(i)
			return err
		}
		s.moveOn(i, what, why)
	}
	return err
}

// answered notes that server i answered (well or with an application
// error), which ends a run of failures.
func (s *servers) answered(i int) {
	s.mu.Lock()
	wasDown := s.failed >= len(s.list) && len(s.list) > 1
	s.failed = 0
	url := s.list[i].URL
	s.mu.Unlock()
	if wasDown {
		s.logf("anvil agent: server %s answers; carrying on there", url)
	}
}

// moveOn makes the server after i the current one, unless another call
// already moved on from i (two calls failing at once on one server move
// once), and says so.
func (s *servers) moveOn(i int, what, why string) {
	s.mu.Lock()
	n := len(s.list)
	if s.cur != i || n == 1 {
		s.mu.Unlock()
		return
	}
	s.cur = (i + 1) % n
	s.failed++
	failed, from, to := s.failed, s.list[i].URL, s.list[s.cur].URL
	s.mu.Unlock()
	switch {
	case failed < n:
		s.logf("anvil agent: server %s failed (%s: %s); moving to %s", from, what, why, to)
	case failed == n:
		s.logf("anvil agent: server %s failed (%s: %s); none of the %d servers answers: trying them in turn, from %s, with back-off",
			from, what, why, n, to)
	case failed%(n*failoverRoundsQuiet) == 0:
		s.logf("anvil agent: still none of the %d servers answers (%d rounds); last: %s failed (%s: %s)", n, failed/n, from, what, why)
	}
}

// connectionFailure says whether err, from a call whose caller has not
// given up, means the server cannot be reached or did not answer (so
// another replica may), and why in a few words. Refused, reset or broken
// connections, TLS handshake failures, timeouts and a proxy's 502, 503 or
// 504 are; an answer of the API itself (a refused report, an unknown
// workflow, a bad token) is not: every replica would answer the same.
func connectionFailure(err error) (string, bool) {
	var (
		ce      *connect.Error
		netErr  net.Error
		certErr *tls.CertificateVerificationError
		alert   tls.AlertError
		record  tls.RecordHeaderError
	)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused", true
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection broken", true
	case errors.As(err, &certErr), errors.As(err, &alert), errors.As(err, &record):
		return "TLS handshake failed", true
	case connect.CodeOf(err) == connect.CodeDeadlineExceeded:
		return "no answer in time", true
	case errors.As(err, &netErr) && netErr.Timeout():
		return "no answer in time", true
	case connect.CodeOf(err) == connect.CodeUnavailable:
		if errors.As(err, &ce) && ce.Message() != "" {
			return "unavailable: " + ce.Message(), true
		}
		return "unavailable", true
	case errors.As(err, &netErr):
		return fmt.Sprintf("network: %v", netErr), true
	}
	return "", false
}

// describe names the servers for the agent's first line.
func (s *servers) describe() string {
	if len(s.list) == 1 {
		return s.list[0].URL
	}
	urls := make([]string, len(s.list))
	for i, srv := range s.list {
		urls[i] = srv.URL
	}
	return fmt.Sprintf("%d servers (%s, in that order)", len(urls), strings.Join(urls, ", "))
}
