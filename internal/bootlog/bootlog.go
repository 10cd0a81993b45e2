// Package bootlog keeps each machine's record: the machinelog.Events the
// network services (DHCP, TFTP, HTTP boot, syslog) emit, attributed to the
// Hardware they concern and appended to the log store, so `anvil logs
// HARDWARE` can show why a machine did or did not boot.
//
// An event is attributed by its MAC (store.IndexMAC), or else by its IP
// (store.IndexIP, then the addresses seen with a MAC in earlier events: a
// machine in proxy DHCP mode has no IP in its Hardware, yet its TFTP and
// syslog traffic carries only an IP). An event no Hardware matches is kept
// too, under the machine's MAC (or IP), so an operator can list the
// machines that tried to boot and that Anvil does not know.
//
// It owns the queue between the services' packet paths and the log store,
// and a short-lived cache of lookups. It must not decide anything about a
// boot, nor write to the object store.
package bootlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/logstore"
	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// Defaults for the zero values of Config.
const (
	// DefaultQueueSize holds a few seconds of a DHCP flood at 20,000
	// events/s (10,000 exchanges/s): enough to ride out a slow write.
	DefaultQueueSize = 65536
	// DefaultCacheTTL: see Config.CacheTTL.
	DefaultCacheTTL = 5 * time.Second
	// DefaultAddressTTL: see Config.AddressTTL.
	DefaultAddressTTL = time.Hour
)

const (
	// batchSize bounds the events written in one logstore.Append.
	batchSize = 2048
	// settleDelay is how long the writer sleeps after the first event of a
	// batch before taking what is queued. Receiving event by event woke
	// this goroutine once per event (~8 % of the server's CPU in a DHCP
	// storm); sleeping long (250 ms, tried) made bursts of writing that
	// starved the packet paths on 2 cores. A few milliseconds avoid both.
	settleDelay = 5 * time.Millisecond
	// maxCached bounds the lookup cache and the learned addresses; past
	// it they start over (a flood of made-up MACs must not grow memory).
	maxCached = 65536
	// lookupTimeout bounds one store lookup.
	lookupTimeout = 2 * time.Second
	// logEvery rate-limits the log lines about failures.
	logEvery = 10 * time.Second
)

// Record kinds, the record label of anvil_machine_events_total.
const (
	recordHardware = "hardware" // kept in a Hardware's record
	recordUnknown  = "unknown"  // kept in an unknown machine's record
	recordSkipped  = "skipped"  // about an unknown machine, not a boot attempt
)

// Drop reasons, the reason label of anvil_machine_events_dropped_total.
const (
	dropQueueFull  = "queue-full"  // the writer fell behind
	dropStopped    = "stopped"     // recorded after Run returned
	dropNoAddress  = "no-address"  // neither MAC nor IP: nothing to file it under
	dropWriteError = "write-error" // the log store failed
)

// quietOutcomes are the outcomes of things going as they should; a line of
// any other outcome is prefixed with it ("[unknown-mac] DISCOVER from …").
var quietOutcomes = map[string]bool{
	"":          true,
	"served":    true, // tftp, http
	"received":  true, // syslog
	"offered":   true, // dhcp
	"acked":     true, // dhcp
	"started":   true, // bmc: a Job started
	"completed": true, // bmc: a task or Job completed
}

// notBootAttempts are DHCP outcomes that every DHCP client on the segment
// produces (in proxy mode Anvil hears the office's laptops too). About a
// known Hardware they are kept; about an unknown machine they would bury
// the machines that did try to boot, so they are counted and skipped.
var notBootAttempts = map[string]bool{
	"not-pxe-client": true,
	"ignored":        true,
}

// notOwnAddress reports whether e's IP is one its machine does not hold: a
// DHCP DECLINE names an address someone else uses, a NAK one the client
// asked for and must drop.
func notOwnAddress(e machinelog.Event) bool {
	return e.Service == machinelog.ServiceDHCP && (e.Outcome == "declined" || e.Outcome == "nak")
}

// services are the known Event.Service values, for metric labels.
var services = []string{machinelog.ServiceDHCP, machinelog.ServiceTFTP, machinelog.ServiceHTTP, machinelog.ServiceSyslog,
	machinelog.ServiceMetadata, machinelog.ServiceBMC, machinelog.ServiceConsole, machinelog.ServiceEnroll, machinelog.ServiceDiscovery}

var (
	eventsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_machine_events_total",
		Help: "Machine events written to the machine records, by service and record: hardware, unknown (no Hardware matches) or skipped (an unknown machine's event that is no boot attempt).",
	}, []string{"service", "record"})
	droppedTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_machine_events_dropped_total",
		Help: "Machine events lost, by reason: queue-full (the writer fell behind), stopped (recorded after shutdown), no-address (neither MAC nor IP), write-error (the log store failed).",
	}, []string{"reason"})
)

func init() {
	for _, s := range append(slices.Clone(services), "other") {
		for _, r := range []string{recordHardware, recordUnknown, recordSkipped} {
			eventsTotal.WithLabelValues(s, r)
		}
	}
	for _, r := range []string{dropQueueFull, dropStopped, dropNoAddress, dropWriteError} {
		droppedTotal.WithLabelValues(r)
	}
}

// Appender keeps log lines. *logstore.Store implements it.
type Appender interface {
	Append(lines ...logstore.Line) error
}

// Config configures a Recorder.
type Config struct {
	// Store finds the Hardware of a MAC or an IP. Required.
	Store store.Indexer
	// Logs keeps the records. Required.
	Logs Appender
	// Logger receives rate-limited lines about lookup and write failures.
	// If nil, uses slog.Default().
	Logger *slog.Logger
	// Clock stamps events that come without a time and ages the caches.
	// If nil, clock.Real.
	Clock clock.Clock
	// QueueSize bounds the events waiting to be written; past it Record
	// drops them (counted). If 0, uses DefaultQueueSize.
	QueueSize int
	// CacheTTL is how long a lookup of a MAC or IP (found or not) is
	// reused. It bounds how long after a Hardware is created, changed or
	// deleted events may still be filed by the old answer; a machine takes
	// longer than that to reboot after its Hardware is applied. A burst of
	// events from one machine (a DHCP exchange, a TFTP transfer, a fleet
	// booting) costs one lookup per TTL. If 0, uses DefaultCacheTTL.
	CacheTTL time.Duration
	// AddressTTL is how long an IP seen with a MAC (a DHCP offer, an iPXE
	// script request) keeps attributing IP-only events (TFTP, syslog) to
	// that MAC, counted from the last event with both. It covers an
	// install's length of syslog traffic. If 0, uses DefaultAddressTTL.
	AddressTTL time.Duration
}

// Recorder files machine events into the log store. Record is safe for
// concurrent use and never blocks; Run writes. Create it with New.
type Recorder struct {
	cfg Config
	log *slog.Logger

	queue chan item
	done  chan struct{} // closed when Run returns

	mu      sync.RWMutex // Record holds it shared; Run takes it to stop
	stopped bool
	running bool

	// Owned by the Run goroutine.
	cache   map[string]cached        // "mac:<mac>" or "ip:<ip>" → Hardware
	repeats map[string]repeat        // an event's text → when it was last written
	learned map[netip.Addr]learnedIP // IP → the MAC last seen with it
	limit   rateLimit
}

// item is a queued event, or a Flush marker.
type item struct {
	ev    machinelog.Event
	flush chan struct{} // non-nil: close it once everything before is written
}

type cached struct {
	hardware string // "namespace/name"; "" when no Hardware matches
	until    time.Time
}

type learnedIP struct {
	mac   string
	until time.Time
}

// New returns a Recorder for cfg. It records nothing until Run runs.
func New(cfg Config) *Recorder {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = DefaultCacheTTL
	}
	if cfg.AddressTTL <= 0 {
		cfg.AddressTTL = DefaultAddressTTL
	}
	return &Recorder{
		cfg:     cfg,
		log:     cfg.Logger,
		queue:   make(chan item, cfg.QueueSize),
		done:    make(chan struct{}),
		cache:   map[string]cached{},
		repeats: map[string]repeat{},
		learned: map[netip.Addr]learnedIP{},
	}
}

// Record queues e to be filed in its machine's record. It implements
// machinelog.Sink: it never blocks and does no I/O; when the queue is full
// (or Run has returned) the event is dropped and counted in
// anvil_machine_events_dropped_total. An event without a time is stamped
// now.
func (r *Recorder) Record(e machinelog.Event) {
	if e.Time.IsZero() {
		e.Time = r.cfg.Clock.Now()
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.stopped {
		droppedTotal.WithLabelValues(dropStopped).Inc()
		return
	}
	select {
	case r.queue <- item{ev: e}:
	default:
		droppedTotal.WithLabelValues(dropQueueFull).Inc()
	}
}

// Flush waits until every event recorded before it is written to the log
// store (or dropped), or ctx ends. It returns at once if Run has returned.
func (r *Recorder) Flush(ctx context.Context) error {
	marker := make(chan struct{})
	select {
	case r.queue <- item{flush: marker}:
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-marker:
		return nil
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run writes queued events to the log store until ctx ends, then writes
// what is still queued and returns nil. Events recorded after that are
// dropped, so stop the services that record before cancelling ctx, and
// close the log store after Run returns. Run may be called only once.
func (r *Recorder) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.running || r.stopped {
		r.mu.Unlock()
		return errors.New("bootlog: Run called twice")
	}
	r.running = true
	r.mu.Unlock()
	defer close(r.done)

	batch := make([]item, 0, batchSize)
	lines := make([]logstore.Line, 0, batchSize)
	for {
		select {
		case <-ctx.Done():
			r.mu.Lock()
			r.stopped = true
			r.mu.Unlock()
			// Nothing is queued after stopped is set: write what is there.
			for len(r.queue) > 0 {
				batch = r.take(batch[:0])
				lines = r.write(batch, lines[:0])
			}
			return nil
		case it := <-r.queue:
			if it.flush == nil {
				select {
				case <-time.After(settleDelay):
				case <-ctx.Done():
				}
			}
			batch = r.take(append(batch[:0], it))
			lines = r.write(batch, lines[:0])
		}
	}
}

// take appends to batch what is queued, up to batchSize, without waiting.
func (r *Recorder) take(batch []item) []item {
	for len(batch) < batchSize {
		select {
		case it := <-r.queue:
			batch = append(batch, it)
		default:
			return batch
		}
	}
	return batch
}

// write files a batch in one append and releases its Flush markers. lines
// is scratch space, returned for reuse.
func (r *Recorder) write(batch []item, lines []logstore.Line) []logstore.Line {
	type counted struct{ service, record string }
	counts := map[counted]int{}
	for _, it := range batch {
		if it.flush != nil {
			continue
		}
		if r.repeated(&it.ev) {
			counts[counted{serviceLabel(it.ev.Service), recordRepeated}]++
			continue
		}
		l, record, ok := r.line(it.ev)
		if !ok {
			continue
		}
		counts[counted{serviceLabel(it.ev.Service), record}]++
		if record != recordSkipped {
			lines = append(lines, l)
		}
	}
	if len(lines) > 0 {
		if err := r.cfg.Logs.Append(lines...); err != nil {
			droppedTotal.WithLabelValues(dropWriteError).Add(float64(len(lines)))
			r.warn("bootlog: machine events lost: the log store failed", "events", len(lines), "err", err)
			clear(counts)
		}
	}
	for c, n := range counts {
		eventsTotal.WithLabelValues(c.service, c.record).Add(float64(n))
	}
	for _, it := range batch {
		if it.flush != nil {
			close(it.flush)
		}
	}
	return lines
}

// line resolves e's machine and formats its record line. ok is false for
// an event that cannot be filed (counted as dropped).
func (r *Recorder) line(e machinelog.Event) (l logstore.Line, record string, ok bool) {
	// The cache ages by the writer's clock (it mirrors the store now); a
	// learned address by the events' times (it is what the machines did).
	now := r.cfg.Clock.Now()
	ip := e.IP.Unmap()
	mac := e.MAC.String()
	if mac != "" {
		if ip.IsValid() && !notOwnAddress(e) {
			r.learn(ip, mac, e.Time)
		}
	}
	var hw string
	switch {
	case mac != "":
		hw = r.lookup(store.IndexMAC, mac, now)
		if hw == "" && ip.IsValid() {
			hw = r.lookup(store.IndexIP, ip.String(), now)
		}
	case ip.IsValid():
		hw = r.lookup(store.IndexIP, ip.String(), now)
		if hw == "" {
			if m, ok := r.learned[ip]; ok && e.Time.Before(m.until) {
				mac = m.mac
				hw = r.lookup(store.IndexMAC, mac, now)
			}
		}
	default:
		droppedTotal.WithLabelValues(dropNoAddress).Inc()
		return logstore.Line{}, "", false
	}
	l = logstore.Line{Time: e.Time, Stream: e.Service, Line: text(e)}
	switch {
	case hw != "":
		l.HardwareID, record = hw, recordHardware
	case notBootAttempts[e.Outcome]:
		record = recordSkipped
	case mac != "":
		l.Machine, record = mac, recordUnknown
	default:
		l.Machine, record = ip.String(), recordUnknown
	}
	return l, record, true
}

// learn remembers that ip was mac's address at the time seen.
func (r *Recorder) learn(ip netip.Addr, mac string, seen time.Time) {
	if _, ok := r.learned[ip]; !ok && len(r.learned) >= maxCached {
		for k, v := range r.learned {
			if !seen.Before(v.until) {
				delete(r.learned, k)
			}
		}
		if len(r.learned) >= maxCached {
			clear(r.learned)
		}
	}
	r.learned[ip] = learnedIP{mac: mac, until: seen.Add(r.cfg.AddressTTL)}
}

// lookup returns the "namespace/name" of the Hardware whose index holds
// value, or "" if none does (or the store failed: that is not cached).
// With several, the first by namespace and name wins.
func (r *Recorder) lookup(index, value string, now time.Time) string {
	key := index + ":" + value
	if c, ok := r.cache[key]; ok && now.Before(c.until) {
		return c.hardware
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	objs, err := r.cfg.Store.ByIndex(ctx, model.KindHardware, index, value)
	if err != nil {
		r.warn("bootlog: hardware lookup failed; event filed as an unknown machine", "index", index, "value", value, "err", err)
		return ""
	}
	hw := ""
	if len(objs) > 0 {
		hw = objs[0].GetObjectMeta().Key()
	}
	if len(r.cache) >= maxCached {
		clear(r.cache)
	}
	r.cache[key] = cached{hardware: hw, until: now.Add(r.cfg.CacheTTL)}
	return hw
}

// text is the record line of e: its message, prefixed with its outcome
// unless that is a quiet one, with control characters escaped (messages
// carry strings from the network: DHCP options, file names, syslog text).
func text(e machinelog.Event) string {
	msg := e.Message
	if !quietOutcomes[e.Outcome] {
		msg = "[" + e.Outcome + "] " + msg
	}
	return machinelog.Sanitize(msg)
}

func serviceLabel(s string) string {
	if slices.Contains(services, s) {
		return s
	}
	return "other"
}

// warn logs at most once per logEvery.
func (r *Recorder) warn(msg string, args ...any) {
	if n, ok := r.limit.allow(r.cfg.Clock.Now()); ok {
		r.log.Warn(msg, append(args, "not_logged_since", n)...)
	}
}

// rateLimit lets one log line through per logEvery, counting the others.
// Owned by the Run goroutine.
type rateLimit struct {
	next       time.Time
	suppressed int
}

func (l *rateLimit) allow(now time.Time) (suppressed int, ok bool) {
	if now.Before(l.next) {
		l.suppressed++
		return 0, false
	}
	suppressed, l.suppressed = l.suppressed, 0
	l.next = now.Add(logEvery)
	return suppressed, true
}

// A Recorder is a machinelog.Sink.
var _ machinelog.Sink = (*Recorder)(nil)

// repeatWindow is how long an event identical to one just written (same
// machine, service, outcome and text: a machine retrying DHCP, a PXE loop)
// is counted instead of written; the next one written after the window says
// how many were left out. syslogd does the same ("last message repeated N
// times"): a record stays readable, and a boot storm of retrying machines
// costs counters, not file writes.
const repeatWindow = 30 * time.Second

// recordRepeated labels events counted but not written (see repeatWindow).
const recordRepeated = "repeated"

type repeat struct {
	written time.Time
	skipped int
}

// repeated reports whether e repeats an event written less than
// repeatWindow ago (and counts it); otherwise it notes e as written and, if
// repeats were left out before it, says so in e's message.
func (r *Recorder) repeated(e *machinelog.Event) bool {
	key := e.Service + "|" + e.MAC.String() + "|" + e.IP.String() + "|" + e.Outcome + "|" + e.Message
	if p, ok := r.repeats[key]; ok {
		if e.Time.Sub(p.written) < repeatWindow {
			p.skipped++
			r.repeats[key] = p
			return true
		}
		if p.skipped > 0 {
			e.Message = fmt.Sprintf("%s (and %d identical lines since %s)", e.Message, p.skipped, p.written.Format("15:04:05"))
		}
	}
	if len(r.repeats) >= maxCached {
		clear(r.repeats)
	}
	r.repeats[key] = repeat{written: e.Time}
	return false
}
