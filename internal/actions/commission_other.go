//go:build !linux

package actions

import (
	"fmt"
	"os"
)

const openDirect = 0

func nvmeLog(*os.File, uint8, []byte) error {
	return fmt.Errorf("%w: %v", errNotSupported, errUnsupported)
}

func sgIO(*os.File, []byte, []byte) (int, error) {
	return 0, fmt.Errorf("%w: %v", errNotSupported, errUnsupported)
}
