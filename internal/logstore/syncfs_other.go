//go:build !linux

package logstore

import "errors"

func syncDir(string) error { return errors.New("syncfs not available") }

const haveSyncDir = false
