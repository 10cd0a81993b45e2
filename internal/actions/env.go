package actions

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"io/fs"
	"math"
	"strconv"
	"strings"
)

// env is an action's environment, read with the parsers below. Every
// error names the variable and shows the value it could not use.
type env map[string]string

// str is the variable's value with surrounding space removed ("" when
// unset): device paths, URLs and flags are written in YAML, where a
// stray space or newline is easy to add.
func (e env) str(name string) string { return strings.TrimSpace(e[name]) }

// required is str, or an error when the variable is unset or blank.
func (e env) required(name string) (string, error) {
	v := e.str(name)
	if v == "" {
		return "", fmt.Errorf("%s is required", name)
	}
	return v, nil
}

// boolean reads a flag: 1, t, true, y, yes, on (true) or 0, f, false, n,
// no, off (false), in any case; unset or blank is def.
func (e env) boolean(name string, def bool) (bool, error) {
	v, err := parseBool(e.str(name), def)
	if err != nil {
		return false, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

// parseBool is env.boolean's parser.
func parseBool(v string, def bool) (bool, error) {
	switch strings.ToLower(v) {
	case "":
		return def, nil
	case "1", "t", "true", "y", "yes", "on":
		return true, nil
	case "0", "f", "false", "n", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean (true or false)", v)
}

// integer reads a decimal integer in [lo, hi]; unset or blank is def.
func (e env) integer(name string, def, lo, hi int64) (int64, error) {
	v := e.str(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%s: %q is not a whole number from %d to %d", name, v, lo, hi)
	}
	return n, nil
}

// id reads a user or group ID; unset or blank is 0 (root).
func (e env) id(name string) (int, error) {
	n, err := e.integer(name, 0, 0, math.MaxUint32-1)
	return int(n), err
}

// mode reads an octal file mode with permission, setuid, setgid and
// sticky bits ("0644", "644", "0o755", "4755"); unset or blank is def.
func (e env) mode(name string, def fs.FileMode) (fs.FileMode, error) {
	m, err := parseMode(e.str(name), def)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return m, nil
}

// Permission bits of an octal mode as chmod(2) takes them.
const (
	modeSetuid = 0o4000
	modeSetgid = 0o2000
	modeSticky = 0o1000
	modePerm   = 0o777
)

// parseMode is env.mode's parser.
func parseMode(v string, def fs.FileMode) (fs.FileMode, error) {
	if v == "" {
		return def, nil
	}
	digits := strings.TrimPrefix(strings.TrimPrefix(v, "0o"), "0O")
	n, err := strconv.ParseUint(digits, 8, 32)
	if err != nil || digits == "" || n > 0o7777 {
		return 0, fmt.Errorf("%q is not an octal file mode (e.g. 0644)", v)
	}
	return unixMode(uint32(n)), nil
}

// unixMode converts chmod(2) bits to an fs.FileMode.
func unixMode(n uint32) fs.FileMode {
	m := fs.FileMode(n & modePerm)
	if n&modeSetuid != 0 {
		m |= fs.ModeSetuid
	}
	if n&modeSetgid != 0 {
		m |= fs.ModeSetgid
	}
	if n&modeSticky != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// checksum is an expected digest of a stream: the algorithm as written
// in "sha256:…" and the digest's bytes.
type checksum struct {
	algo string
	sum  []byte
}

// Supported checksum algorithms and their digest sizes.
var checksumAlgos = map[string]struct {
	size int
	new  func() hash.Hash
}{
	"sha256": {sha256.Size, sha256.New},
	"sha512": {sha512.Size, sha512.New},
}

// parseChecksum reads "sha256:HEX" or "sha512:HEX" (the form of an OCI
// digest; hex in either case). A bare hex digest is taken as sha256 or
// sha512 by its length. "" is no checksum (nil).
func parseChecksum(v string) (*checksum, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, nil
	}
	algo, digits, ok := strings.Cut(v, ":")
	if !ok {
		digits = v
		switch len(v) {
		case 2 * sha256.Size:
			algo = "sha256"
		case 2 * sha512.Size:
			algo = "sha512"
		default:
			return nil, fmt.Errorf("%q is not a checksum: write sha256:HEX or sha512:HEX", v)
		}
	}
	algo = strings.ToLower(algo)
	a, ok := checksumAlgos[algo]
	if !ok {
		return nil, fmt.Errorf("checksum algorithm %q is not supported (sha256 or sha512)", algo)
	}
	sum, err := hex.DecodeString(digits)
	if err != nil || len(sum) != a.size {
		return nil, fmt.Errorf("%q is not a %s digest (%d hex digits)", digits, algo, 2*a.size)
	}
	return &checksum{algo: algo, sum: sum}, nil
}

// String is the checksum in its canonical form, "sha256:hex".
func (c *checksum) String() string { return c.algo + ":" + hex.EncodeToString(c.sum) }

// newHash returns a hash for the checksum's algorithm.
func (c *checksum) newHash() hash.Hash { return checksumAlgos[c.algo].new() }

// checksum reads a checksum variable.
func (e env) checksum(name string) (*checksum, error) {
	c, err := parseChecksum(e[name])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return c, nil
}
