package oci

import (
	"fmt"
	"strconv"
	"strings"
)

// sizeUnits are the suffixes ParseSize takes, in bytes: binary, as the
// kernel's own size arguments (mem=512M) are.
var sizeUnits = []struct {
	suffix string
	n      int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// ParseSize reads a cache size: a whole number of bytes with an optional
// binary suffix, K, M, G, T (or KiB, MiB, GiB, TiB), any case: "512M",
// "2GiB", "1073741824". It must be positive and below 8 EiB.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if len(t) > len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.n
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > (1<<63-1)/mult {
		return 0, fmt.Errorf("size %q: want a positive whole number with an optional K, M, G or T (binary: 512M is 512 MiB)", s)
	}
	return n * mult, nil
}

// FormatSize writes n as ParseSize reads it: the largest unit that
// divides it ("512M", "2G"), else bytes.
func FormatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		n      int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n >= u.n && n%u.n == 0 {
			return strconv.FormatInt(n/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
