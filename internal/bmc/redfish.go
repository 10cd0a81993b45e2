package bmc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"

	"github.com/anvilproj/anvil/internal/model"
)

// Redfish speaks DMTF Redfish over HTTPS with github.com/stmcginnis/gofish:
// power through ComputerSystem.Reset, the next boot device through the
// system's Boot override, and virtual media through VirtualMedia's
// InsertMedia and EjectMedia actions. The zero value is ready to use and
// trusts the system's CAs.
type Redfish struct {
	// Timeout bounds one HTTP request, TLS handshake included. If 0, uses
	// DefaultRedfishTimeout.
	Timeout time.Duration
	// RootCAs verifies BMCs' certificates (a Machine with insecureTLS
	// skips that). If nil, uses the system's pool.
	RootCAs *x509.CertPool
}

// DefaultRedfishTimeout bounds one Redfish request: BMCs answer slowly
// (a second is common), but one that says nothing for this long has hung.
const DefaultRedfishTimeout = 15 * time.Second

// DefaultRedfishPort is Redfish's port when neither
// providerOptions.redfish.port nor the connection's port says otherwise.
const DefaultRedfishPort = 443

// LoadCAFile reads PEM certificates from path into a pool for
// Redfish.RootCAs.
func LoadCAFile(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("BMC CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("BMC CA file %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// redfishConn fills in conn from the Machine's Redfish options. The port
// is providerOptions.redfish.port, else the connection's port unless it is
// 623 (Rufio's default, IPMI's port), else 443.
func redfishConn(conn *Conn, o *model.ProviderOptions) {
	if conn.Port == model.DefaultIPMIPort {
		conn.Port = 0
	}
	if o != nil && o.Redfish != nil {
		if o.Redfish.Port != 0 {
			conn.Port = o.Redfish.Port
		}
		conn.SystemName = o.Redfish.SystemName
		conn.BasicAuth = o.Redfish.UseBasicAuth
	}
	if conn.Port == 0 {
		conn.Port = DefaultRedfishPort
	}
}

// Name implements Provider.
func (Redfish) Name() string { return model.ProviderRedfish }

// VirtualMedia implements MediaProvider.
func (Redfish) VirtualMedia() {}

// Open implements Provider: it reads the service root, opens a session
// (SessionService, X-Auth-Token) — or, when the Machine asks for basic
// auth or the service has no sessions, sends the credentials with each
// request — and picks the system.
func (p Redfish) Open(ctx context.Context, c Conn) (Session, error) {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultRedfishTimeout
	}
	endpoint := "https://" + net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: p.RootCAs, InsecureSkipVerify: c.InsecureTLS}, //nolint:gosec // the Machine's insecureTLS asks for it
		TLSHandshakeTimeout: timeout,
		DialContext:         (&net.Dialer{Timeout: timeout}).DialContext,
		// One session, one connection: a BMC has few.
		MaxConnsPerHost: 1,
	}
	hc := &http.Client{Transport: tr, Timeout: timeout}
	cfg := gofish.ClientConfig{Endpoint: endpoint, Username: c.Username, Password: c.Password,
		HTTPClient: hc, BasicAuth: c.BasicAuth, NoModifyTransport: true, ReuseConnections: true}
	where := "open session with " + endpoint
	cl, err := gofish.ConnectContext(ctx, cfg)
	if err != nil && !c.BasicAuth && noSessions(err) {
		// A service without SessionService (or one that refuses to
		// create sessions, but not the credentials) takes basic auth.
		cfg.BasicAuth = true
		where += " (basic auth: the service has no sessions)"
		cl, err = gofish.ConnectContext(ctx, cfg)
	}
	if err != nil {
		tr.CloseIdleConnections()
		return nil, explainRedfish(where, err)
	}
	s := &redfishSession{c: cl, hc: hc}
	if err := s.pickSystem(ctx, c.SystemName); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		_ = s.Close(cctx)
		return nil, err
	}
	return s, nil
}

// noSessions reports whether creating a session failed because the
// service has none: no Sessions link, or a status other than 401 and 403
// (which refuse the credentials themselves) to the POST.
func noSessions(err error) bool {
	if strings.Contains(err.Error(), "no target provided") {
		return true // gofish's words when the root has no Sessions link
	}
	var re *schemas.Error
	if !errors.As(err, &re) {
		return false
	}
	switch re.HTTPReturnedStatusCode {
	case 0:
		return false
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return true
	}
	return false
}

// explainRedfish turns the library's and net/http's errors into one line
// an operator acts on.
func explainRedfish(what string, err error) error {
	var ce *schemas.CollectionError
	if errors.As(err, &ce) && len(ce.Failures) > 0 {
		// One member is enough to act on: the first by URI.
		links := slices.Sorted(maps.Keys(ce.Failures))
		return explainRedfish(what+": read "+links[0], ce.Failures[links[0]])
	}
	var re *schemas.Error
	if errors.As(err, &re) {
		msg := re.Message
		for _, x := range re.ExtendedInfos {
			if x.Message != "" && x.Message != msg {
				msg = strings.TrimSpace(msg + " " + x.Message)
			}
		}
		if msg == "" {
			msg = http.StatusText(re.HTTPReturnedStatusCode)
		}
		msg = strings.Join(strings.Fields(msg), " ")
		switch re.HTTPReturnedStatusCode {
		case 0:
			return fmt.Errorf("%s: %s", what, msg)
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("%s: HTTP %d: %s (the BMC refused the username or password of the Secret)", what, re.HTTPReturnedStatusCode, msg)
		}
		return fmt.Errorf("%s: the BMC answered HTTP %d: %s", what, re.HTTPReturnedStatusCode, msg)
	}
	return explainTransport(what, err, "providerOptions.redfish.port", "Anvil speaks Redfish over HTTPS only")
}

// redfishSession is one authenticated client and the chosen system.
type redfishSession struct {
	c      *gofish.APIClient
	hc     *http.Client
	system string // the ComputerSystem's URI
}

// client is the session's client bound to ctx for one call.
func (s *redfishSession) client(ctx context.Context) *gofish.APIClient { return s.c.WithContext(ctx) }

// pickSystem chooses the system by Id or Name, or the only one.
func (s *redfishSession) pickSystem(ctx context.Context, name string) error {
	systems, err := s.client(ctx).Service.Systems()
	if err != nil {
		return explainRedfish("list systems", err)
	}
	var ids []string
	for _, sys := range systems {
		if name != "" && (sys.ID == name || sys.Name == name) {
			s.system = sys.ODataID
			return nil
		}
		ids = append(ids, sys.ID)
	}
	slices.Sort(ids) // the library reads members concurrently
	switch {
	case len(systems) == 0:
		return errors.New("the Redfish service lists no systems")
	case name != "":
		return fmt.Errorf("providerOptions.redfish.systemName %q: no such system (the service has %s)", name, strings.Join(ids, ", "))
	case len(systems) > 1:
		return fmt.Errorf("the Redfish service has %d systems (%s): name one in the Machine's providerOptions.redfish.systemName", len(systems), strings.Join(ids, ", "))
	}
	s.system = systems[0].ODataID
	return nil
}

// get reads the chosen system afresh.
func (s *redfishSession) get(ctx context.Context) (*schemas.ComputerSystem, error) {
	sys, err := schemas.GetObject[schemas.ComputerSystem](s.client(ctx), s.system)
	if err != nil {
		return nil, explainRedfish("read system "+s.system, err)
	}
	return sys, nil
}

// powerOf maps Redfish's PowerState to Anvil's: a system on its way to a
// state counts as still in the one it leaves.
func powerOf(st schemas.PowerState) (string, error) {
	switch st {
	case schemas.OnPowerState, schemas.PoweringOffPowerState, schemas.PausedPowerState:
		return model.PowerOn, nil
	case schemas.OffPowerState, schemas.PoweringOnPowerState:
		return model.PowerOff, nil
	}
	return "", fmt.Errorf("the system reports PowerState %q", st)
}

func (s *redfishSession) PowerState(ctx context.Context) (string, error) {
	sys, err := s.get(ctx)
	if err != nil {
		return "", err
	}
	return powerOf(sys.PowerState)
}

// resetTypes lists, for each power action, the ResetType values that do
// it, best first; the first the system allows is sent.
var resetTypes = map[string][]schemas.ResetType{
	model.PowerActionOn:    {schemas.OnResetType, schemas.ForceOnResetType},
	model.PowerActionOff:   {schemas.ForceOffResetType},
	model.PowerActionSoft:  {schemas.GracefulShutdownResetType},
	model.PowerActionCycle: {schemas.PowerCycleResetType, schemas.ForceRestartResetType},
	model.PowerActionReset: {schemas.ForceRestartResetType, schemas.GracefulRestartResetType, schemas.PowerCycleResetType},
}

func (s *redfishSession) SetPower(ctx context.Context, action string) error {
	want, ok := resetTypes[action]
	if !ok {
		return fmt.Errorf("power action %q: %w", action, ErrUnsupported)
	}
	sys, err := s.get(ctx)
	if err != nil {
		return err
	}
	st, err := powerOf(sys.PowerState)
	if err != nil {
		return err
	}
	switch {
	case st == model.PowerOn && action == model.PowerActionOn,
		st == model.PowerOff && (action == model.PowerActionOff || action == model.PowerActionSoft):
		return nil // BMCs refuse a reset into the state the system is in
	case st == model.PowerOff && (action == model.PowerActionCycle || action == model.PowerActionReset):
		// A cycle or reset of a machine that is off means power it on,
		// as with IPMI; a restart of a system that is off is refused.
		want = resetTypes[model.PowerActionOn]
	}
	allowed, err := sys.GetSupportedResetTypes()
	if err != nil {
		return explainRedfish("read the reset types of "+s.system, err)
	}
	rt := want[0]
	if len(allowed) > 0 {
		i := slices.IndexFunc(want, func(r schemas.ResetType) bool { return slices.Contains(allowed, r) })
		if i < 0 {
			return fmt.Errorf("power %s: the system allows ResetType %v, none of %v", action, allowed, want)
		}
		rt = want[i]
	}
	if _, err := sys.Reset(rt); err != nil {
		return explainRedfish(fmt.Sprintf("ComputerSystem.Reset %s", rt), err)
	}
	return nil
}

// bootSources maps Rufio's boot devices to BootSourceOverrideTarget. Redfish
// has no "safe mode" target.
var bootSources = map[string]schemas.BootSource{
	model.BootDevicePXE:   schemas.PxeBootSource,
	model.BootDeviceDisk:  schemas.HddBootSource,
	model.BootDeviceCDROM: schemas.CdBootSource,
	model.BootDeviceBIOS:  schemas.BiosSetupBootSource,
}

func (s *redfishSession) SetBootDevice(ctx context.Context, device string, efi, persistent bool) error {
	target, ok := bootSources[device]
	if !ok {
		return fmt.Errorf("boot device %q: %w by Redfish", device, ErrUnsupported)
	}
	sys, err := s.get(ctx)
	if err != nil {
		return err
	}
	if allowed := sys.Boot.AllowableBootSourceOverrideTargetValues; len(allowed) > 0 && !slices.Contains(allowed, target) {
		return fmt.Errorf("boot device %s: the system allows BootSourceOverrideTarget %v, not %s", device, allowed, target)
	}
	b := &schemas.Boot{BootSourceOverrideTarget: target, BootSourceOverrideEnabled: schemas.OnceBootSourceOverrideEnabled}
	if persistent {
		b.BootSourceOverrideEnabled = schemas.ContinuousBootSourceOverrideEnabled
	}
	if efi {
		b.BootSourceOverrideMode = schemas.UEFIBootSourceOverrideMode
	}
	if err := sys.SetBoot(b); err != nil {
		return explainRedfish(fmt.Sprintf("set Boot override %s (%s)", target, b.BootSourceOverrideEnabled), err)
	}
	return nil
}

// mediaTypes maps a virtualMediaAction's kind to the VirtualMedia types
// that serve it.
var mediaTypes = map[string][]schemas.VirtualMediaType{
	"CD":     {schemas.CDVirtualMediaType, schemas.DVDVirtualMediaType},
	"Floppy": {schemas.FloppyVirtualMediaType, schemas.USBStickVirtualMediaType},
}

// media finds the virtual media device of kind: the system's own
// collection (Redfish 2021 and later), else its managers'.
func (s *redfishSession) media(ctx context.Context, kind string) (*schemas.VirtualMedia, error) {
	types, ok := mediaTypes[kind]
	if !ok {
		return nil, fmt.Errorf("virtual media kind %q: want CD or Floppy", kind)
	}
	sys, err := s.get(ctx)
	if err != nil {
		return nil, err
	}
	all, err := sys.VirtualMedia()
	if err != nil {
		return nil, explainRedfish("list the system's virtual media", err)
	}
	if len(all) == 0 {
		managers, err := sys.ManagedBy()
		if err != nil {
			return nil, explainRedfish("list the system's managers", err)
		}
		for _, m := range managers {
			vm, err := m.VirtualMedia()
			if err != nil {
				return nil, explainRedfish("list the virtual media of manager "+m.ID, err)
			}
			all = append(all, vm...)
		}
	}
	var seen []string
	for _, vm := range all {
		for _, t := range vm.MediaTypes {
			if slices.Contains(types, t) {
				return vm, nil
			}
			seen = append(seen, string(t))
		}
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("virtual media: the system %s and its managers have none", s.system)
	}
	return nil, fmt.Errorf("virtual media: none of kind %s (the BMC has %s)", kind, strings.Join(seen, ", "))
}

func (s *redfishSession) InsertMedia(ctx context.Context, kind, url string) error {
	vm, err := s.media(ctx, kind)
	if err != nil {
		return err
	}
	if vm.Inserted != nil && *vm.Inserted {
		// The action is refused while an image is in (DMTF: eject first).
		if _, err := vm.EjectMedia(); err != nil {
			return explainRedfish("VirtualMedia.EjectMedia "+vm.ODataID+" (before inserting)", err)
		}
	}
	yes := true
	if _, err := vm.InsertMedia(&schemas.VirtualMediaInsertMediaParameters{Image: url, Inserted: &yes, WriteProtected: &yes}); err != nil {
		return explainRedfish("VirtualMedia.InsertMedia "+vm.ODataID, err)
	}
	return nil
}

func (s *redfishSession) EjectMedia(ctx context.Context, kind string) error {
	vm, err := s.media(ctx, kind)
	if err != nil {
		return err
	}
	if vm.Inserted != nil && !*vm.Inserted && vm.Image == "" {
		return nil
	}
	if _, err := vm.EjectMedia(); err != nil {
		return explainRedfish("VirtualMedia.EjectMedia "+vm.ODataID, err)
	}
	return nil
}

// Close deletes the session (logout) when there is one, and closes the
// connection.
func (s *redfishSession) Close(ctx context.Context) error {
	defer s.hc.CloseIdleConnections()
	c := s.client(ctx)
	sess, err := c.GetSession()
	if err != nil {
		return nil // basic auth: nothing to end
	}
	if err := c.Service.DeleteSession(sess.ID); err != nil {
		return explainRedfish("delete session "+sess.ID, err)
	}
	return nil
}
