package dhcp

// UDP ports.
const (
	// ServerPort is where DHCP servers and relay agents listen (RFC 2131 §4.1).
	ServerPort = 67
	// ClientPort is where DHCP clients listen (RFC 2131 §4.1).
	ClientPort = 68
	// PXEPort is the PXE boot server port: PXE ROMs send their proxyDHCP
	// REQUEST here after a proxyDHCP OFFER (PXE 2.1 §2.2.3).
	PXEPort = 4011
)

// MaxHops is the largest hop count a request may carry; requests that have
// crossed more relays are dropped (RFC 1542 §4.1.1 suggests 16).
const MaxHops = 16

// Client system architecture types, option 93 (RFC 4578 §2.1, IANA
// "Processor Architecture Types").
const (
	archBIOS      = 0  // Intel x86PC
	archEFIIA32   = 6  // EFI IA32: no 32-bit iPXE is shipped
	archEFIBC     = 7  // EFI BC: what most x86-64 UEFI firmware sends
	archEFIx8664  = 9  // EFI x86-64
	archEFIARM64  = 11 // ARM 64-bit UEFI
	archHTTPx8664 = 16 // x64 UEFI HTTP boot
	archHTTPARM64 = 19 // ARM 64-bit UEFI HTTP boot
)

// Values of option 60 (vendor class identifier) and option 77 (user class)
// that mark network boot clients.
const (
	// vendorClassPXE starts option 60 of PXE ROMs, e.g.
	// "PXEClient:Arch:00000:UNDI:002001" (PXE 2.1 §2.2.1).
	vendorClassPXE = "PXEClient"
	// vendorClassHTTP starts option 60 of UEFI HTTP boot clients
	// (UEFI 2.x §24.7.2, "HTTPClient:Arch:00016:UNDI:003001").
	vendorClassHTTP = "HTTPClient"
	// userClassIPXE is option 77 of a running iPXE.
	userClassIPXE = "iPXE"
	// userClassTinkerbell is option 77 of Tinkerbell's iPXE builds.
	userClassTinkerbell = "Tinkerbell"
)

// Option codes the server reads or writes (RFC 2132 unless noted), as the
// keys of dhcpv4.Options.
const (
	optPad             = 0
	optSubnetMask      = 1
	optRouter          = 3
	optDNS             = 6
	optHostName        = 12
	optDomainName      = 15
	optNTP             = 42
	optVendorSpecific  = 43
	optRequestedIP     = 50
	optLeaseTime       = 51
	optMessageType     = 53
	optServerID        = 54
	optMessage         = 56
	optRenewalTime     = 58 // T1
	optRebindingTime   = 59 // T2
	optVendorClass     = 60
	optClientID        = 61
	optTFTPServerName  = 66
	optUserClass       = 77  // RFC 3004
	optRelayAgentInfo  = 82  // RFC 3046
	optClientArch      = 93  // RFC 4578
	optClientMachineID = 97  // RFC 4578: the client's UUID/GUID
	optClasslessRoutes = 121 // RFC 3442
	// optIPXEEncap is iPXE's encapsulated options: a client that sends it
	// is a running iPXE (iPXE's own use of the site-specific range, RFC 3942).
	optIPXEEncap = 175
	optEnd       = 255
)

// PXE vendor options, encapsulated in option 43 (PXE 2.1 §2.4).
const (
	pxeDiscoveryControl = 6 // PXE_DISCOVERY_CONTROL
	// pxeDiscoveryBootFileOnly is bit 3 of PXE_DISCOVERY_CONTROL: use the
	// boot file in this offer, without boot server discovery or a menu.
	// Without it PXE ROMs wait seconds for more offers.
	pxeDiscoveryBootFileOnly = 8
)
