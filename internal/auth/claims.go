package auth

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
)

// Registered claim names (RFC 7519 section 4.1).
const (
	claimIssuer    = "iss"
	claimAudience  = "aud"
	claimExpiry    = "exp"
	claimNotBefore = "nbf"
	claimIssuedAt  = "iat"
	claimTokenID   = "jti"
)

// registered checks the registered claims of a verified token (exp, nbf,
// iat, iss, aud) and returns its expiry.
func (v *Verifier) registered(claims map[string]any) (time.Time, error) {
	now := v.now()
	exp, ok, err := numericDate(claims, claimExpiry)
	switch {
	case err != nil:
		return time.Time{}, err
	case !ok:
		return time.Time{}, &TokenError{Reason: ReasonMissingClaim, Detail: "no exp (tokens must expire)"}
	case !now.Before(exp.Add(v.skew)):
		return time.Time{}, &TokenError{Reason: ReasonExpired, Detail: fmt.Sprintf("exp %s, %s ago", exp.UTC().Format(time.RFC3339), now.Sub(exp).Round(time.Second))}
	}
	for _, name := range []string{claimNotBefore, claimIssuedAt} {
		t, ok, err := numericDate(claims, name)
		if err != nil {
			return time.Time{}, err
		}
		if ok && now.Add(v.skew).Before(t) {
			return time.Time{}, &TokenError{Reason: ReasonNotYetValid, Detail: fmt.Sprintf("%s %s, in %s", name, t.UTC().Format(time.RFC3339), t.Sub(now).Round(time.Second))}
		}
	}
	if v.issuer != "" {
		if iss, _ := claims[claimIssuer].(string); iss != v.issuer {
			return time.Time{}, &TokenError{Reason: ReasonIssuer, Detail: fmt.Sprintf("iss %s, want %q", quote(iss), v.issuer)}
		}
	}
	if v.audience != "" && !hasAudience(claims[claimAudience], v.audience) {
		return time.Time{}, &TokenError{Reason: ReasonAudience, Detail: fmt.Sprintf("aud does not contain %q", v.audience)}
	}
	return exp, nil
}

// principal checks the registered claims of a verified token and maps the
// configured ones to a Principal.
func (v *Verifier) principal(claims map[string]any) (*Principal, error) {
	exp, err := v.registered(claims)
	if err != nil {
		return nil, err
	}
	p := &Principal{ExpiresAt: exp}
	sub, ok, err := stringClaim(claims, v.subClaim)
	if err != nil {
		return nil, err
	}
	if !ok || sub == "" {
		return nil, &TokenError{Reason: ReasonMissingClaim, Detail: "no subject claim " + quote(v.subClaim)}
	}
	p.Subject = sub
	if p.TokenID, _, err = stringClaim(claims, claimTokenID); err != nil {
		return nil, err
	}
	if p.Org, _, err = stringClaim(claims, v.orgClaim); err != nil {
		return nil, err
	}
	rc := v.roleClaim
	if _, ok := lookupClaim(claims, rc); !ok && rc == DefaultRolesClaim {
		rc = KeycloakRolesClaim
	}
	if p.Roles, err = rolesClaim(claims, rc); err != nil {
		return nil, err
	}
	return p, nil
}

// numericDate reads a NumericDate claim (RFC 7519 section 2: seconds since
// the epoch, possibly fractional), reporting whether it is present.
func numericDate(claims map[string]any, name string) (time.Time, bool, error) {
	raw, ok := claims[name]
	if !ok {
		return time.Time{}, false, nil
	}
	f, ok := raw.(float64)
	if !ok {
		return time.Time{}, false, malformed("claim %s is not a number", name)
	}
	// Beyond ±2^62 s the conversion to int64 overflows; such dates are
	// as good as never (or always).
	const limit = 1 << 62
	f = math.Max(-limit, math.Min(limit, f))
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), true, nil
}

// hasAudience reports whether aud, a string or an array of strings
// (RFC 7519 section 4.1.3), contains want.
func hasAudience(aud any, want string) bool {
	switch a := aud.(type) {
	case string:
		return a == want
	case []any:
		for _, e := range a {
			if s, ok := e.(string); ok && s == want {
				return true
			}
		}
	}
	return false
}

// lookupClaim returns the claim called name or, if there is none and name
// has dots, the value at that path through nested objects. A name is first
// taken whole because some IdPs name claims with URLs
// ("https://example.com/roles").
func lookupClaim(claims map[string]any, name string) (any, bool) {
	if v, ok := claims[name]; ok {
		return v, true
	}
	if !strings.Contains(name, ".") {
		return nil, false
	}
	var cur any = claims
	for part := range strings.SplitSeq(name, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// stringClaim returns the string claim at name, reporting whether it is
// present; a claim of another type is malformed.
func stringClaim(claims map[string]any, name string) (string, bool, error) {
	raw, ok := lookupClaim(claims, name)
	if !ok || raw == nil {
		return "", false, nil
	}
	s, ok := raw.(string)
	if !ok {
		return "", false, malformed("claim %s is not a string", quote(name))
	}
	return s, true, nil
}

// rolesClaim returns the role names at name: an array of strings, or one
// string of names separated by spaces or commas. Absent means none.
func rolesClaim(claims map[string]any, name string) ([]string, error) {
	raw, ok := lookupClaim(claims, name)
	if !ok || raw == nil {
		return nil, nil
	}
	switch r := raw.(type) {
	case string:
		return strings.FieldsFunc(r, func(c rune) bool { return c == ',' || unicode.IsSpace(c) }), nil
	case []any:
		roles := make([]string, 0, len(r))
		for _, e := range r {
			s, ok := e.(string)
			if !ok {
				return nil, malformed("claim %s holds a non-string", quote(name))
			}
			roles = append(roles, s)
		}
		return roles, nil
	}
	return nil, malformed("claim %s is neither an array of strings nor a string", quote(name))
}
