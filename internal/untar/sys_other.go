//go:build !linux

package untar

import (
	"errors"
	"os"
)

// mknodAt is unsupported off Linux: such entries are counted as skipped.
func mknodAt(*os.File, string, byte, uint32, int64, int64) error { return errors.ErrUnsupported }
