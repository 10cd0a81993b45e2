package tftp

import (
	"net/netip"
	"sync"
	"time"
)

// Defaults of the refusal limiter (Config.RefusalBurst, Config.RefusalEvery).
const (
	// DefaultRefusalBurst is how many refusals of one source address are
	// recorded one by one before the limiter steps in: more than a PXE
	// loader's probes for files that do not exist in one boot (pxelinux
	// asks for about a dozen configuration names).
	DefaultRefusalBurst = 20
	// DefaultRefusalEvery is how often a limited source earns one more
	// recorded refusal.
	DefaultRefusalEvery = time.Second
)

const (
	// maxLimitedSources bounds the sources the limiter tracks one by one;
	// past it (a flood from made-up addresses) new sources share one
	// bucket, so memory stays bounded and the flood stays limited.
	maxLimitedSources = 4096
	// sweepEvery is how often record looks for limited sources whose
	// flood has stopped, to write their summaries without waiting for
	// their next request.
	sweepEvery = 10 * time.Second
)

// overflowSource keys the bucket shared by sources beyond maxLimitedSources.
var overflowSource = netip.Addr{}

// refusalLimiter decides which refusals (requests answered refused or
// not-found) are recorded one by one: a token bucket per source address
// holds burst tokens and earns one every `every`; a refusal without a token
// is only counted, and the count is reported in one summary once the
// source's bucket has a token again. It is safe for concurrent use.
type refusalLimiter struct {
	burst float64
	every time.Duration

	mu        sync.Mutex
	sources   map[netip.Addr]*bucket
	lastSweep time.Time
}

type bucket struct {
	tokens     float64
	last       time.Time // when tokens was last brought up to date
	suppressed int       // refusals not recorded since firstQuiet
	firstQuiet time.Time
}

// suppression is the summary of one source's refusals left unrecorded.
type suppression struct {
	source netip.Addr // invalid for the bucket shared by overflow sources
	count  int
	since  time.Time
}

func newRefusalLimiter(burst int, every time.Duration) *refusalLimiter {
	return &refusalLimiter{burst: float64(burst), every: every, sources: map[netip.Addr]*bucket{}}
}

// refill brings b's tokens up to now.
func (l *refusalLimiter) refill(b *bucket, now time.Time) {
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(l.burst, b.tokens+float64(d)/float64(l.every))
		b.last = now
	}
}

// allow reports whether a refusal from src at now is recorded. When it is
// and refusals of src went unrecorded before it, sum says how many (its
// count is then reset); the caller records the summary first.
func (l *refusalLimiter) allow(src netip.Addr, now time.Time) (ok bool, sum *suppression) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.sources[src]
	if b == nil {
		if len(l.sources) >= maxLimitedSources {
			l.sweepLocked(now, nil)
		}
		if len(l.sources) >= maxLimitedSources {
			src = overflowSource
			b = l.sources[src]
		}
		if b == nil {
			b = &bucket{tokens: l.burst, last: now}
			l.sources[src] = b
		}
	}
	l.refill(b, now)
	if b.tokens < 1 {
		if b.suppressed == 0 {
			b.firstQuiet = now
		}
		b.suppressed++
		return false, nil
	}
	b.tokens--
	if b.suppressed > 0 {
		sum = &suppression{source: src, count: b.suppressed, since: b.firstQuiet}
		b.suppressed = 0
	}
	return true, sum
}

// due returns, at most once per sweepEvery, the summaries of sources whose
// bucket has a token again (their flood stopped), and forgets sources with
// a full bucket and nothing to report.
func (l *refusalLimiter) due(now time.Time) []suppression {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) < sweepEvery {
		return nil
	}
	var out []suppression
	l.sweepLocked(now, &out)
	return out
}

func (l *refusalLimiter) sweepLocked(now time.Time, out *[]suppression) {
	l.lastSweep = now
	for src, b := range l.sources {
		l.refill(b, now)
		if b.tokens < 1 {
			continue
		}
		if b.suppressed > 0 {
			if out == nil {
				continue // reported when asked for, not dropped
			}
			*out = append(*out, suppression{source: src, count: b.suppressed, since: b.firstQuiet})
			b.suppressed = 0
		}
		if b.tokens >= l.burst {
			delete(l.sources, src)
		}
	}
}

// flush returns every pending summary, whatever the buckets hold (Serve is
// ending).
func (l *refusalLimiter) flush() []suppression {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []suppression
	for src, b := range l.sources {
		if b.suppressed > 0 {
			out = append(out, suppression{source: src, count: b.suppressed, since: b.firstQuiet})
			b.suppressed = 0
		}
	}
	return out
}
