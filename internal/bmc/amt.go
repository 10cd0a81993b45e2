package bmc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anvilproj/anvil/internal/bmc/wsman"
	"github.com/anvilproj/anvil/internal/model"
)

// IntelAMT speaks Intel Active Management Technology's WS-Management
// (DMTF DSP0226 over HTTP, Digest authentication) with Anvil's own client
// (internal/bmc/wsman): the power state from
// CIM_AssociatedPowerManagementService, power through
// CIM_PowerManagementService.RequestPowerStateChange, and the next boot
// through AMT_BootSettingData, CIM_BootService.SetBootConfigRole and
// CIM_BootConfigSetting.ChangeBootOrder. AMT's storage redirection (IDE-R,
// USB-R) is not virtual media by URL, so it is no MediaProvider. The zero
// value is ready to use and trusts the system's CAs.
type IntelAMT struct {
	// Timeout bounds one HTTP request, TLS handshake included. If 0, uses
	// DefaultAMTTimeout.
	Timeout time.Duration
	// RootCAs verifies the certificates of AMTs spoken to over TLS (a
	// Machine with insecureTLS skips that). If nil, uses the system's.
	RootCAs *x509.CertPool
}

// DefaultAMTTimeout bounds one AMT request. AMT firmware answers within a
// second or two, a power change included (it returns before the platform
// follows).
const DefaultAMTTimeout = 15 * time.Second

// AMT's ports: 16992 for HTTP, 16993 for TLS.
const (
	AMTPortHTTP = 16992
	AMTPortTLS  = 16993
)

// Resource URIs of the classes used.
const (
	cimNS                   = "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/"
	amtNS                   = "http://intel.com/wbem/wscim/1/amt-schema/1/"
	uriAssociatedPowerMgmt  = cimNS + "CIM_AssociatedPowerManagementService"
	uriPowerMgmtService     = cimNS + "CIM_PowerManagementService"
	uriComputerSystem       = cimNS + "CIM_ComputerSystem"
	uriBootService          = cimNS + "CIM_BootService"
	uriBootConfigSetting    = cimNS + "CIM_BootConfigSetting"
	uriBootSourceSetting    = cimNS + "CIM_BootSourceSetting"
	uriAMTBootSettingData   = amtNS + "AMT_BootSettingData"
	amtBootConfigInstanceID = "Intel(r) AMT: Boot Configuration 0"
)

// The instances AMT documents by their keys (Intel AMT SDK, Remote
// Control use cases).
var (
	selPowerService = []wsman.Selector{
		{Name: "CreationClassName", Value: "CIM_PowerManagementService"},
		{Name: "Name", Value: "Intel(r) AMT Power Management Service"},
		{Name: "SystemCreationClassName", Value: "CIM_ComputerSystem"},
		{Name: "SystemName", Value: "Intel(r) AMT"},
	}
	selManagedSystem = []wsman.Selector{
		{Name: "CreationClassName", Value: "CIM_ComputerSystem"},
		{Name: "Name", Value: "ManagedSystem"},
	}
	selBootService = []wsman.Selector{
		{Name: "CreationClassName", Value: "CIM_BootService"},
		{Name: "Name", Value: "Intel(r) AMT Boot Service"},
		{Name: "SystemCreationClassName", Value: "CIM_ComputerSystem"},
		{Name: "SystemName", Value: "Intel(r) AMT"},
	}
	selBootConfig      = []wsman.Selector{{Name: "InstanceID", Value: amtBootConfigInstanceID}}
	selBootSettingData = []wsman.Selector{{Name: "InstanceID", Value: "Intel(r) AMT:BootSettingData 0"}}
)

// CIM PowerState values (DSP1027) that AMT reports and accepts.
const (
	amtOn              = 2
	amtSleepLight      = 3
	amtSleepDeep       = 4
	amtPowerCycle      = 5 // Power Cycle (Off - Soft)
	amtOffHard         = 6
	amtHibernate       = 7
	amtOff             = 8  // Power Off - Soft (AMT: off, not graceful)
	amtPowerCycleHard  = 9  // Power Cycle (Off - Hard)
	amtMasterBusReset  = 10 // a hardware reset
	amtOffSoftGraceful = 12 // an OS shutdown; needs the OS's Intel LMS
	amtOffHardGraceful = 13
	amtCycleSoftGrace  = 15
	amtCycleHardGrace  = 16
)

// roleIsNextSingleUse is SetBootConfigRole's Role for "the next boot,
// once": the only next-boot role AMT has (Intel AMT SDK, Boot Control).
const roleIsNextSingleUse = "1"

// CIM method ReturnValues that mean success: 0 Completed with No Error,
// and 4096 Job Started (AMT completes at once).
const (
	cimCompleted  = 0
	cimJobStarted = 4096
)

// amtPowerNames names CIM PowerState values for messages.
var amtPowerNames = map[int]string{
	1: "Other", 2: "On", 3: "Sleep - Light", 4: "Sleep - Deep", 5: "Power Cycle (Off - Soft)",
	6: "Off - Hard", 7: "Hibernate (Off - Soft)", 8: "Off - Soft", 9: "Power Cycle (Off - Hard)",
	10: "Master Bus Reset", 11: "Diagnostic Interrupt (NMI)", 12: "Off - Soft Graceful",
	13: "Off - Hard Graceful", 14: "Master Bus Reset Graceful", 15: "Power Cycle (Off - Soft Graceful)",
	16: "Power Cycle (Off - Hard Graceful)",
}

func powerName(v int) string {
	if n, ok := amtPowerNames[v]; ok {
		return fmt.Sprintf("%d (%s)", v, n)
	}
	return strconv.Itoa(v)
}

// amtActions maps a power action to the PowerState requested.
var amtActions = map[string]int{
	model.PowerActionOn:    amtOn,
	model.PowerActionOff:   amtOff,
	model.PowerActionSoft:  amtOffSoftGraceful,
	model.PowerActionCycle: amtPowerCycle,
	model.PowerActionReset: amtMasterBusReset,
}

// amtBootSources are the CIM_BootSourceSetting instances AMT has for
// Rufio's devices; "bios" is AMT_BootSettingData.BIOSSetup with no
// source, "safe" a hard-drive boot with UseSafeMode.
var amtBootSources = map[string]string{
	model.BootDevicePXE:   "Intel(r) AMT: Force PXE Boot",
	model.BootDeviceDisk:  "Intel(r) AMT: Force Hard-drive Boot",
	model.BootDeviceCDROM: "Intel(r) AMT: Force CD/DVD Boot",
	model.BootDeviceSafe:  "Intel(r) AMT: Force Hard-drive Boot",
	model.BootDeviceBIOS:  "",
}

// amtConn fills in conn from the Machine's Intel AMT options: the scheme
// is providerOptions.intelAMT.hostScheme (Rufio's default http); the port
// providerOptions.intelAMT.port, else the connection's port unless it is
// 623 (Rufio's default, IPMI's), else 16992 for http and 16993 for https.
// A port of 16993 with no scheme is AMT's TLS port and means https.
func amtConn(conn *Conn, o *model.ProviderOptions) {
	if conn.Port == model.DefaultIPMIPort {
		conn.Port = 0
	}
	if o != nil && o.IntelAMT != nil {
		if o.IntelAMT.Port != 0 {
			conn.Port = o.IntelAMT.Port
		}
		conn.Scheme = strings.ToLower(o.IntelAMT.HostScheme)
	}
	if conn.Scheme == "" {
		conn.Scheme = "http"
		if conn.Port == AMTPortTLS {
			conn.Scheme = "https"
		}
	}
	if conn.Port == 0 {
		conn.Port = AMTPortHTTP
		if conn.Scheme == "https" {
			conn.Port = AMTPortTLS
		}
	}
}

// Name implements Provider.
func (IntelAMT) Name() string { return model.ProviderIntelAMT }

// Open implements Provider. WS-Management has no session: Open reads the
// power state once, which proves the address, the TLS and the
// credentials, and keeps the Digest challenge for the calls that follow.
func (p IntelAMT) Open(ctx context.Context, c Conn) (Session, error) {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultAMTTimeout
	}
	scheme := c.Scheme
	if scheme == "" {
		scheme = "http"
	}
	if scheme != "http" && scheme != "https" {
		return nil, fmt.Errorf("providerOptions.intelAMT.hostScheme %q: want http or https", c.Scheme)
	}
	endpoint := scheme + "://" + net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) + "/wsman"
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: p.RootCAs, InsecureSkipVerify: c.InsecureTLS}, //nolint:gosec // the Machine's insecureTLS asks for it
		TLSHandshakeTimeout: timeout,
		DialContext:         (&net.Dialer{Timeout: timeout}).DialContext,
		MaxConnsPerHost:     1, // AMT serves few connections
	}
	s := &amtSession{
		tr:       tr,
		endpoint: endpoint,
		scheme:   scheme,
		c: &wsman.Client{Endpoint: endpoint, HTTP: &http.Client{Timeout: timeout,
			Transport: &wsman.DigestTransport{Username: c.Username, Password: c.Password, Base: tr}}},
	}
	if _, _, err := s.power(ctx); err != nil {
		tr.CloseIdleConnections()
		return nil, fmt.Errorf("open session with %s: %w", endpoint, err)
	}
	return s, nil
}

// amtSession is a Digest-authenticated WS-Management client of one AMT.
type amtSession struct {
	c        *wsman.Client
	tr       *http.Transport
	endpoint string
	scheme   string
}

// explain turns the client's and net/http's errors into one line an
// operator acts on; what names the WS-Management exchange.
func (s *amtSession) explain(what string, err error) error {
	var fault *wsman.Fault
	var httpErr *wsman.HTTPError
	switch {
	case errors.Is(err, wsman.ErrUnauthorized):
		return fmt.Errorf("%s: %w (the AMT refused the username or password of the Secret)", what, err)
	case errors.As(err, &fault):
		return fmt.Errorf("%s: the AMT answered %w", what, fault)
	case s.scheme == "http" && (strings.Contains(err.Error(), "connection reset by peer") || strings.Contains(err.Error(), "HTTPS server")):
		// A TLS port (16993) spoken to in plain HTTP drops the connection.
		return fmt.Errorf("%s: %w (is it a TLS port? %s)", what, err, amtSchemeHint)
	case errors.As(err, &httpErr):
		return fmt.Errorf("%s: the AMT answered %w", what, httpErr)
	}
	return explainTransport(what, err, "providerOptions.intelAMT.port", amtSchemeHint)
}

// amtSchemeHint is what to do when the scheme does not fit the port.
const amtSchemeHint = "set providerOptions.intelAMT.hostScheme to match the port: http on 16992, https on 16993"

// power reads the system's PowerState and the states it may be asked
// for now (AvailableRequestedPowerStates; empty when AMT does not say).
func (s *amtSession) power(ctx context.Context) (int, []int, error) {
	const what = "read the power state (Enumerate CIM_AssociatedPowerManagementService)"
	items, err := s.c.EnumerateAll(ctx, uriAssociatedPowerMgmt)
	if err != nil {
		return 0, nil, s.explain(what, err)
	}
	for _, it := range items {
		v, ok := it.Value("PowerState")
		if !ok {
			continue
		}
		st, err := strconv.Atoi(v)
		if err != nil {
			return 0, nil, fmt.Errorf("%s: PowerState %q is not a number", what, v)
		}
		var avail []int
		for _, a := range it.Values("AvailableRequestedPowerStates") {
			if n, err := strconv.Atoi(a); err == nil {
				avail = append(avail, n)
			}
		}
		return st, avail, nil
	}
	return 0, nil, fmt.Errorf("%s: no instance has a PowerState (%d instances)", what, len(items))
}

// amtPowerOf maps a CIM PowerState to Anvil's: only On (2) is on; sleep
// and hibernation wait for a power on to run again, so they read as off,
// as do the transitions of a power cycle.
func amtPowerOf(st int) (string, error) {
	switch st {
	case amtOn:
		return model.PowerOn, nil
	case amtSleepLight, amtSleepDeep, amtPowerCycle, amtOffHard, amtHibernate, amtOff, amtPowerCycleHard,
		amtOffSoftGraceful, amtOffHardGraceful, amtCycleSoftGrace, amtCycleHardGrace:
		return model.PowerOff, nil
	}
	return "", fmt.Errorf("the AMT reports PowerState %s", powerName(st))
}

func (s *amtSession) PowerState(ctx context.Context) (string, error) {
	st, _, err := s.power(ctx)
	if err != nil {
		return "", err
	}
	return amtPowerOf(st)
}

// cimReturn explains a CIM method's ReturnValue (DSP1027 for
// RequestPowerStateChange; DSP1012 for the boot methods share 0-6).
func cimReturn(out *wsman.Element) error {
	v, ok := out.Value("ReturnValue")
	if !ok {
		return errors.New("the answer has no ReturnValue")
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("ReturnValue %q is not a number", v)
	}
	meaning := map[int]string{1: "Not Supported", 2: "Unknown or Unspecified Error", 3: "Cannot complete within Timeout Period",
		4: "Failed", 5: "Invalid Parameter", 6: "In Use", 4097: "Invalid State Transition", 4098: "Use of Timeout Parameter Not Supported", 4099: "Busy"}
	switch n {
	case cimCompleted, cimJobStarted:
		return nil
	}
	if m := meaning[n]; m != "" {
		return fmt.Errorf("ReturnValue %d (%s)", n, m)
	}
	return fmt.Errorf("ReturnValue %d", n)
}

func (s *amtSession) SetPower(ctx context.Context, action string) error {
	want, ok := amtActions[action]
	if !ok {
		return fmt.Errorf("power action %q: %w", action, ErrUnsupported)
	}
	cur, avail, err := s.power(ctx)
	if err != nil {
		return err
	}
	st, err := amtPowerOf(cur)
	if err != nil {
		return err
	}
	switch {
	case st == model.PowerOn && action == model.PowerActionOn,
		st == model.PowerOff && (action == model.PowerActionOff || action == model.PowerActionSoft):
		return nil // AMT refuses a change into the state the system is in
	case st == model.PowerOff && (action == model.PowerActionCycle || action == model.PowerActionReset):
		want = amtOn // a cycle or reset of a machine that is off powers it on, as with IPMI
	}
	if len(avail) > 0 && !slices.Contains(avail, want) {
		var names []string
		for _, a := range avail {
			names = append(names, powerName(a))
		}
		hint := ""
		if want == amtOffSoftGraceful {
			hint = " (a graceful off needs Intel LMS running in the OS; power off is the hard way)"
		}
		return fmt.Errorf("power %s: the AMT accepts PowerState %s now, not %s%s", action, strings.Join(names, ", "), powerName(want), hint)
	}
	what := "CIM_PowerManagementService.RequestPowerStateChange " + powerName(want)
	out, err := s.c.Invoke(ctx, uriPowerMgmtService, "RequestPowerStateChange", selPowerService,
		wsman.T(uriPowerMgmtService, "PowerState", strconv.Itoa(want)),
		wsman.EPR(uriPowerMgmtService, "ManagedElement", uriComputerSystem, selManagedSystem))
	if err != nil {
		return s.explain(what, err)
	}
	if err := cimReturn(out); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// bootOptions are AMT_BootSettingData's boot options that Intel's SDK
// says to clear ("false" and "0") before choosing a boot source; others
// (InstanceID, ElementName, read-only status, EnforceSecureBoot) are put
// back as read.
var bootOptions = map[string]string{
	"UseSOL": "false", "UseSafeMode": "false", "ReflashBIOS": "false", "BIOSSetup": "false", "BIOSPause": "false",
	"LockPowerButton": "false", "LockResetButton": "false", "LockKeyboard": "false", "LockSleepButton": "false",
	"UserPasswordBypass": "false", "ForcedProgressEvents": "false", "FirmwareVerbosity": "0",
	"ConfigurationDataReset": "false", "IDERBootDevice": "0", "UseIDER": "false", "BootMediaIndex": "0",
	"SecureErase": "false",
}

// amtReadOnly are AMT_BootSettingData properties AMT sets itself; a Put
// leaves them out.
var amtReadOnly = []string{"WinREBootEnabled", "UEFILocalPBABootEnabled", "UEFIHTTPSBootEnabled",
	"SecureBootControlEnabled", "BootguardStatus", "OptionsCleared", "BIOSLastStatus",
	"UEFIBootParametersArray", "UEFIBootNumberOfParams", "RPEEnabled", "PlatformErase"}

// SetBootDevice sets the next boot, as Intel's SDK describes: clear the
// boot options of AMT_BootSettingData (setting BIOSSetup or UseSafeMode
// when asked), make "Boot Configuration 0" the next boot's
// (SetBootConfigRole IsNextSingleUse), and put the source in its boot
// order (ChangeBootOrder). AMT's override lasts one boot, so persistent
// is refused; its sources have no BIOS/UEFI mode of their own, so efiBoot
// changes nothing (the firmware boots them in its mode).
func (s *amtSession) SetBootDevice(ctx context.Context, device string, efi, persistent bool) error {
	source, ok := amtBootSources[device]
	if !ok {
		return fmt.Errorf("boot device %q: %w by Intel AMT", device, ErrUnsupported)
	}
	if persistent {
		return fmt.Errorf("a persistent boot device: %w by Intel AMT (its boot override lasts one boot)", ErrUnsupported)
	}
	cur, err := s.c.Get(ctx, uriAMTBootSettingData, selBootSettingData)
	if err != nil {
		return s.explain("read AMT_BootSettingData", err)
	}
	put := wsman.E(uriAMTBootSettingData, "AMT_BootSettingData")
	for _, c := range cur.Children {
		if slices.Contains(amtReadOnly, c.Name.Local) {
			continue
		}
		v := strings.TrimSpace(c.Text)
		if d, ok := bootOptions[c.Name.Local]; ok {
			v = d
		}
		switch {
		case c.Name.Local == "BIOSSetup" && device == model.BootDeviceBIOS,
			c.Name.Local == "UseSafeMode" && device == model.BootDeviceSafe:
			v = "true"
		}
		put.Children = append(put.Children, wsman.T(uriAMTBootSettingData, c.Name.Local, v))
	}
	if _, err := s.c.Put(ctx, uriAMTBootSettingData, selBootSettingData, put); err != nil {
		return s.explain("put AMT_BootSettingData", err)
	}
	out, err := s.c.Invoke(ctx, uriBootService, "SetBootConfigRole", selBootService,
		wsman.EPR(uriBootService, "BootConfigSetting", uriBootConfigSetting, selBootConfig),
		wsman.T(uriBootService, "Role", roleIsNextSingleUse))
	if err == nil {
		err = cimReturn(out)
	}
	if err != nil {
		return s.explain("CIM_BootService.SetBootConfigRole IsNextSingleUse", err)
	}
	var params []*wsman.Element
	what := "CIM_BootConfigSetting.ChangeBootOrder (no source: BIOS setup)"
	if source != "" {
		params = append(params, wsman.EPR(uriBootConfigSetting, "Source", uriBootSourceSetting,
			[]wsman.Selector{{Name: "InstanceID", Value: source}}))
		what = fmt.Sprintf("CIM_BootConfigSetting.ChangeBootOrder %q", source)
	}
	out, err = s.c.Invoke(ctx, uriBootConfigSetting, "ChangeBootOrder", selBootConfig, params...)
	if err == nil {
		err = cimReturn(out)
	}
	if err != nil {
		return s.explain(what, err)
	}
	return nil
}

// Close drops the connection: WS-Management keeps no session to end.
func (s *amtSession) Close(context.Context) error {
	s.tr.CloseIdleConnections()
	return nil
}
