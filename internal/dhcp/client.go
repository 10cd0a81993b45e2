package dhcp

import (
	"encoding/binary"
	"strings"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/anvilproj/anvil/internal/ipxe"
)

// client is what a request says about the network boot firmware that sent
// it.
type client struct {
	// arch is the first architecture of option 93, or the one in option
	// 60's "PXEClient:Arch:NNNNN"; -1 if the client gave none.
	arch     int
	firmware ipxe.Firmware
	pxe      bool   // option 60 starts with "PXEClient"
	http     bool   // option 60 starts with "HTTPClient", or arch is HTTP boot
	ipxe     string // "iPXE" or "Tinkerbell" (option 77), "iPXE" (option 175), or ""
}

// netboot reports whether the client is a network boot client at all.
func (c client) netboot() bool { return c.pxe || c.http || c.ipxe != "" }

// kind names the client for logs: "iPXE", "Tinkerbell", "HTTPClient",
// "PXEClient" or "".
func (c client) kind() string {
	switch {
	case c.ipxe != "":
		return c.ipxe
	case c.http:
		return vendorClassHTTP
	case c.pxe:
		return vendorClassPXE
	}
	return ""
}

// supported reports whether the server has a binary for the client's
// architecture: a client that names an architecture iPXE is not built for
// (e.g. 32-bit UEFI) must not be sent a binary for another one. A client
// that names none gets the BIOS binary (ipxe.BinaryFor).
func (c client) supported() bool { return c.arch < 0 || c.firmware != ipxe.FirmwareUnknown }

// classify reads options 60, 77, 93 and 175 of req.
func classify(req *dhcpv4.DHCPv4) client {
	return classifyOptions(req.Options[optVendorClass], req.Options[optClientArch], req.Options[optUserClass],
		req.Options.Has(dhcpv4.GenericOptionCode(optIPXEEncap)))
}

// classifyOptions is classify over the option values themselves: vc
// (option 60), arch (93), uc (77), and whether option 175 is present. The
// template path (template.go) reads them without an option map.
func classifyOptions(vc, arch, uc []byte, ipxeEncap bool) client {
	c := client{arch: -1}
	c.pxe = hasPrefix(vc, vendorClassPXE)
	c.http = hasPrefix(vc, vendorClassHTTP)
	if a := arch; len(a) >= 2 {
		// A list of 16-bit types (RFC 4578 §2.1); the first is the one
		// the client booted with.
		c.arch = int(binary.BigEndian.Uint16(a))
	} else if c.pxe || c.http {
		c.arch = archFromVendorClass(string(vc))
	}
	c.ipxe = ipxeUserClass(uc)
	if c.ipxe == "" && ipxeEncap {
		c.ipxe = userClassIPXE
	}
	switch c.arch {
	case archBIOS:
		c.firmware = ipxe.FirmwareBIOS
	case archEFIBC, archEFIx8664:
		c.firmware = ipxe.FirmwareEFIx8664
	case archEFIARM64:
		c.firmware = ipxe.FirmwareEFIARM64
	case archHTTPx8664:
		c.firmware = ipxe.FirmwareHTTPx8664
	case archHTTPARM64:
		c.firmware = ipxe.FirmwareHTTPARM64
	}
	if c.http {
		// An HTTPClient that reports its PXE architecture type still
		// wants an URL.
		switch c.firmware {
		case ipxe.FirmwareEFIx8664:
			c.firmware = ipxe.FirmwareHTTPx8664
		case ipxe.FirmwareEFIARM64:
			c.firmware = ipxe.FirmwareHTTPARM64
		}
	}
	if c.firmware.IsHTTP() {
		c.http = true
	}
	return c
}

func hasPrefix(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && string(b[:len(prefix)]) == prefix
}

// archFromVendorClass reads the architecture of "PXEClient:Arch:00007:…"
// (PXE 2.1 §2.2.1; HTTPClient uses the same form), or returns -1.
func archFromVendorClass(vc string) int {
	const marker = ":Arch:"
	i := strings.Index(vc, marker)
	if i < 0 || len(vc) < i+len(marker)+5 {
		return -1
	}
	n := 0
	for _, ch := range vc[i+len(marker) : i+len(marker)+5] {
		if ch < '0' || ch > '9' {
			return -1
		}
		n = n*10 + int(ch-'0')
	}
	return n
}

// ipxeUserClass returns "iPXE" or "Tinkerbell" if option 77 says so, in
// either of its forms: iPXE sends the bare string, RFC 3004 clients a list
// of length-prefixed strings.
func ipxeUserClass(uc []byte) string {
	if len(uc) == 0 {
		return ""
	}
	if s := userClassName(uc); s != "" {
		return s
	}
	for len(uc) > 0 {
		n := int(uc[0])
		if n == 0 || 1+n > len(uc) {
			return ""
		}
		if s := userClassName(uc[1 : 1+n]); s != "" {
			return s
		}
		uc = uc[1+n:]
	}
	return ""
}

func userClassName(b []byte) string {
	switch string(b) {
	case userClassIPXE:
		return userClassIPXE
	case userClassTinkerbell:
		return userClassTinkerbell
	}
	return ""
}
