package ui

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"sync"
	"time"
)

// Session limits.
const (
	// cookieName is the session cookie. Its value is a random session
	// ID; the token stays on the server.
	cookieName = "anvil_session"
	// MaxSessionAge bounds a session whatever its token's lifetime: a
	// browser left logged in at the rack is logged out by the next day.
	MaxSessionAge = 12 * time.Hour
	// maxSessions bounds the sessions held; past it the oldest is
	// dropped (its browser logs in again).
	maxSessions = 10000
)

// session is one browser's login: the token it gave (checked again on
// every request, so an expired or revoked token ends it) and the CSRF
// token its forms carry.
type session struct {
	id, token, csrf string
	expires         time.Time
}

// sessions holds the logins in memory: a restart logs everyone out, and
// in Kubernetes mode a browser's requests must reach the replica it
// logged in to (docs/ui.md). It is safe for concurrent use.
type sessions struct {
	mu sync.Mutex
	m  map[string]*session
}

func randomID() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("ui: no randomness: " + err.Error()) // crypto/rand does not fail on Linux
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session for token, ending at expires at the latest.
func (s *sessions) create(token string, now, expires time.Time) *session {
	if limit := now.Add(MaxSessionAge); expires.IsZero() || expires.After(limit) {
		expires = limit
	}
	ss := &session{id: randomID(), token: token, csrf: randomID(), expires: expires}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*session{}
	}
	if len(s.m) >= maxSessions {
		var oldest *session
		for _, o := range s.m {
			if o.expires.Before(now) {
				delete(s.m, o.id)
			} else if oldest == nil || o.expires.Before(oldest.expires) {
				oldest = o
			}
		}
		if len(s.m) >= maxSessions && oldest != nil {
			delete(s.m, oldest.id)
		}
	}
	s.m[ss.id] = ss
	return ss
}

// get returns the live session of r's cookie, or nil.
func (s *sessions) get(r *http.Request, now time.Time) *session {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[c.Value]
	if ss != nil && !now.Before(ss.expires) {
		delete(s.m, ss.id)
		return nil
	}
	return ss
}

// end forgets the session id.
func (s *sessions) end(id string) {
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}

// validCSRF reports whether got is ss's CSRF token, in constant time.
func (ss *session) validCSRF(got string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(ss.csrf)) == 1
}

// setCookie sets (or, with ss nil, clears) the session cookie: HttpOnly
// (no script reads it), SameSite=Strict (no other site's page sends it),
// Secure over TLS, and scoped to /ui/.
func setCookie(w http.ResponseWriter, r *http.Request, ss *session) {
	c := &http.Cookie{Name: cookieName, Path: basePath, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}
	if ss == nil {
		c.MaxAge = -1
	} else {
		c.Value = ss.id
		c.Expires = ss.expires
	}
	http.SetCookie(w, c)
}
