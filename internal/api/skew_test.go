package api

import (
	"testing"
	"time"
)

func TestClockSkew(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name, sentAt string
		want         time.Duration
	}{
		{"agent behind", now.Add(-90 * time.Second).Format(time.RFC3339Nano), 90 * time.Second},
		{"agent ahead", now.Add(2 * time.Hour).Format(time.RFC3339Nano), -2 * time.Hour},
		{"no header", "", 0},
		{"malformed", "yesterday", 0},
		{"RTC never set", "1970-01-01T00:00:00Z", now.Sub(time.Unix(0, 0))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := clockSkew(tc.sentAt, now); got != tc.want {
				t.Errorf("clockSkew(%q) = %v; want %v", tc.sentAt, got, tc.want)
			}
		})
	}
}
