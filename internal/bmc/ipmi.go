package bmc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/chassis"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/anvilproj/anvil/internal/model"
)

// IPMI speaks IPMI 2.0 over LAN (RMCP+, "lanplus") with
// github.com/bougou/go-ipmi, a native Go client: no ipmitool at run time.
// The zero value is ready to use.
type IPMI struct {
	// Timeout is how long one request waits for its answer. If 0, uses
	// DefaultIPMITimeout.
	Timeout time.Duration
	// Retries is how often an unanswered request is sent again. If 0,
	// uses DefaultIPMIRetries; negative means none.
	Retries int
}

// Defaults of IPMI: a request and its retries end within about six
// seconds, so an unreachable or hung BMC fails a task quickly.
const (
	DefaultIPMITimeout = 2 * time.Second
	DefaultIPMIRetries = 2
)

// cipherSuites maps providerOptions.ipmitool.cipherSuite to the suites to
// offer, best first. Suite 17 is HMAC-SHA256 with AES-CBC-128; suite 3 is
// HMAC-SHA1 with AES-CBC-128, which older BMCs (and OpenIPMI's simulator)
// stop at.
var cipherSuites = map[string][]types.CipherSuiteID{
	"":   {types.CipherSuiteID17, types.CipherSuiteID3},
	"17": {types.CipherSuiteID17},
	"3":  {types.CipherSuiteID3},
}

// Name implements Provider.
func (IPMI) Name() string { return model.ProviderIPMI }

// Open implements Provider: it opens an RMCP+ session at the administrator
// privilege level.
func (p IPMI) Open(ctx context.Context, c Conn) (Session, error) {
	suites, ok := cipherSuites[c.CipherSuite]
	if !ok {
		return nil, fmt.Errorf("cipher suite %q: want 3 or 17", c.CipherSuite)
	}
	port := c.Port
	if port == 0 {
		port = model.DefaultIPMIPort
	}
	cl, err := client.NewClient(c.Host, port, c.Username, c.Password)
	if err != nil {
		return nil, err
	}
	timeout, retries := p.Timeout, p.Retries
	if timeout <= 0 {
		timeout = DefaultIPMITimeout
	}
	switch {
	case retries == 0:
		retries = DefaultIPMIRetries
	case retries < 0:
		retries = 0
	}
	cl.WithInterface(client.InterfaceLanplus).WithTimeout(timeout).WithRetry(retries).
		WithCipherSuiteID(suites...).WithMaxPrivilegeLevel(types.PrivilegeLevelAdministrator)
	if err := cl.Connect(ctx); err != nil {
		// A half-made session is closed too: the BMC may hold a slot for it.
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		_ = cl.Close(closeCtx)
		return nil, explainIPMI(fmt.Errorf("open session with %s:%d: %w", c.Host, port, err))
	}
	return &ipmiSession{c: cl}, nil
}

// explainIPMI rewrites the library's errors into what an operator acts on,
// on one line (the library lists each cipher suite's failure on its own).
func explainIPMI(err error) error {
	s := strings.ReplaceAll(strings.ReplaceAll(err.Error(), ": \n", ": "), "\n", "; ")
	err = errors.New(s)
	switch {
	case strings.Contains(s, "authentication code mismatch"), strings.Contains(s, "RAKP authentication failed"),
		strings.Contains(s, "unauthorized name"), strings.Contains(s, "invalid name"):
		return fmt.Errorf("%w (the BMC refused the username or password of the Secret)", err)
	case strings.Contains(s, "i/o timeout"), strings.Contains(s, "deadline"), strings.Contains(s, "connection refused"):
		return fmt.Errorf("%w (the BMC did not answer: check the Machine's host and port, and that IPMI over LAN is on)", err)
	}
	return err
}

type ipmiSession struct{ c *client.Client }

func (s *ipmiSession) PowerState(ctx context.Context) (string, error) {
	st, err := s.c.GetChassisStatus(ctx)
	if err != nil {
		return "", explainIPMI(fmt.Errorf("get chassis status: %w", err))
	}
	if st.PowerIsOn {
		return model.PowerOn, nil
	}
	return model.PowerOff, nil
}

// controls maps Rufio's power actions to IPMI Chassis Control (IPMI 2.0
// section 28.3).
var controls = map[string]chassis.ChassisControl{
	model.PowerActionOn:    chassis.ChassisControlPowerUp,
	model.PowerActionOff:   chassis.ChassisControlPowerDown,
	model.PowerActionSoft:  chassis.ChassisControlSoftShutdown,
	model.PowerActionCycle: chassis.ChassisControlPowerCycle,
	model.PowerActionReset: chassis.ChassisControlHardReset,
}

func (s *ipmiSession) SetPower(ctx context.Context, action string) error {
	ctl, ok := controls[action]
	if !ok {
		return fmt.Errorf("power action %q: %w", action, ErrUnsupported)
	}
	if action == model.PowerActionCycle {
		// A power cycle of a machine that is off is refused by many BMCs
		// ("not supported in present state"): it means power on.
		st, err := s.PowerState(ctx)
		if err != nil {
			return err
		}
		if st == model.PowerOff {
			ctl = chassis.ChassisControlPowerUp
		}
	}
	if _, err := s.c.ChassisControl(ctx, ctl); err != nil {
		return explainIPMI(fmt.Errorf("chassis control %s: %w", action, err))
	}
	return nil
}

// bootDevices maps Rufio's boot devices to the boot flags' device selector
// (IPMI 2.0 table 28-14, parameter 5).
var bootDevices = map[string]types.BootDeviceSelector{
	model.BootDevicePXE:   types.BootDeviceSelectorForcePXE,
	model.BootDeviceDisk:  types.BootDeviceSelectorForceHardDrive,
	model.BootDeviceCDROM: types.BootDeviceSelectorForceCDROM,
	model.BootDeviceBIOS:  types.BootDeviceSelectorForceBIOSSetup,
	model.BootDeviceSafe:  types.BootDeviceSelectorForceHardDriveSafe,
}

func (s *ipmiSession) SetBootDevice(ctx context.Context, device string, efi, persistent bool) error {
	sel, ok := bootDevices[device]
	if !ok {
		return fmt.Errorf("boot device %q: %w", device, ErrUnsupported)
	}
	bootType := types.BIOSBootTypeLegacy
	if efi {
		bootType = types.BIOSBootTypeEFI
	}
	if err := s.c.SetBootDevice(ctx, sel, bootType, persistent); err != nil {
		return explainIPMI(fmt.Errorf("set boot device %s: %w", device, err))
	}
	return nil
}

func (s *ipmiSession) Close(ctx context.Context) error {
	if err := s.c.Close(ctx); err != nil {
		return fmt.Errorf("close session: %w", err)
	}
	return nil
}
