// Package ipxe owns the iPXE binaries Anvil serves (embedded from Debian's
// ipxe package, see binaries/README.md), the URL paths they and the
// per-machine scripts are served under, and the rendering of iPXE scripts
// from plain values.
//
// It knows nothing of Hardware, workflows or stores: the boot policy
// (internal/bootpolicy) decides what a machine gets and calls the renderers
// here; the protocol servers (dhcp, tftp, httpboot) use the names and paths.
// It must not import any other package of this module.
package ipxe

import (
	"github.com/anvilproj/anvil/internal/macaddr"
)

// Firmware is the kind of network boot client, as told by DHCP option 93
// (client system architecture, RFC 4578 and IANA's registry) and option 60.
type Firmware int

// Firmware kinds Anvil serves.
const (
	FirmwareUnknown   Firmware = iota
	FirmwareBIOS               // PC BIOS PXE (arch 0)
	FirmwareEFIx8664           // x86-64 UEFI PXE (arch 7, 9)
	FirmwareEFIARM64           // ARM64 UEFI PXE (arch 11)
	FirmwareHTTPx8664          // x86-64 UEFI HTTP boot (arch 16)
	FirmwareHTTPARM64          // ARM64 UEFI HTTP boot (arch 19)
)

func (f Firmware) String() string {
	switch f {
	case FirmwareBIOS:
		return "bios"
	case FirmwareEFIx8664:
		return "uefi-x86_64"
	case FirmwareEFIARM64:
		return "uefi-arm64"
	case FirmwareHTTPx8664:
		return "http-uefi-x86_64"
	case FirmwareHTTPARM64:
		return "http-uefi-arm64"
	}
	return "unknown"
}

// IsHTTP reports whether f is a UEFI HTTP boot client (it wants an http://
// URL as its boot file, not a TFTP path).
func (f Firmware) IsHTTP() bool { return f == FirmwareHTTPx8664 || f == FirmwareHTTPARM64 }

// IsEFI reports whether f runs UEFI firmware.
func (f Firmware) IsEFI() bool { return f != FirmwareBIOS && f != FirmwareUnknown }

// Binary file names, as Debian's ipxe package names them (BinaryEFIARM64
// as the package that has it does, see binaries.go). An operator's file of
// the same name in the TFTP/HTTP directory is served instead.
const (
	BinaryBIOS     = "undionly.kpxe"
	BinaryEFIx8664 = "ipxe.efi"
	BinarySNPOnly  = "snponly.efi"
	BinaryEFIARM64 = "ipxe-arm64.efi"
)

// BinaryFor returns the iPXE binary a client of firmware f should load.
// Unknown firmware gets the BIOS binary (the safe guess for old PXE ROMs
// that send no option 93).
func BinaryFor(f Firmware) string {
	switch f {
	case FirmwareEFIx8664, FirmwareHTTPx8664:
		return BinaryEFIx8664
	case FirmwareEFIARM64, FirmwareHTTPARM64:
		return BinaryEFIARM64
	}
	return BinaryBIOS
}

// URL paths on the HTTP port.
const (
	// BinaryPrefix serves the iPXE binaries: BinaryPrefix + name.
	BinaryPrefix = "/ipxe/binary/"
	// ScriptPrefix serves per-machine scripts: ScriptPrefix + mac + "/" + ScriptName.
	ScriptPrefix = "/ipxe/script/"
	// ScriptName is the script file name iPXE is pointed at.
	ScriptName = "auto.ipxe"
)

// ScriptPath returns the URL path of mac's script, e.g.
// "/ipxe/script/52:54:00:12:34:56/auto.ipxe".
func ScriptPath(mac macaddr.MAC) string {
	return ScriptPrefix + mac.String() + "/" + ScriptName
}

// BinaryPath returns the URL path of the binary called name.
func BinaryPath(name string) string { return BinaryPrefix + name }
