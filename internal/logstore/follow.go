package logstore

import (
	"cmp"
	"errors"
	"slices"
	"sync"

	"github.com/anvilproj/anvil/internal/model"
)

// Defaults of the bounds on following (Follow).
const (
	// DefaultFollowLines bounds the lines a Subscription holds that its
	// reader has not taken yet.
	DefaultFollowLines = 1024
	// DefaultFollowBytes bounds the same lines' size (lineCost each).
	DefaultFollowBytes = 1 << 20
	// DefaultMaxFollowers bounds the Subscriptions open at once.
	DefaultMaxFollowers = 1024
)

// lineCost is what a held line counts against a Subscription's byte
// bound: its text and labels, plus a fixed share for the rest of the
// struct and the slice it sits in.
func lineCost(l *Line) int {
	return len(l.Line) + len(l.WorkflowID) + len(l.AgentID) + len(l.HardwareID) + len(l.Machine) +
		len(l.TaskName) + len(l.ActionName) + len(l.Stream) + 64
}

// ErrTooManyFollowers is returned by Follow when Config.MaxFollowers
// subscriptions are open.
var ErrTooManyFollowers = errors.New("logstore: too many followers")

// Selection names records read or followed together: a workflow's lines,
// agents' lines, a Hardware's machine record, unknown machines' records
// (by MAC or IP). What `anvil logs HARDWARE` shows is a Hardware's record
// with its agent IDs' lines and its MACs' unknown records.
type Selection struct {
	WorkflowID string
	AgentIDs   []string
	HardwareID string
	Machines   []string
}

// MachineSelection is a Hardware's view, what `anvil logs HARDWARE` and
// its page in the web UI show: its machine record, its agent IDs' lines,
// and the records its MACs made while no Hardware had them.
func MachineSelection(hw *model.Hardware) Selection {
	sel := Selection{HardwareID: hw.Key(), AgentIDs: hw.AgentIDs()}
	for _, mac := range hw.MACs() {
		sel.Machines = append(sel.Machines, mac.String())
	}
	return sel
}

// files returns the file names sel selects, each once, in a fixed order
// (workflow, agents, hardware, machines): the order decides which file a
// line kept in two of them is read from.
func (sel Selection) files() []string {
	var out []string
	add := func(prefix, id string) {
		if id == "" {
			return
		}
		if n := fileName(prefix, id); !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	add(prefixWorkflow, sel.WorkflowID)
	for _, a := range sel.AgentIDs {
		add(prefixAgent, a)
	}
	add(prefixHardware, sel.HardwareID)
	for _, m := range sel.Machines {
		add(prefixUnknown, m)
	}
	return out
}

// ReadSelection returns the lines of every record sel names, merged by
// time (a stable merge: lines with equal times keep each file's order),
// each line once even when it is kept in two of the files. With tail > 0
// it returns at most the newest tail lines. A selection of no record is
// an error.
func (s *Store) ReadSelection(sel Selection, tail int) ([]Line, error) {
	names := sel.files()
	if len(names) == 0 {
		return nil, errors.New("logstore: read needs a workflow, an agent, a hardware or a machine")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	return s.readSelectionLocked(names, tail)
}

func (s *Store) readSelectionLocked(names []string, tail int) ([]Line, error) {
	var out []Line
	for i, name := range names {
		earlier := names[:i]
		lines, err := s.readFileLocked(name, tail, func(l *Line) bool {
			// A line kept in an earlier selected file was read there.
			var buf [4]string
			for _, n := range l.fileNames(&buf) {
				if slices.Contains(earlier, n) {
					return false
				}
			}
			return true
		})
		if err != nil {
			return nil, err
		}
		out = append(out, lines...)
	}
	if len(names) > 1 {
		slices.SortStableFunc(out, func(a, b Line) int { return a.Time.Compare(b.Time) })
	}
	if tail > 0 && len(out) > tail {
		out = out[len(out)-tail:]
	}
	return out, nil
}

// fileNames returns the names of the files l is kept in, in buf.
func (l *Line) fileNames(buf *[4]string) []string {
	n := 0
	for _, f := range [...]struct{ prefix, id string }{
		{prefixWorkflow, l.WorkflowID}, {prefixAgent, l.AgentID}, {prefixHardware, l.HardwareID}, {prefixUnknown, l.Machine},
	} {
		if f.id != "" {
			buf[n] = fileName(f.prefix, f.id)
			n++
		}
	}
	return buf[:n]
}

// Follow returns the newest tail lines of sel (as ReadSelection) and a
// Subscription that receives every line appended to sel's records after
// them: the read and the subscription are one step under the store's
// lock, so no line falls between them or comes twice. Close the
// Subscription when done.
func (s *Store) Follow(sel Selection, tail int) (*Subscription, []Line, error) {
	names := sel.files()
	if len(names) == 0 {
		return nil, nil, errors.New("logstore: follow needs a workflow, an agent, a hardware or a machine")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, ErrClosed
	}
	if s.followers >= s.cfg.MaxFollowers {
		return nil, nil, ErrTooManyFollowers
	}
	lines, err := s.readSelectionLocked(names, tail)
	if err != nil {
		return nil, nil, err
	}
	sub := &Subscription{s: s, names: names, ready: make(chan struct{}, 1),
		maxLines: s.cfg.FollowLines, maxBytes: s.cfg.FollowBytes}
	if s.subs == nil {
		s.subs = map[string][]*Subscription{}
	}
	for _, n := range names {
		s.subs[n] = append(s.subs[n], sub)
	}
	s.followers++
	return sub, lines, nil
}

// notifyLocked hands each appended line to the subscriptions following a
// file it was written to, once each. Append calls it holding s.mu, only
// when some subscription is open; it never blocks (a Subscription holds
// what its reader has not taken, within bounds, and counts the rest).
func (s *Store) notifyLocked(lines []Line, written []entry) {
	var seen []*Subscription // the subscriptions that got the current line
	cur := -1
	for _, e := range written {
		if e.line != cur {
			cur, seen = e.line, seen[:0]
		}
		for _, sub := range s.subs[e.name] {
			if !slices.Contains(seen, sub) {
				seen = append(seen, sub)
				sub.push(&lines[e.line])
			}
		}
	}
}

// unsubscribeLocked removes sub from every file it follows.
func (s *Store) unsubscribeLocked(sub *Subscription) {
	for _, n := range sub.names {
		left := slices.DeleteFunc(s.subs[n], func(x *Subscription) bool { return x == sub })
		if len(left) == 0 {
			delete(s.subs, n)
		} else {
			s.subs[n] = left
		}
	}
	s.followers--
}

// Subscription receives the lines appended to the records it follows.
// Ready is poked (at most one pending poke: pokes coalesce) after lines
// arrive; Take returns them. It holds at most Config.FollowLines lines and
// Config.FollowBytes bytes not taken yet: past that, lines are counted
// and dropped, never waited for, so a slow reader never slows Append or
// grows memory. It is safe for concurrent use.
type Subscription struct {
	s     *Store
	names []string
	ready chan struct{}

	maxLines, maxBytes int

	mu      sync.Mutex
	lines   []Line
	bytes   int
	skipped int  // lines dropped after lines, since the last Take
	closed  bool // guarded by s.s.mu, not mu
}

// Ready receives a value after lines arrive (or are dropped) that Take
// has not returned yet.
func (sub *Subscription) Ready() <-chan struct{} { return sub.ready }

// Take returns the lines that arrived since the last Take, oldest first,
// and how many lines arrived after them that were dropped because the
// reader had fallen behind (the reader should say so: they are in the
// store, not in what it was given).
func (sub *Subscription) Take() (lines []Line, skipped int) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	lines, skipped = sub.lines, sub.skipped
	sub.lines, sub.bytes, sub.skipped = nil, 0, 0
	return lines, skipped
}

// Close ends the subscription: no line is added after it returns. It is
// safe to call more than once, and after the store's Close.
func (sub *Subscription) Close() {
	s := sub.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub.closed {
		return
	}
	sub.closed = true
	s.unsubscribeLocked(sub)
}

// push adds l, or counts it as skipped once the bounds are reached (or a
// line was skipped already: what the reader gets stays a prefix of what
// arrived, then the count), and pokes Ready.
func (sub *Subscription) push(l *Line) {
	c := lineCost(l)
	sub.mu.Lock()
	if sub.skipped > 0 || len(sub.lines) >= sub.maxLines || sub.bytes+c > sub.maxBytes {
		sub.skipped++
	} else {
		sub.lines = append(sub.lines, *l)
		sub.bytes += c
	}
	sub.mu.Unlock()
	select {
	case sub.ready <- struct{}{}:
	default: // a poke is pending: the reader takes this line with the others
	}
}

// followBounds fills the zero values of the following bounds in cfg.
func followBounds(cfg *Config) {
	cfg.FollowLines = cmp.Or(max(cfg.FollowLines, 0), DefaultFollowLines)
	cfg.FollowBytes = cmp.Or(max(cfg.FollowBytes, 0), DefaultFollowBytes)
	cfg.MaxFollowers = cmp.Or(max(cfg.MaxFollowers, 0), DefaultMaxFollowers)
}
