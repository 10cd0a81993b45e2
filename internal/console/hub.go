package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/model"
)

// Outcomes of the console's record lines.
const (
	outcomeOutput   = "output"
	outcomeAttached = "attached"
	outcomeDetached = "detached"
	outcomeRefused  = "refused"
	outcomeFailed   = "failed"
	outcomeLost     = "lost"
)

var (
	sessions = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "anvil_console_sessions",
		Help: "SSH sessions attached to machines' serial consoles.",
	})
	logins = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_console_logins_total",
		Help: "SSH logins to the serial console, by result: ok, refused (no Hardware of that name holds the key offered).",
	}, []string{"result"})
	connsRefused = promauto.NewCounter(prometheus.CounterOpts{
		Name: "anvil_console_connections_refused_total",
		Help: "SSH connections closed unheard because the console had its maximum at once.",
	})
	outputDropped = promauto.NewCounter(prometheus.CounterOpts{
		Name: "anvil_console_output_dropped_bytes_total",
		Help: "Console output not sent to a session that could not keep up (its record line is kept).",
	})
)

// subBuffer is the chunks of output a session may lag behind before its
// share is dropped: the console does not wait for its slowest reader.
const subBuffer = 1024

// hub is one machine's attached console and the sessions sharing it.
type hub struct {
	in     *io.PipeWriter // keystrokes of every session
	cancel context.CancelFunc
	done   chan struct{} // closed when the console is detached
	err    error         // why, set before done is closed

	// Guarded by Server.mu.
	subs    map[*subscriber]struct{}
	closing bool
}

// subscriber is one session's view of a hub.
type subscriber struct {
	out chan []byte
}

// input is where a session writes what its operator types.
func (h *hub) input() io.Writer { return h.in }

// join adds a session to the console of Hardware h (key "ns/name"),
// attaching it through Machine m when nobody watches it yet. A console
// still being released is waited for first: the BMC allows one SOL
// session at a time.
func (s *Server) join(key string, h *model.Hardware, m *model.Machine) (*hub, *subscriber) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := &subscriber{out: make(chan []byte, subBuffer)}
	if hb := s.hubs[key]; hb != nil && !hb.closing {
		hb.subs[sub] = struct{}{}
		return hb, sub
	}
	prev := s.hubs[key]
	inR, inW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	hb := &hub{in: inW, cancel: cancel, done: make(chan struct{}), subs: map[*subscriber]struct{}{sub: {}}}
	s.hubs[key] = hb
	rec := &lineRecorder{emit: func(line string) { s.record(h, outcomeOutput, line) }}
	go func() {
		if prev != nil {
			<-prev.done
		}
		err := s.attachKept(ctx, h, hb, m, inR, writerFunc(func(p []byte) (int, error) {
			s.broadcast(hb, p)
			rec.Write(p)
			return len(p), nil
		}))
		rec.flush()
		inR.Close()
		if err != nil {
			s.log.Warn("console: detached with an error", "hardware", key, "err", err)
			s.record(h, outcomeFailed, "console: "+err.Error())
		}
		s.mu.Lock()
		hb.err, hb.closing = err, true
		if s.hubs[key] == hb {
			delete(s.hubs, key)
		}
		s.mu.Unlock()
		close(hb.done)
		cancel()
	}()
	return hb, sub
}

// attachKept attaches Machine m's console and, when it is lost, attaches
// it again (telling the sessions) until ctx ends or ReattachFor passes
// without success; it returns Attach's last error, nil when the console
// was released.
func (s *Server) attachKept(ctx context.Context, h *model.Hardware, hb *hub, m *model.Machine, in io.Reader, out io.Writer) error {
	var lostAt time.Time
	wait := s.cfg.ReattachWait
	for {
		start := s.cfg.Clock.Now()
		err := s.cfg.Attach(ctx, m, in, out)
		switch {
		case err == nil || ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrLost) && (lostAt.IsZero() || s.cfg.Clock.Now().Sub(start) >= s.cfg.ReattachFor):
			// A fresh loss: the first, or after a life as long as the
			// patience (a console that flaps faster runs out of it).
			lostAt, wait = s.cfg.Clock.Now(), s.cfg.ReattachWait
		case lostAt.IsZero() || s.cfg.Clock.Now().Sub(lostAt) > s.cfg.ReattachFor:
			return err // never attached, or lost for good
		}
		msg := fmt.Sprintf("%v; attaching again in %s", err, wait) // "console lost: …"
		if !errors.Is(err, ErrLost) {
			msg = fmt.Sprintf("console not back yet: %v; attaching again in %s", err, wait)
		}
		s.log.Warn("console: "+msg, "hardware", h.Namespace+"/"+h.Name)
		s.record(h, outcomeLost, msg)
		s.broadcast(hb, []byte("\r\n[anvil: "+msg+"]\r\n"))
		select {
		case <-ctx.Done():
			return nil
		case <-s.cfg.Clock.After(wait):
		}
		wait = min(2*wait, maxReattachWait)
	}
}

// maxReattachWait caps the wait between two tries of a lost console.
const maxReattachWait = 8 * time.Second

// leave removes a session; the last one out releases the console.
func (s *Server) leave(hb *hub, sub *subscriber) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(hb.subs, sub)
	if len(hb.subs) == 0 && !hb.closing {
		hb.closing = true
		hb.cancel()
		hb.in.Close()
	}
}

// broadcast hands a chunk of output to every session of hb, dropping it
// for one whose buffer is full.
func (s *Server) broadcast(hb *hub, p []byte) {
	b := append([]byte(nil), p...)
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range hb.subs {
		select {
		case sub.out <- b:
		default:
			outputDropped.Add(float64(len(b)))
		}
	}
}

// record puts a line in the record of h (filed by its first MAC).
func (s *Server) record(h *model.Hardware, outcome, msg string) {
	if s.cfg.Events == nil {
		return
	}
	macs := h.MACs()
	if len(macs) == 0 {
		return
	}
	s.cfg.Events.Record(machinelog.Event{Service: machinelog.ServiceConsole, MAC: macs[0], Outcome: outcome, Message: msg})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// maxRecordLine bounds one record line of console output; a longer line
// is cut into several.
const maxRecordLine = 1024

// lineRecorder cuts console output into the lines of the machine's
// record: carriage returns and terminal escape sequences (colours, cursor
// moves: ESC [ … final byte) removed, empty lines skipped. It is used from
// one goroutine.
type lineRecorder struct {
	emit func(string)
	line strings.Builder
	esc  int // 0: text; 1: after ESC; 2: inside a CSI sequence
}

func (r *lineRecorder) Write(p []byte) {
	for _, c := range p {
		switch {
		case r.esc == 1:
			r.esc = 0
			if c == '[' {
				r.esc = 2
			}
		case r.esc == 2:
			if c >= 0x40 && c <= 0x7e {
				r.esc = 0
			}
		case c == 0x1b:
			r.esc = 1
		case c == '\n':
			r.flush()
		case c == '\r':
		default:
			r.line.WriteByte(c)
			if r.line.Len() >= maxRecordLine {
				r.flush()
			}
		}
	}
}

// flush emits the line so far, if it holds more than blanks.
func (r *lineRecorder) flush() {
	line := strings.TrimRight(r.line.String(), " \t")
	r.line.Reset()
	if strings.TrimSpace(line) != "" {
		r.emit(machinelog.Sanitize(line))
	}
}
