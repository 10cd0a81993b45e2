package oci

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/anvilproj/anvil/internal/clock"
)

// Defaults for CheckerConfig's zero values.
const (
	// DefaultCheckTimeout bounds one check: apply waits for it, so a
	// registry that does not answer must not hold apply for long.
	DefaultCheckTimeout = 5 * time.Second
	// DefaultCheckTTL is how long an answer is reused: a fleet's worth of
	// Templates naming the same images asks each registry once.
	DefaultCheckTTL = time.Minute
	// DefaultCheckCacheSize bounds the answers kept.
	DefaultCheckCacheSize = 256
)

// CheckerConfig configures a Checker.
type CheckerConfig struct {
	// Timeout bounds one check. If 0, DefaultCheckTimeout.
	Timeout time.Duration
	// TTL is how long an answer (found or not) is reused. If 0,
	// DefaultCheckTTL.
	TTL time.Duration
	// Size bounds the answers kept. If 0, DefaultCheckCacheSize.
	Size int
	// Clock is the cache's clock. If nil, clock.Real.
	Clock clock.Clock
	// UserAgent is sent to registries. If "", "anvil".
	UserAgent string
}

// Checker tells whether an image can be resolved the way the agent would
// pull it: a HEAD of its manifest through the Source's mirror, plain HTTP,
// CA and credentials, nothing downloaded. Answers are cached briefly. It
// is safe for concurrent use.
type Checker struct {
	cfg CheckerConfig

	mu      sync.Mutex
	answers map[[sha256.Size]byte]checkAnswer
}

type checkAnswer struct {
	err error
	at  time.Time
}

// NewChecker returns a Checker with cfg's zero fields defaulted.
func NewChecker(cfg CheckerConfig) *Checker {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultCheckTimeout
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultCheckTTL
	}
	if cfg.Size <= 0 {
		cfg.Size = DefaultCheckCacheSize
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "anvil"
	}
	return &Checker{cfg: cfg, answers: map[[sha256.Size]byte]checkAnswer{}}
}

// Check returns nil when the registry src names (its mirror's, when it
// has one) has the image, else an error saying why not: no such image,
// access refused, a certificate not trusted, the registry unreachable or
// not answering within the timeout. A check cut short by ctx is not
// cached.
func (c *Checker) Check(ctx context.Context, src Source) error {
	key, err := checkKey(src)
	if err != nil {
		return err
	}
	c.mu.Lock()
	a, ok := c.answers[key]
	c.mu.Unlock()
	if ok && c.cfg.Clock.Now().Sub(a.at) < c.cfg.TTL {
		return a.err
	}
	err = c.head(ctx, src)
	if ctx.Err() != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Clock.Now()
	if len(c.answers) >= c.cfg.Size {
		c.evict(now)
	}
	c.answers[key] = checkAnswer{err: err, at: now}
	return err
}

// evict drops expired answers, or the oldest when none has expired.
// c.mu is held.
func (c *Checker) evict(now time.Time) {
	var oldest [sha256.Size]byte
	var oldestAt time.Time
	for k, a := range c.answers {
		if now.Sub(a.at) >= c.cfg.TTL {
			delete(c.answers, k)
			continue
		}
		if oldestAt.IsZero() || a.at.Before(oldestAt) {
			oldest, oldestAt = k, a.at
		}
	}
	if len(c.answers) >= c.cfg.Size {
		delete(c.answers, oldest)
	}
}

// checkKey identifies everything about src that can change the answer,
// credentials included, without keeping them.
func checkKey(src Source) ([sha256.Size]byte, error) {
	b, err := json.Marshal(struct {
		Ref       string
		PlainHTTP bool
		CA        string
		Auth      any
	}{src.Ref, src.PlainHTTP, src.CA, src.Auth})
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(b), nil
}

func (c *Checker) head(ctx context.Context, src Source) error {
	ctx, cancel := context.WithTimeoutCause(ctx, c.cfg.Timeout,
		fmt.Errorf("the registry did not answer within %s", c.cfg.Timeout))
	defer cancel()
	var nameOpts []name.Option
	if src.PlainHTTP {
		nameOpts = append(nameOpts, name.Insecure)
	}
	ref, err := name.ParseReference(src.Ref, nameOpts...)
	if err != nil {
		return fmt.Errorf("%q is not a valid reference: %w", src.Ref, err)
	}
	tr, err := transportFor(src, &atomic.Int64{})
	if err != nil {
		return err
	}
	_, err = remote.Head(ref, remote.WithContext(ctx), remote.WithAuth(authenticator(src.Auth)),
		remote.WithTransport(tr), remote.WithUserAgent(c.cfg.UserAgent))
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return cause
	}
	return explain(err)
}
