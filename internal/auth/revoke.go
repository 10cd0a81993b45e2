package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/anvilproj/anvil/internal/atomicfile"
)

// Revocation list: tokens refused before their exp, by jti. A signed token
// is valid until it expires; the list is how one is withdrawn sooner
// without retiring the key that signed it (which would withdraw all of
// them). It is a JSON file the server reads and `anvil token revoke`
// writes; entries are kept until their token would have expired anyway.
const (
	revocationFileName = "revoked-tokens.json" // in LocalIssuerDir
	revocationFileMode = 0o600
	// maxRevocationFile bounds the list file (~10,000 entries); a bigger
	// one is refused, not read.
	maxRevocationFile = 4 << 20
)

// RevocationFile is the revocation list's path under a data directory.
func RevocationFile(dataDir string) string {
	return filepath.Join(LocalIssuerDir(dataDir), revocationFileName)
}

// Revocation is one revoked token.
type Revocation struct {
	// ID is the token's jti (RFC 7519 section 4.1.7). Required.
	ID string `json:"jti"`
	// Issuer and Subject are the token's iss and sub, for the reader.
	Issuer  string `json:"iss,omitempty"`
	Subject string `json:"sub,omitempty"`
	// Expires is the token's exp: past it the token is refused anyway and
	// the entry is dropped. Required.
	Expires time.Time `json:"exp"`
	// RevokedAt and Reason say when and why.
	RevokedAt time.Time `json:"revokedAt"`
	Reason    string    `json:"reason,omitempty"`
}

// revocationList is the file's JSON.
type revocationList struct {
	Revoked []Revocation `json:"revoked"`
}

// parseRevocations reads a revocation list file. Unknown fields, an entry
// without a jti or an exp, and trailing data are errors: a list that says
// less than it seems to must not be half used.
func parseRevocations(data []byte) ([]Revocation, error) {
	if len(data) > maxRevocationFile {
		return nil, fmt.Errorf("revocation list of %d bytes: more than %d", len(data), maxRevocationFile)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var l revocationList
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("revocation list: %w", err)
	}
	if dec.More() {
		return nil, errors.New("revocation list: data after the JSON object")
	}
	for i, r := range l.Revoked {
		if r.ID == "" || r.Expires.IsZero() {
			return nil, fmt.Errorf("revocation list: entry %d: jti and exp are required", i)
		}
	}
	return l.Revoked, nil
}

// RevocationOf describes the token raw for Revoke: its jti, iss, sub and
// exp. The token is read, not verified: revoking a forged token's jti only
// refuses tokens that carry that jti. A token without a jti cannot be
// revoked alone (retire its key instead), and one without an exp needs no
// revoking (no verifier accepts it).
func RevocationOf(raw string) (Revocation, error) {
	_, p, _, err := splitToken(raw)
	if err != nil {
		return Revocation{}, err
	}
	payload, err := b64.DecodeString(p)
	if err != nil {
		return Revocation{}, malformed("payload is not base64url")
	}
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil || claims == nil {
		return Revocation{}, malformed("payload is not a JSON object")
	}
	var r Revocation
	var ok bool
	if r.ID, ok, err = stringClaim(claims, claimTokenID); err != nil {
		return Revocation{}, err
	} else if !ok || r.ID == "" {
		return Revocation{}, errors.New("the token has no jti, so it cannot be revoked alone: retire the key that signed it")
	}
	if r.Expires, ok, err = numericDate(claims, claimExpiry); err != nil {
		return Revocation{}, err
	} else if !ok {
		return Revocation{}, errors.New("the token has no exp: no verifier accepts it, so there is nothing to revoke")
	}
	// iss and sub only describe the entry: a wrong type leaves them out.
	r.Issuer, _ = claims[claimIssuer].(string)
	r.Subject, _ = claims[DefaultSubjectClaim].(string)
	return r, nil
}

// Revoke adds r to the revocation list at path (created with mode 0600 if
// missing), drops the entries whose token expired before now, and
// replaces the file atomically. Concurrent Revokes on one machine (the
// server at start, `anvil token revoke`) are serialised by a lock on
// path+".lock", so none is lost. A running Verifier sees the change within
// keyFileCheckInterval.
func Revoke(path string, r Revocation, now time.Time) error {
	if r.ID == "" || r.Expires.IsZero() {
		return errors.New("revoke: jti and exp are required")
	}
	if err := os.MkdirAll(filepath.Dir(path), localDirMode); err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, revocationFileMode)
	if err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	defer lock.Close() // releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("revoke: lock %s: %w", lock.Name(), err)
	}
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("revoke: %w", err)
	}
	list, err := parseRevocations(data)
	if err != nil {
		// Never replace a list that cannot be read: it may hold the only
		// record of a revoked token.
		return fmt.Errorf("revoke: %s: %w (fix or remove it first)", path, err)
	}
	list = slices.DeleteFunc(list, func(e Revocation) bool { return e.ID == r.ID || e.Expires.Before(now) })
	if r.RevokedAt.IsZero() {
		r.RevokedAt = now.UTC().Truncate(time.Second)
	}
	list = append(list, r)
	out, err := json.MarshalIndent(revocationList{Revoked: list}, "", "  ")
	if err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	if err := atomicfile.Write(path, append(out, '\n'), revocationFileMode); err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	return nil
}

// revocations is a Verifier's view of the revocation list: the jtis it
// names, read again when the file's modification time or size changes
// (checked at most once every keyFileCheckInterval).
type revocations struct {
	path string
	now  func() time.Time
	log  *slog.Logger

	ids atomic.Pointer[map[string]struct{}]

	mu    sync.Mutex // guards next and stamp, and serialises reloads
	next  time.Time
	stamp fileStamp
}

// load reads the list for a new Verifier: a missing file revokes nothing;
// one that cannot be read is an error (tokens it revokes must not pass).
func (r *revocations) load() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next = r.now().Add(keyFileCheckInterval)
	empty := map[string]struct{}{}
	r.ids.Store(&empty)
	return r.reloadLocked()
}

// reloadLocked re-reads the file if its stamp changed. On an error the
// previous list stays in use: what was revoked stays revoked.
func (r *revocations) reloadLocked() error {
	fi, err := os.Stat(r.path)
	if errors.Is(err, fs.ErrNotExist) {
		if r.stamp != (fileStamp{}) {
			r.log.Warn("auth: revocation list removed; no token is revoked any more", "path", r.path)
		}
		r.stamp = fileStamp{}
		empty := map[string]struct{}{}
		r.ids.Store(&empty)
		return nil
	}
	if err != nil {
		return fmt.Errorf("revocation list: %w", err)
	}
	st := fileStamp{mod: fi.ModTime(), size: fi.Size()}
	if st == r.stamp {
		return nil
	}
	data, err := os.ReadFile(r.path)
	if err != nil {
		return fmt.Errorf("revocation list: %w", err)
	}
	list, err := parseRevocations(data)
	if err != nil {
		return fmt.Errorf("%s: %w", r.path, err)
	}
	ids := make(map[string]struct{}, len(list))
	for _, e := range list {
		ids[e.ID] = struct{}{}
	}
	if r.stamp != (fileStamp{}) {
		r.log.Info("auth: revocation list reloaded", "path", r.path, "revoked", len(ids))
	}
	r.stamp = st
	r.ids.Store(&ids)
	return nil
}

// revoked reports whether jti is on the list, first re-reading the file
// if the last check is old enough. A caller that finds a check under way
// does not wait for it.
func (r *revocations) revoked(jti string) bool {
	if r.mu.TryLock() {
		if now := r.now(); !now.Before(r.next) {
			r.next = now.Add(keyFileCheckInterval)
			if err := r.reloadLocked(); err != nil {
				r.log.Warn("auth: revocation list reload failed; keeping the previous list", "err", err)
			}
		}
		r.mu.Unlock()
	}
	_, ok := (*r.ids.Load())[jti]
	return ok
}
