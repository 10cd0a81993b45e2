package httplimit

import (
	"errors"
	"io"
	"math"
	"net/http"
	"time"
)

// CutReason says why a Pacer cut a response. The values are the reason
// label of anvil_http_boot_cut_total.
type CutReason string

// The reasons.
const (
	// CutStall: no write progress for PacerConfig.StallTimeout.
	CutStall CutReason = "stall"
	// CutMinRate: past PacerConfig.Grace, the response's average rate
	// fell under PacerConfig.MinRate.
	CutMinRate CutReason = "min_rate"
)

// CutReasons lists every CutReason, for metrics that start at zero.
var CutReasons = []CutReason{CutStall, CutMinRate}

// Cut describes a response a Pacer cut.
type Cut struct {
	Reason CutReason
	// Bytes is how much of the body the client had been sent (accepted
	// by the kernel) when it was cut; Elapsed how long since the first
	// write.
	Bytes   int64
	Elapsed time.Duration
}

// ErrCut is what writes to a response return once its Pacer cut it.
var ErrCut = errors.New("httplimit: response cut: the client stopped reading or reads too slowly")

// sendChunk is how much one sendfile call may send before its deadline is
// set again: the most Go's sendfile sends per system call, so serving a
// file in chunks costs no more system calls than serving it whole.
const sendChunk = 4 << 20

// writePiece is the most one Write to the connection may carry: a client
// gets StallTimeout to take each piece.
const writePiece = 32 << 10

// PacerConfig configures a Pacer. A Pacer with neither StallTimeout nor
// MinRate passes requests on untouched.
type PacerConfig struct {
	// Next serves the requests. Required.
	Next http.Handler
	// StallTimeout cuts a response whose client accepts nothing (the
	// kernel's send buffer stays full) for this long: it is noticed
	// within one to two StallTimeouts of the last byte sent. 0: off.
	StallTimeout time.Duration
	// MinRate, in bytes per second, cuts a response whose average rate
	// since its first write falls under it once Grace has passed. 0: off.
	MinRate float64
	// Grace is how long a response may be slower than MinRate at first
	// (TCP's slow start, a client still setting up).
	Grace time.Duration
	// Cut, if set, is told of every response cut (for metrics and logs),
	// once, before the handler's write returns ErrCut. It must be safe
	// for concurrent use.
	Cut func(*http.Request, Cut)
}

// Pacer makes the responses of its handler keep moving: each write to the
// connection gets a deadline (http.ResponseController.SetWriteDeadline)
// by which it must finish for the response to be stalled no longer than
// StallTimeout and its average rate to stay at MinRate after Grace. A
// write that misses its deadline ends the response: the handler's writes
// fail with ErrCut, the handler returns — releasing, behind a Handler,
// its place in the limits — and net/http closes the connection, as the
// response is shorter than it said.
//
// Files are sent in 4 MiB sendfile calls, each given a deadline, so the
// zero-copy path stays: on plain HTTP/1.1 a call that ends at its deadline
// having sent something is resumed rather than cut. Over TLS and HTTP/2 a
// write that missed its deadline cannot be resumed, so writes are pieces
// of 32 KiB, each with its own deadline.
//
// It is safe for concurrent use.
type Pacer struct {
	cfg PacerConfig
	now func() time.Time
}

// NewPacer returns a Pacer for cfg.
func NewPacer(cfg PacerConfig) *Pacer {
	cfg.StallTimeout = max(cfg.StallTimeout, 0)
	cfg.MinRate = max(cfg.MinRate, 0)
	cfg.Grace = max(cfg.Grace, 0)
	return &Pacer{cfg: cfg, now: time.Now}
}

// ServeHTTP implements http.Handler.
func (p *Pacer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.cfg.StallTimeout == 0 && p.cfg.MinRate == 0 {
		p.cfg.Next.ServeHTTP(w, r)
		return
	}
	rc := http.NewResponseController(w)
	// Clearing the deadline also drops one an earlier response on this
	// connection may have left; a writer without deadlines is served
	// unpaced (only in tests: net/http's writers all have them).
	if err := rc.SetWriteDeadline(time.Time{}); err != nil {
		p.cfg.Next.ServeHTTP(w, r)
		return
	}
	pw := &pacedWriter{ResponseWriter: w, rc: rc, r: r, p: p,
		pace:      pace{stall: p.cfg.StallTimeout, minRate: p.cfg.MinRate, grace: p.cfg.Grace},
		resumable: r.ProtoMajor == 1 && r.TLS == nil,
		lagging:   r.ProtoMajor == 2}
	p.cfg.Next.ServeHTTP(pw, r)
	if pw.cut != "" || !pw.started {
		return
	}
	// What net/http still buffers (a few KiB) would be sent after the
	// handler returns: send it now, as one more piece under a deadline,
	// so a client that stops at the very end cannot hold the slot either.
	pw.set(pw.pace.deadline(writePiece))
	if err := rc.Flush(); err != nil {
		_ = pw.failed(err)
		return
	}
	// The connection may serve another request, not necessarily paced.
	_ = rc.SetWriteDeadline(time.Time{})
}

// pace is one response's progress and the rule its writes' deadlines
// follow. It is pure: times come from the caller.
type pace struct {
	stall   time.Duration
	minRate float64 // bytes/s
	grace   time.Duration

	start time.Time // the first write
	last  time.Time // the last write that sent something (or start)
	bytes int64     // sent so far
}

// deadline returns when a write of n more bytes must have finished: by
// then it has either sent something within the stall timeout of the last
// progress, or kept the average at minRate (counting n as sent, so a
// missed deadline always means the average is under it); zero: none.
func (p *pace) deadline(n int64) time.Time {
	var d time.Time
	if p.stall > 0 {
		d = p.last.Add(p.stall)
	}
	if p.minRate > 0 {
		need := time.Duration(math.Min(float64(p.bytes+n)/p.minRate*float64(time.Second), math.MaxInt64))
		if r := p.start.Add(max(p.grace, need)); d.IsZero() || r.Before(d) {
			d = r
		}
	}
	return d
}

// progress records that n bytes were sent by now.
func (p *pace) progress(n int64, now time.Time) {
	if n > 0 {
		p.bytes += n
		p.last = now
	}
}

// verdict returns why the response must be cut at now, or "" if it need
// not be: its average is under minRate past the grace, or nothing was sent
// for the stall timeout.
func (p *pace) verdict(now time.Time) CutReason {
	el := now.Sub(p.start)
	if p.minRate > 0 && el >= p.grace && float64(p.bytes) < p.minRate*el.Seconds() {
		return CutMinRate
	}
	if p.stall > 0 && now.Sub(p.last) >= p.stall {
		return CutStall
	}
	return ""
}

// pacedWriter is one response under a Pacer.
type pacedWriter struct {
	http.ResponseWriter
	rc        *http.ResponseController
	r         *http.Request
	p         *Pacer
	pace      pace
	resumable bool // sendfile on plain TCP: a call cut short by its deadline may go on
	// lagging: deadlines take effect later than they are set (HTTP/2's
	// are handed to the connection's goroutine), so the one before the
	// last may still be the one in force.
	lagging bool

	started  bool
	deadline time.Time // the one set last
	previous time.Time // the one before
	cut      CutReason
}

// begin starts the clock at the first write: time a handler spends before
// it writes (hashing a file, say) is not the client's.
func (w *pacedWriter) begin() {
	if !w.started {
		w.started = true
		now := w.p.now()
		w.pace.start, w.pace.last = now, now
	}
}

func (w *pacedWriter) set(d time.Time) {
	w.previous, w.deadline = w.deadline, d
	_ = w.rc.SetWriteDeadline(d) // supported: ServeHTTP checked
}

// missed reports whether the deadline in force has passed: a write that
// failed then was cut by it, not by the client going away.
func (w *pacedWriter) missed() bool {
	now := w.p.now()
	passed := func(d time.Time) bool { return !d.IsZero() && !now.Before(d) }
	return passed(w.deadline) || w.lagging && passed(w.previous)
}

func (w *pacedWriter) cutNow(reason CutReason) {
	w.cut = reason
	if w.p.cfg.Cut != nil {
		w.p.cfg.Cut(w.r, Cut{Reason: reason, Bytes: w.pace.bytes, Elapsed: w.p.now().Sub(w.pace.start)})
	}
}

// failed decides what a failed write means: a cut (returned as ErrCut)
// when its deadline had passed, else the client's own error.
func (w *pacedWriter) failed(err error) error {
	if !w.missed() {
		return err
	}
	reason := w.pace.verdict(w.p.now())
	if reason == "" {
		reason = CutStall // a piece not taken in time: nothing usable was
	}
	w.cutNow(reason)
	return ErrCut
}

func (w *pacedWriter) Write(b []byte) (int, error) {
	if w.cut != "" {
		return 0, ErrCut
	}
	w.begin()
	written := 0
	for len(b) > 0 {
		piece := b[:min(len(b), writePiece)]
		w.set(w.pace.deadline(int64(len(piece))))
		n, err := w.ResponseWriter.Write(piece)
		w.pace.progress(int64(n), w.p.now())
		written += n
		if err != nil {
			return written, w.failed(err)
		}
		b = b[n:]
	}
	return written, nil
}

// ReadFrom sends src in sendChunk calls of the next writer's ReadFrom
// (sendfile, for a file on plain TCP), each with its deadline.
func (w *pacedWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.cut != "" {
		return 0, ErrCut
	}
	rf, ok := w.ResponseWriter.(io.ReaderFrom)
	if !ok || !w.resumable || w.Header().Get("Content-Length") == "" {
		// TLS, HTTP/2, or a chunked HTTP/1.1 body: no sendfile, and a
		// write past its deadline cannot be resumed: pieces, each with
		// its deadline.
		return io.Copy(writerOnly{w}, src)
	}
	w.begin()
	// net's sendfile looks through one *io.LimitedReader to the file:
	// chunk the one given (http.ServeContent's) rather than wrap it.
	inner, remain := src, int64(math.MaxInt64)
	lr, limited := src.(*io.LimitedReader)
	if limited {
		inner, remain = lr.R, lr.N
	}
	var total int64
	for remain > 0 {
		chunk := &io.LimitedReader{R: inner, N: min(remain, sendChunk)}
		want := chunk.N
		w.set(w.pace.deadline(want))
		n, err := rf.ReadFrom(chunk)
		now := w.p.now()
		w.pace.progress(n, now)
		total += n
		remain -= n
		if limited {
			lr.N -= n
		}
		if err != nil {
			if !w.missed() {
				return total, err
			}
			if w.resumable && n > 0 && w.pace.verdict(now) == "" {
				continue // sent something in time and the average holds: go on
			}
			return total, w.failed(err)
		}
		if n < want {
			break // src ended
		}
	}
	return total, nil
}

// Unwrap lets http.ResponseController reach the writer underneath.
func (w *pacedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writerOnly hides a writer's ReadFrom, so io.Copy writes to it.
type writerOnly struct{ io.Writer }
