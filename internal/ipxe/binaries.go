package ipxe

import (
	"embed"
	"io/fs"
	"strings"
)

// The iPXE binaries, copied unmodified from Debian's ipxe package by
// scripts/refresh-ipxe.sh (make ipxe-refresh). binaries/README.md records
// the package version, upstream commit and checksums; binaries/COPYING.* the
// licence (GPL-2).
//
//go:embed binaries/undionly.kpxe binaries/ipxe.efi binaries/snponly.efi
var binaries embed.FS

//go:embed binaries/VERSION
var version string

// Binaries returns the bundled iPXE binaries as a flat file system:
// BinaryBIOS, BinaryEFIx8664 and BinarySNPOnly at its root, nothing else.
// The files are read-only and their modification times are zero (embedded
// files have none). It is safe for concurrent use.
func Binaries() fs.FS {
	sub, err := fs.Sub(binaries, "binaries")
	if err != nil {
		panic("ipxe: embedded binaries: " + err.Error()) // cannot happen: the directory is embedded
	}
	return sub
}

// Version returns the Debian version of the bundled iPXE build, e.g.
// "1.0.0+git-20190125.36a4c85-5.1".
func Version() string { return strings.TrimSpace(version) }
