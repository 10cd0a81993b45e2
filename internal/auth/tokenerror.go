package auth

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// Reason is why a token was refused, in a few fixed words. Every reason
// means the same thing to a caller (HTTP 401, gRPC Unauthenticated); the set
// is small and stable so that refusals can be counted by reason.
type Reason string

// The reasons a token is refused.
const (
	ReasonNoToken      Reason = "no token"              // no Authorization header, or an empty token
	ReasonMalformed    Reason = "malformed"             // not a compact JWS, bad base64 or JSON, a claim of the wrong type
	ReasonAlgorithm    Reason = "algorithm not allowed" // alg outside the allowlist, or not the key's algorithm
	ReasonUnknownKey   Reason = "unknown key"           // no trusted key has the token's kid, even after a refresh
	ReasonBadSignature Reason = "bad signature"         // the signature does not verify with the key
	ReasonExpired      Reason = "expired"               // exp is past (beyond the clock skew)
	ReasonNotYetValid  Reason = "not yet valid"         // nbf or iat is in the future (beyond the clock skew)
	ReasonIssuer       Reason = "wrong issuer"          // iss is not the configured issuer
	ReasonAudience     Reason = "wrong audience"        // aud does not contain the configured audience
	ReasonMissingClaim Reason = "missing claim"         // exp or the subject claim is absent
	ReasonRevoked      Reason = "revoked"               // the revocation list names its jti
)

// TokenError is a refused token. Its message names the reason and a detail
// that helps the operator (which claim, which kid); it never contains the
// token, and the token's own values in it are quoted and shortened.
type TokenError struct {
	Reason Reason
	// Detail says more, for logs; may be empty.
	Detail string
	// Err is the underlying error, if any (a JWKS fetch that failed while
	// looking for an unknown key, say).
	Err error
}

func (e *TokenError) Error() string {
	s := "invalid token: " + string(e.Reason)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *TokenError) Unwrap() error { return e.Err }

// ReasonOf returns the Reason of the *TokenError in err's chain, or "" when
// there is none (err is nil, or not a token refusal).
func ReasonOf(err error) Reason {
	var te *TokenError
	if errors.As(err, &te) {
		return te.Reason
	}
	return ""
}

// bearerScheme is the authentication scheme of RFC 6750 section 2.1.
const bearerScheme = "bearer"

// BearerToken returns the token of h's Authorization header, which must be
// "Bearer <token>" (the scheme in any case, RFC 6750 section 2.1). A missing
// header is a *TokenError with ReasonNoToken; any other shape (another
// scheme, no token, several headers) is ReasonMalformed.
func BearerToken(h http.Header) (string, error) {
	vals := h.Values("Authorization")
	switch {
	case len(vals) == 0:
		return "", &TokenError{Reason: ReasonNoToken, Detail: "no Authorization header"}
	case len(vals) > 1:
		return "", &TokenError{Reason: ReasonMalformed, Detail: "more than one Authorization header"}
	}
	v := strings.TrimSpace(vals[0])
	if v == "" {
		return "", &TokenError{Reason: ReasonNoToken, Detail: "empty Authorization header"}
	}
	scheme, tok, _ := strings.Cut(v, " ")
	if !strings.EqualFold(scheme, bearerScheme) {
		return "", &TokenError{Reason: ReasonMalformed, Detail: "Authorization scheme is not Bearer (want \"Authorization: Bearer <token>\")"}
	}
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return "", &TokenError{Reason: ReasonNoToken, Detail: "Authorization: Bearer with no token"}
	}
	if strings.ContainsAny(tok, " \t") {
		return "", &TokenError{Reason: ReasonMalformed, Detail: "bearer token contains white space"}
	}
	return tok, nil
}

// quote renders a value taken from a token for an error message: quoted,
// and cut to a length that cannot flood a log.
func quote(s string) string {
	const maxLen = 64
	if len(s) > maxLen {
		s = s[:maxLen] + "…"
	}
	return strconv.Quote(s)
}
