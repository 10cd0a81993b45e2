package auth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// timeTicker is Config.NewTicker's default: a time.Ticker.
func timeTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// maxJWKSBytes bounds a JWKS response; real ones are a few kilobytes.
const maxJWKSBytes = 1 << 20

// jwksMediaTypes is the Accept header of a JWKS fetch (RFC 7517 section 8.5.1).
const jwksMediaTypes = "application/jwk-set+json, application/json"

// remoteKeys is the key set published at a JWKS URL: fetched at start,
// again every refresh interval, and again when a token names a kid it does
// not hold — at most once per minInterval, one fetch shared by all the
// callers that miss at the same time.
type remoteKeys struct {
	url         string
	client      *http.Client
	minInterval time.Duration
	now         func() time.Time
	log         *slog.Logger

	keys atomic.Pointer[keySet] // nil until the first successful fetch

	mu       sync.Mutex
	lastMiss time.Time  // start of the last limited fetch, successful or not
	inflight *fetchCall // the fetch under way, if any
}

// fetchCall is one fetch that several callers wait for.
type fetchCall struct {
	done chan struct{}
	err  error // set before done is closed
}

// current returns the keys of the last successful fetch, or nil.
func (r *remoteKeys) current() *keySet { return r.keys.Load() }

// refresh fetches the JWKS unless one is under way, in which case it waits
// for that one. When limited (a fetch for an unknown kid), it does nothing
// (and returns false, nil) if the last limited fetch started less than
// minInterval ago; the start and periodic fetches do not count. It reports whether a
// fetch completed for the caller and that fetch's error. The fetch itself
// runs on base, not ctx, so that a caller giving up does not fail the
// others; ctx only bounds the caller's wait.
func (r *remoteKeys) refresh(ctx, base context.Context, limited bool) (bool, error) {
	r.mu.Lock()
	if c := r.inflight; c != nil {
		r.mu.Unlock()
		select {
		case <-c.done:
			return true, c.err
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	if limited {
		now := r.now()
		if !r.lastMiss.IsZero() && now.Sub(r.lastMiss) < r.minInterval {
			r.mu.Unlock()
			return false, nil
		}
		r.lastMiss = now
	}
	c := &fetchCall{done: make(chan struct{})}
	r.inflight = c
	r.mu.Unlock()

	c.err = r.fetch(base)

	r.mu.Lock()
	r.inflight = nil
	r.mu.Unlock()
	close(c.done)
	return true, c.err
}

// fetch gets and parses the JWKS and, when it holds a usable key, makes it
// the current set. On any error the previous set stays.
func (r *remoteKeys) fetch(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	if err != nil {
		return fmt.Errorf("fetch JWKS: %w", err)
	}
	req.Header.Set("Accept", jwksMediaTypes)
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("fetch JWKS: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch JWKS %s: %s", r.url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return fmt.Errorf("fetch JWKS %s: %w", r.url, err)
	}
	if len(body) > maxJWKSBytes {
		return fmt.Errorf("fetch JWKS %s: response larger than %d bytes", r.url, maxJWKSBytes)
	}
	keys, skipped, err := parseKeys(body)
	if err != nil {
		return fmt.Errorf("JWKS %s: %w", r.url, err)
	}
	for _, s := range skipped {
		r.log.Debug("auth: JWKS key skipped", "url", r.url, "key", s)
	}
	r.keys.Store(newKeySet(keys))
	return nil
}

// run refreshes the keys at every tick until ctx is done, logging (not
// returning) failures: the previous keys stay in use.
func (r *remoteKeys) run(ctx context.Context, tick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			if _, err := r.refresh(ctx, ctx, false); err != nil && !errors.Is(err, context.Canceled) {
				r.log.Warn("auth: JWKS refresh failed; keeping the previous keys", "url", r.url, "err", err)
			}
		}
	}
}
