package auth

import (
	"context"
	"sync"
	"time"
)

// Verified-token cache bounds.
const (
	// DefaultCacheTTL is the longest a verified token is trusted without
	// verifying its signature again. It bounds how long a token of a
	// retired key (or one whose key file was removed) keeps working.
	DefaultCacheTTL = time.Minute
	// DefaultCacheSize bounds the cache's entries; a full cache is
	// emptied, so a flood of distinct valid tokens costs verification,
	// never memory.
	DefaultCacheSize = 10000
)

// CachingVerifier remembers tokens it has verified, so a client that sends
// the same token on every call (a CLI, an orchestrator) pays for one
// signature check per token per TTL, not one per call: verification is a
// public-key operation, tens of microseconds, as much as the rest of a
// small API call. Refused tokens are not remembered (a refusal is cheap to
// repeat, and an attacker's junk must not fill the cache). It is safe for
// concurrent use.
type CachingVerifier struct {
	v    *Verifier
	ttl  time.Duration
	max  int
	now  func() time.Time
	mu   sync.Mutex
	seen map[string]cached
}

type cached struct {
	p     *Principal
	until time.Time // the earlier of the token's exp and verification + TTL
}

// NewCachingVerifier caches v's answers for ttl (if 0, DefaultCacheTTL),
// at most max entries (if 0, DefaultCacheSize).
func NewCachingVerifier(v *Verifier, ttl time.Duration, max int) *CachingVerifier {
	if ttl <= 0 {
		ttl = DefaultCacheTTL
	}
	if max <= 0 {
		max = DefaultCacheSize
	}
	return &CachingVerifier{v: v, ttl: ttl, max: max, now: v.now, seen: make(map[string]cached)}
}

// Verify is Verifier.Verify with the cache in front.
func (c *CachingVerifier) Verify(ctx context.Context, raw string) (*Principal, error) {
	now := c.now()
	c.mu.Lock()
	e, ok := c.seen[raw]
	if ok && now.Before(e.until) {
		c.mu.Unlock()
		// A revocation takes effect with the list's next read, not
		// when the entry ends.
		if err := c.v.checkRevoked(e.p); err != nil {
			return nil, err
		}
		return e.p, nil
	}
	if ok {
		delete(c.seen, raw)
	}
	c.mu.Unlock()

	p, err := c.v.Verify(ctx, raw)
	if err != nil {
		return nil, err
	}
	until := now.Add(c.ttl)
	if !p.ExpiresAt.IsZero() && p.ExpiresAt.Before(until) {
		until = p.ExpiresAt
	}
	c.mu.Lock()
	if len(c.seen) >= c.max {
		clear(c.seen)
	}
	c.seen[raw] = cached{p: p, until: until}
	c.mu.Unlock()
	return p, nil
}
