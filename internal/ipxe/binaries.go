package ipxe

import (
	"embed"
	"io/fs"
	"strings"
)

// The iPXE binaries, copied unmodified from Debian's ipxe packages by
// scripts/refresh-ipxe.sh (make ipxe-refresh): the x86 ones from
// bookworm's, the ARM64 one from the next release's (bookworm's has
// none). binaries/README.md records the package versions, upstream
// commits and checksums; binaries/COPYING.* the licence (GPL-2).
//
//go:embed binaries/undionly.kpxe binaries/ipxe.efi binaries/snponly.efi binaries/ipxe-arm64.efi
var binaries embed.FS

//go:embed binaries/VERSION
var version string

//go:embed binaries/VERSION-arm64
var versionARM64 string

// Binaries returns the bundled iPXE binaries as a flat file system:
// BinaryBIOS, BinaryEFIx8664, BinarySNPOnly and BinaryEFIARM64 at its
// root, nothing else.
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

// VersionARM64 returns the Debian version of the package BinaryEFIARM64
// comes from, e.g. "1.21.1+git20250501.dad20602+dfsg-1".
func VersionARM64() string { return strings.TrimSpace(versionARM64) }
