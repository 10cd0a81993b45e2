// Package bmc owns out-of-band control of machines through their baseboard
// management controllers: the providers that speak a BMC's protocol (IPMI
// 2.0 over LAN, Redfish over HTTPS, Intel AMT's WS-Management), and the executor that runs Rufio-shaped Jobs
// (bmc.tinkerbell.org/v1alpha1) task by task, writing Task objects, Job
// conditions and the Machine's power state as Rufio does, and the Poller
// that keeps every Machine's power state current between Jobs and, now and
// then, reads the machine's inventory as the BMC sees it into the
// status.attributes.outOfBand of the Hardware that name the Machine.
//
// BMCs are slow and fragile: every session is bounded in time, closed
// whatever happens, and a BMC never sees two sessions from Anvil at once.
// Credentials come from sealed v1 Secrets (internal/secrets) through an
// injected opener; this package never logs them, and scrubs them from any
// message a provider's error might echo.
//
// It reads and writes Machines, Jobs, Tasks and Secrets through
// store.Store only, and tells machines' records (machinelog) how their
// Jobs went; it must not import the API, the CLI or the workflow engine
// (which creates the netboot Jobs of workflows as plain Job objects).
package bmc

import (
	"context"
	"errors"
	"time"

	"github.com/anvilproj/anvil/internal/model"
)

// Conn is what a provider needs to reach one BMC.
type Conn struct {
	Host     string
	Port     int
	Username string
	Password string
	// CipherSuite is the RMCP+ cipher suite, "3" or "17"; empty lets the
	// provider choose (17, then 3).
	CipherSuite string
	// InsecureTLS skips verifying a TLS provider's certificate (the
	// Machine's insecureTLS).
	InsecureTLS bool
	// SystemName picks one of a Redfish service's systems by its Id or
	// Name (providerOptions.redfish.systemName); empty takes the only one.
	SystemName string
	// BasicAuth makes the Redfish provider send the credentials with every
	// request instead of opening a session
	// (providerOptions.redfish.useBasicAuth).
	BasicAuth bool
	// Scheme is Intel AMT's "http" or "https"
	// (providerOptions.intelAMT.hostScheme).
	Scheme string
}

// Session is one open session with a BMC. Its methods are called from one
// goroutine; Close is always called, once.
type Session interface {
	// PowerState returns model.PowerOn or model.PowerOff.
	PowerState(ctx context.Context) (string, error)
	// SetPower carries out a model.PowerAction* other than status.
	SetPower(ctx context.Context, action string) error
	// SetBootDevice sets the device of the next boot (every boot when
	// persistent), one of model.BootDevices, in EFI mode when efi.
	SetBootDevice(ctx context.Context, device string, efi, persistent bool) error
	// Close ends the session.
	Close(ctx context.Context) error
}

// MediaSession is a Session that can insert and eject virtual media
// (Redfish's VirtualMedia). A provider whose sessions lack it fails a
// virtualMediaAction saying so.
type MediaSession interface {
	Session
	// InsertMedia attaches the image at url as virtual media of kind
	// ("CD" or "Floppy"), ejecting what was there.
	InsertMedia(ctx context.Context, kind, url string) error
	// EjectMedia detaches the virtual media of kind; media already out is
	// no error.
	EjectMedia(ctx context.Context, kind string) error
}

// InventorySession is a Session that can say what machine its BMC
// manages: the system's identity, processors, memory, drives and NICs as
// the BMC sees them. Redfish sessions are (a ComputerSystem and its
// collections); IPMI's and Intel AMT's are not: IPMI has only FRU records
// (a vendor's, uneven) and AMT's CIM inventory is not read by Anvil.
// The Poller reads it now and then and keeps it as the Hardware's
// status.attributes.outOfBand.
type InventorySession interface {
	Session
	// Inventory reads the system. What it returns may exceed the caps
	// of model.OutOfBand; the caller bounds it and fills in Source.
	Inventory(ctx context.Context) (*model.OutOfBand, error)
}

// MediaProvider is a Provider whose sessions are MediaSessions; the
// executor refuses a virtualMediaAction for any other before it opens a
// session.
type MediaProvider interface {
	Provider
	// VirtualMedia is a marker: it does nothing.
	VirtualMedia()
}

// Provider opens sessions with BMCs of one protocol.
type Provider interface {
	// Name is the provider's name as Rufio's providerOptions spell it
	// (model.ProviderIPMI, …).
	Name() string
	// Open authenticates and returns a session; its error says why not
	// (unreachable, refused credentials), without the password.
	Open(ctx context.Context, c Conn) (Session, error)
}

// ErrUnsupported is returned (wrapped) for an operation a provider or
// Anvil does not do yet, e.g. virtual media.
var ErrUnsupported = errors.New("not supported")

// closeTimeout bounds closing a session, which runs on a fresh context: the
// task's own may have expired, and a session left open holds one of the
// BMC's few session slots until it times out on its own.
const closeTimeout = 5 * time.Second
