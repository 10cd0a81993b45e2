package auth_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/anvilproj/anvil/internal/auth"
)

func TestBearerToken(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers []string // Authorization values
		want    string
		reason  auth.Reason
	}{
		{name: "none", reason: auth.ReasonNoToken},
		{name: "empty", headers: []string{""}, reason: auth.ReasonNoToken},
		{name: "Bearer", headers: []string{"Bearer abc.def.ghi"}, want: "abc.def.ghi"},
		{name: "lower case", headers: []string{"bearer abc.def.ghi"}, want: "abc.def.ghi"},
		{name: "upper case", headers: []string{"BEARER abc.def.ghi"}, want: "abc.def.ghi"},
		{name: "extra spaces", headers: []string{"  Bearer   abc.def.ghi  "}, want: "abc.def.ghi"},
		{name: "scheme only", headers: []string{"Bearer"}, reason: auth.ReasonNoToken},
		{name: "scheme and spaces", headers: []string{"Bearer    "}, reason: auth.ReasonNoToken},
		{name: "Basic", headers: []string{"Basic YWxpY2U6c2VjcmV0"}, reason: auth.ReasonMalformed},
		{name: "no space", headers: []string{"Bearerabc.def.ghi"}, reason: auth.ReasonMalformed},
		{name: "token with a space", headers: []string{"Bearer abc def"}, reason: auth.ReasonMalformed},
		{name: "two headers", headers: []string{"Bearer a.b.c", "Bearer d.e.f"}, reason: auth.ReasonMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tc.headers {
				h.Add("Authorization", v)
			}
			got, err := auth.BearerToken(h)
			if tc.reason != "" {
				if r := auth.ReasonOf(err); r != tc.reason {
					t.Fatalf("BearerToken(%q) = %q, %v; want reason %q", tc.headers, got, err, tc.reason)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("BearerToken(%q) = %q, %v; want %q", tc.headers, got, err, tc.want)
			}
		})
	}
}

func TestReasonOf(t *testing.T) {
	te := &auth.TokenError{Reason: auth.ReasonExpired}
	for _, tc := range []struct {
		err  error
		want auth.Reason
	}{
		{nil, ""},
		{errors.New("other"), ""},
		{te, auth.ReasonExpired},
		{fmt.Errorf("authenticate: %w", te), auth.ReasonExpired},
	} {
		if got := auth.ReasonOf(tc.err); got != tc.want {
			t.Errorf("ReasonOf(%v) = %q; want %q", tc.err, got, tc.want)
		}
	}
}
