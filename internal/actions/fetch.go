package actions

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Backoff between fetch attempts when RETRY_ENABLED: doubling from
// retryFirst to retryMax, for as long as RETRY_DURATION_MINUTES allows.
const (
	retryFirst = time.Second
	retryMax   = 30 * time.Second
)

// fetchOpts is how a fetch behaves.
type fetchOpts struct {
	// retryFor is how long failed requests and lost connections are
	// retried (resuming with a Range request); 0: never.
	retryFor time.Duration
	// hash, when not nil, sees every byte delivered, in order.
	hash hash.Hash
}

// fetch reads one HTTP(S) object as a stream. It counts and hashes what
// it delivers, ends a download that stalls, and, when retries are on,
// resumes a lost connection where it stopped with a Range request tied
// to the object's ETag or Last-Modified (If-Range), so a changed object
// is never spliced. Read and Close are for one goroutine; Fetched may be
// called from any.
type fetch struct {
	c     *Catalog
	ctx   context.Context
	out   Output
	url   string
	opts  fetchOpts
	until time.Time // retry deadline

	mu        sync.Mutex    // guards body against onStall, and err
	body      io.ReadCloser // written under mu, read by Read without it
	stall     *time.Timer   // runs while Read waits for the network
	stalled   atomic.Bool
	offset    atomic.Int64 // bytes delivered
	size      int64        // the object's size; -1 unknown
	validator string       // ETag or Last-Modified of the first response
	err       error        // the fetch's own error, once it has failed
}

// httpError is a response that is not the one asked for.
type httpError struct {
	status    int
	text      string
	retryable bool
}

func (e *httpError) Error() string { return "HTTP " + e.text }

// permanentError is a failure that no retry can mend.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

// permanent marks err as not worth retrying.
func permanent(format string, args ...any) error {
	return permanentError{fmt.Errorf(format, args...)}
}

// startFetch sends the first request and returns the fetch with its
// response open. A server error (or a network error when retries are on)
// is retried; anything else is returned as is.
func (c *Catalog) startFetch(ctx context.Context, out Output, rawURL string, opts fetchOpts) (*fetch, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q is not an http:// or https:// URL", rawURL)
	}
	f := &fetch{c: c, ctx: ctx, out: out, url: rawURL, opts: opts, size: -1}
	f.until = c.cfg.Clock.Now().Add(opts.retryFor)
	if err := f.open(); err != nil {
		return nil, err
	}
	return f, nil
}

// Size is the object's size as its server announced it; -1 if unknown.
func (f *fetch) Size() int64 { return f.size }

// Fetched is how many bytes have been delivered.
func (f *fetch) Fetched() int64 { return f.offset.Load() }

// Err is the error that ended the fetch, if it failed (as opposed to a
// decoder failing on what it delivered).
func (f *fetch) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// open requests the object from the current offset, retrying while it
// may.
func (f *fetch) open() error {
	delay := retryFirst
	for {
		err := f.request()
		if err == nil {
			return nil
		}
		if !f.mayRetry(err) {
			return err
		}
		if err := f.backoff(&delay, err); err != nil {
			return err
		}
	}
}

// mayRetry reports whether err is worth another attempt.
func (f *fetch) mayRetry(err error) bool {
	if f.opts.retryFor <= 0 || f.ctx.Err() != nil {
		return false
	}
	var he *httpError
	if errors.As(err, &he) {
		return he.retryable
	}
	var pe permanentError
	return !errors.As(err, &pe) // a network error may pass
}

// backoff waits before the next attempt, or returns err (annotated) when
// the retry deadline would pass.
func (f *fetch) backoff(delay *time.Duration, err error) error {
	now := f.c.cfg.Clock.Now()
	if now.Add(*delay).After(f.until) {
		return fmt.Errorf("%w (gave up: RETRY_DURATION_MINUTES is over)", err)
	}
	linef(f.out, "fetch %s at byte %d failed: %v; retrying in %s", f.url, f.offset.Load(), err, *delay)
	select {
	case <-f.ctx.Done():
		return fmt.Errorf("%w (%v while waiting to retry)", err, f.ctx.Err())
	case <-f.c.cfg.Clock.After(*delay):
	}
	*delay = min(2**delay, retryMax)
	return nil
}

// request sends one GET from the current offset and keeps its body.
func (f *fetch) request() error {
	from := f.offset.Load()
	req, err := http.NewRequestWithContext(f.ctx, http.MethodGet, f.url, nil)
	if err != nil {
		return err
	}
	// Identity: the bytes as stored, so that sizes, offsets and
	// checksums are the file's own.
	req.Header.Set("Accept-Encoding", "identity")
	if from > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(from, 10)+"-")
		if f.validator != "" {
			req.Header.Set("If-Range", f.validator)
		}
	}
	resp, err := f.c.cfg.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	if err := f.accept(resp, from); err != nil {
		resp.Body.Close()
		return err
	}
	f.mu.Lock()
	f.body = resp.Body
	f.mu.Unlock()
	f.stalled.Store(false)
	if f.stall == nil {
		f.stall = time.AfterFunc(f.c.cfg.StallTimeout, f.onStall)
		f.stall.Stop()
	}
	return nil
}

// accept checks a response to a request from byte from.
func (f *fetch) accept(resp *http.Response, from int64) error {
	if from == 0 {
		if resp.StatusCode != http.StatusOK {
			return statusError(resp)
		}
		f.size = resp.ContentLength
		f.validator = validator(resp)
		return nil
	}
	switch resp.StatusCode {
	case http.StatusPartialContent:
	case http.StatusOK:
		if v := validator(resp); v != "" && v != f.validator {
			return permanent("cannot resume at byte %d: the file changed on the server (was %s, now %s)", from, f.validator, v)
		}
		return permanent("cannot resume at byte %d: the server does not serve byte ranges", from)
	default:
		return statusError(resp)
	}
	start, _, ok := strings.Cut(strings.TrimPrefix(resp.Header.Get("Content-Range"), "bytes "), "-")
	if n, err := strconv.ParseInt(start, 10, 64); !ok || err != nil || n != from {
		return permanent("cannot resume at byte %d: the server answered with range %q", from, resp.Header.Get("Content-Range"))
	}
	return nil
}

// statusError describes an unwanted status; server errors and "too many
// requests" may pass with time, the rest will not.
func statusError(resp *http.Response) error {
	c := resp.StatusCode
	return &httpError{
		status:    c,
		text:      resp.Status,
		retryable: c >= 500 || c == http.StatusTooManyRequests || c == http.StatusRequestTimeout,
	}
}

// validator is what ties a resumed request to the same object: a strong
// ETag, else Last-Modified.
func validator(resp *http.Response) string {
	if et := resp.Header.Get("ETag"); et != "" && !strings.HasPrefix(et, "W/") {
		return et
	}
	return resp.Header.Get("Last-Modified")
}

// onStall ends a download that has received nothing for StallTimeout
// while Read waited for it (time spent writing is not counted).
func (f *fetch) onStall() {
	f.stalled.Store(true)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.body != nil {
		f.body.Close()
	}
}

// Read delivers the object's next bytes. A lost connection is resumed
// when retries are on; otherwise it is an error naming the URL and the
// byte offset.
func (f *fetch) Read(p []byte) (int, error) {
	if err := f.Err(); err != nil {
		return 0, err
	}
	for {
		f.stall.Reset(f.c.cfg.StallTimeout)
		n, err := f.body.Read(p)
		f.stall.Stop()
		if n > 0 {
			if f.opts.hash != nil {
				f.opts.hash.Write(p[:n])
			}
			f.offset.Add(int64(n))
		}
		if err == nil {
			return n, nil
		}
		at := f.offset.Load()
		if err == io.EOF {
			if f.size >= 0 && at < f.size {
				err = io.ErrUnexpectedEOF
			} else {
				return n, io.EOF
			}
		}
		if f.ctx.Err() != nil {
			return n, f.setErr(fmt.Errorf("fetch %s: stopped at byte %d%s: %w", f.url, at, f.ofSize(), context.Cause(f.ctx)))
		}
		if f.stalled.Load() {
			err = fmt.Errorf("no data for %s", f.c.cfg.StallTimeout)
		}
		lost := fmt.Errorf("connection lost at byte %d%s: %w", at, f.ofSize(), err)
		if !f.mayRetry(lost) {
			return n, f.fail(lost)
		}
		f.body.Close()
		delay := retryFirst
		if err := f.backoff(&delay, lost); err != nil {
			return n, f.fail(err)
		}
		linef(f.out, "resuming %s at byte %d", f.url, at)
		if err := f.open(); err != nil {
			return n, f.fail(fmt.Errorf("%w (after the connection was lost at byte %d)", err, at))
		}
		if n > 0 {
			return n, nil
		}
	}
}

// ofSize is " of N" when the size is known.
func (f *fetch) ofSize() string {
	if f.size < 0 {
		return ""
	}
	return " of " + strconv.FormatInt(f.size, 10)
}

// fail records and returns the fetch's error, naming the URL.
func (f *fetch) fail(err error) error {
	if ce := f.ctx.Err(); ce != nil {
		err = fmt.Errorf("%w (%v)", err, context.Cause(f.ctx))
	}
	return f.setErr(fmt.Errorf("fetch %s: %w", f.url, err))
}

// setErr records and returns err as the fetch's error.
func (f *fetch) setErr(err error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
	return err
}

// Close ends the download.
func (f *fetch) Close() error {
	if f.stall != nil {
		f.stall.Stop()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.body != nil {
		return f.body.Close()
	}
	return nil
}
