package main

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseRates(t *testing.T) {
	got, err := parseRates("2000, 4000,8000")
	if err != nil || !reflect.DeepEqual(got, []int{2000, 4000, 8000}) {
		t.Errorf("parseRates = %v, %v; want [2000 4000 8000]", got, err)
	}
	if got, err := parseRates(""); err != nil || got != nil {
		t.Errorf(`parseRates("") = %v, %v; want none`, got, err)
	}
	for _, bad := range []string{"2000,", "x", "-5", "0"} {
		if _, err := parseRates(bad); err == nil || !strings.Contains(err.Error(), "-rates") {
			t.Errorf("parseRates(%q) = %v; want an error naming -rates", bad, err)
		}
	}
}
