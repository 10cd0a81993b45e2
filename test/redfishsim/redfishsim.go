// Package redfishsim is a Redfish service for tests: a BMC that speaks
// DMTF Redfish over TLS (ServiceRoot, the Systems collection,
// ComputerSystem with PowerState, Boot and #ComputerSystem.Reset, the
// system's inventory (identity, Processors, Memory, Storage with Drives,
// EthernetInterfaces: inventory.go),
// Managers/{id}/VirtualMedia with #VirtualMedia.InsertMedia and
// #VirtualMedia.EjectMedia, SessionService/Sessions with X-Auth-Token, and
// basic auth) in front of machines it powers through the Machine interface:
// FakeMachine in memory, or QEMU, a real VM driven through QMP (qemu.go).
//
// It implements what Anvil's Redfish provider and Rufio's tasks use, and
// refuses the rest the way a BMC does (400 with a Redfish error, 401
// without credentials, 405 for a method a resource lacks). Faults — a
// resource that answers 500, one that never answers — are injected per
// path for the bad-input tests. It is for tests only; no command of Anvil
// imports it.
package redfishsim

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Machine is what a system's BMC controls. Boot is a Redfish
// BootSourceOverrideTarget ("Pxe", "Cd", "Hdd", "BiosSetup") for this boot
// only, or "" for the machine's own order. Calls come one at a time.
type Machine interface {
	// PoweredOn reports whether the machine runs.
	PoweredOn() (bool, error)
	// PowerOn starts the machine, booting from boot.
	PowerOn(boot string) error
	// PowerOff stops it: at once, or by asking the OS (ACPI) when graceful.
	PowerOff(graceful bool) error
	// Reset restarts a running machine at once, booting from boot.
	Reset(boot string) error
	// InsertMedia puts the image file at path in the CD drive.
	InsertMedia(path string) error
	// EjectMedia empties the CD drive.
	EjectMedia() error
}

// System is one ComputerSystem of the service.
type System struct {
	// ID is the system's Id, the last element of its URI.
	ID string
	// Name is its Name; if empty, "System <ID>".
	Name string
	// Machine is what it powers.
	Machine Machine
	// ResetTypes are its ResetType@Redfish.AllowableValues; if nil,
	// DefaultResetTypes.
	ResetTypes []string
	// Inventory is what the BMC says of the machine's hardware; if nil,
	// the system has no identity properties and no Processors, Memory,
	// Storage or EthernetInterfaces (as before inventory was simulated).
	Inventory *Inventory
}

// DefaultResetTypes are the ResetType values a system allows unless told.
var DefaultResetTypes = []string{"On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "PowerCycle"}

// bootTargets are the BootSourceOverrideTarget@Redfish.AllowableValues of
// every system.
var bootTargets = []string{"None", "Pxe", "Cd", "Hdd", "BiosSetup"}

// Config configures a Server.
type Config struct {
	Username, Password string
	Systems            []System
	// NoSessions leaves out SessionService: clients must use basic auth.
	NoSessions bool
	// Listen is the address to listen on; if empty, a free port of
	// 127.0.0.1.
	Listen string
}

// Server is a running Redfish service.
type Server struct {
	// URL is https://127.0.0.1:PORT.
	URL string
	// Host and Port are URL's parts.
	Host string
	Port int
	// CAFile is a PEM file of the certificate the service presents, to
	// trust it.
	CAFile string

	cfg     Config
	srv     *httptest.Server
	closing chan struct{}
	dir     string

	mu       sync.Mutex
	systems  map[string]*system
	sessions map[string]string // token -> session id
	created  int
	deleted  int
	faults   map[string]int // path prefix -> status, or hang
	requests int
}

// hang is a fault that never answers.
const hang = -1

type system struct {
	System
	target, enabled, mode string // the Boot override
	image                 string // the VirtualMedia Image, "" when empty
	boots                 []string
}

// Start starts a service for t; it stops when t ends.
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// New starts a service that keeps its files (the CA, fetched images) in
// dir. Close stops it.
func New(cfg Config, dir string) (*Server, error) {
	s := &Server{cfg: cfg, closing: make(chan struct{}), dir: dir,
		systems: map[string]*system{}, sessions: map[string]string{}, faults: map[string]int{}}
	for _, sys := range cfg.Systems {
		if sys.Name == "" {
			sys.Name = "System " + sys.ID
		}
		if sys.ResetTypes == nil {
			sys.ResetTypes = DefaultResetTypes
		}
		s.systems[sys.ID] = &system{System: sys, target: "None", enabled: "Disabled", mode: "UEFI"}
	}
	cert, err := selfSigned()
	if err != nil {
		return nil, err
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	if cfg.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return nil, err
		}
		s.srv.Listener.Close()
		s.srv.Listener = ln
	}
	// Its own certificate, not httptest's shared one: a client that
	// trusts one service must not trust another (the TLS mismatch test).
	s.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	// A client that refuses the certificate is what the TLS tests want.
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.srv.StartTLS()
	s.URL = s.srv.URL
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(s.URL, "https://"))
	s.Host = host
	s.Port, _ = strconv.Atoi(port)
	s.CAFile = filepath.Join(s.dir, "bmc-ca.pem")
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
	if err := os.WriteFile(s.CAFile, certPEM, 0o644); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close stops the service, ending requests left hanging.
func (s *Server) Close() {
	close(s.closing)
	s.srv.Close()
}

// selfSigned makes a certificate for 127.0.0.1 and ::1 that is its own CA.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "redfishsim BMC " + serial.String()},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// Fail makes every request whose path starts with prefix answer status.
func (s *Server) Fail(prefix string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[prefix] = status
}

// Hang makes every request whose path starts with prefix go unanswered
// until the client gives up.
func (s *Server) Hang(prefix string) { s.Fail(prefix, hang) }

// Sessions reports the sessions created and deleted so far.
func (s *Server) Sessions() (created, deleted int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.created, s.deleted
}

// OpenSessions is the number of sessions not deleted.
func (s *Server) OpenSessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Boot returns a system's Boot override: target, enabled, mode.
func (s *Server) Boot(id string) (target, enabled, mode string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sys := s.systems[id]
	return sys.target, sys.enabled, sys.mode
}

// Boots lists the boot sources the system was started with, one per power
// on or reset ("" for its own order).
func (s *Server) Boots(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.systems[id].boots)
}

// Image is the URL of the system's inserted virtual media, or "".
func (s *Server) Image(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.systems[id].image
}

// redfishError writes a Redfish error body (DMTF's "error" object with a
// Base message).
func redfishError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"code": "Base.1.8." + code, "message": msg,
		"@Message.ExtendedInfo": []map[string]any{{"MessageId": "Base.1.8." + code, "Message": msg, "Severity": "Critical"}},
	}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("OData-Version", "4.0")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func link(uri string) map[string]string { return map[string]string{"@odata.id": uri} }

const (
	root         = "/redfish/v1"
	sessionsPath = root + "/SessionService/Sessions"
)

// serve routes one request.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	s.mu.Lock()
	s.requests++
	fault := 0
	for p, st := range s.faults {
		if strings.HasPrefix(path, p) {
			fault = st
		}
	}
	s.mu.Unlock()
	switch {
	case fault == hang:
		select {
		case <-r.Context().Done():
		case <-s.closing:
		}
		return
	case fault != 0:
		redfishError(w, fault, "InternalError", "The request failed due to an internal service error. The service is still operational.")
		return
	}
	if path == root || path == "/redfish" {
		s.serviceRoot(w, r)
		return
	}
	if path == sessionsPath && r.Method == http.MethodPost && !s.cfg.NoSessions {
		s.login(w, r)
		return
	}
	if !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Basic realm="redfishsim"`)
		redfishError(w, http.StatusUnauthorized, "NoValidSession", "There is no valid session established with the implementation.")
		return
	}
	parts := strings.Split(strings.TrimPrefix(path, root+"/"), "/")
	switch {
	case parts[0] == "SessionService" && !s.cfg.NoSessions:
		s.sessionService(w, r, parts[1:])
	case parts[0] == "Systems" && len(parts) == 1:
		s.collection(w, r, root+"/Systems", "#ComputerSystemCollection.ComputerSystemCollection", "Computer System Collection", "Systems")
	case parts[0] == "Systems":
		s.systemRoute(w, r, parts[1:])
	case parts[0] == "Managers" && len(parts) == 1:
		s.collection(w, r, root+"/Managers", "#ManagerCollection.ManagerCollection", "Manager Collection", "Managers")
	case parts[0] == "Managers":
		s.managerRoute(w, r, parts[1:])
	default:
		redfishError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", path))
	}
}

func (s *Server) serviceRoot(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		redfishError(w, http.StatusMethodNotAllowed, "OperationNotAllowed", "The service root is read-only.")
		return
	}
	body := map[string]any{
		"@odata.id": root, "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot",
		"Id": "RootService", "Name": "Root Service", "RedfishVersion": "1.15.0",
		"UUID":     "92384634-2938-2342-8820-489239905423",
		"Systems":  link(root + "/Systems"),
		"Managers": link(root + "/Managers"),
	}
	if !s.cfg.NoSessions {
		body["SessionService"] = link(root + "/SessionService")
		body["Links"] = map[string]any{"Sessions": link(sessionsPath)}
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) credentialsOK(user, pass string) bool {
	u := subtle.ConstantTimeCompare([]byte(user), []byte(s.cfg.Username))
	p := subtle.ConstantTimeCompare([]byte(pass), []byte(s.cfg.Password))
	return u&p == 1
}

func (s *Server) authorized(r *http.Request) bool {
	if tok := r.Header.Get("X-Auth-Token"); tok != "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.sessions[tok]
		return ok
	}
	user, pass, ok := r.BasicAuth()
	return ok && s.credentialsOK(user, pass)
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	var req struct{ UserName, Password string }
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil {
		redfishError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON.")
		return
	}
	if !s.credentialsOK(req.UserName, req.Password) {
		redfishError(w, http.StatusUnauthorized, "InsufficientPrivilege", "The user name or password is not correct.")
		return
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	tok := hex.EncodeToString(b)
	s.mu.Lock()
	s.created++
	id := strconv.Itoa(s.created)
	s.sessions[tok] = id
	s.mu.Unlock()
	uri := sessionsPath + "/" + id
	w.Header().Set("X-Auth-Token", tok)
	w.Header().Set("Location", uri)
	writeJSON(w, http.StatusCreated, map[string]any{"@odata.id": uri, "@odata.type": "#Session.v1_5_0.Session",
		"Id": id, "Name": "User Session", "UserName": req.UserName})
}

func (s *Server) sessionService(w http.ResponseWriter, r *http.Request, parts []string) {
	switch {
	case len(parts) == 0 && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]any{"@odata.id": root + "/SessionService", "@odata.type": "#SessionService.v1_1_8.SessionService",
			"Id": "SessionService", "Name": "Session Service", "ServiceEnabled": true, "SessionTimeout": 600, "Sessions": link(sessionsPath)})
	case len(parts) == 1 && parts[0] == "Sessions" && r.Method == http.MethodGet:
		s.mu.Lock()
		var members []map[string]string
		for _, id := range s.sessions {
			members = append(members, link(sessionsPath+"/"+id))
		}
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"@odata.id": sessionsPath, "@odata.type": "#SessionCollection.SessionCollection",
			"Name": "Session Collection", "Members": members, "Members@odata.count": len(members)})
	case len(parts) == 2 && parts[0] == "Sessions" && r.Method == http.MethodDelete:
		s.mu.Lock()
		defer s.mu.Unlock()
		for tok, id := range s.sessions {
			if id == parts[1] {
				delete(s.sessions, tok)
				s.deleted++
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		redfishError(w, http.StatusNotFound, "ResourceMissingAtURI", "No such session.")
	default:
		redfishError(w, http.StatusMethodNotAllowed, "OperationNotAllowed", "The operation is not allowed on this resource.")
	}
}

// ids lists the systems' Ids in order.
func (s *Server) ids() []string {
	var ids []string
	for _, sys := range s.cfg.Systems {
		ids = append(ids, sys.ID)
	}
	return ids
}

func (s *Server) collection(w http.ResponseWriter, r *http.Request, uri, typ, name, kind string) {
	if r.Method != http.MethodGet {
		redfishError(w, http.StatusMethodNotAllowed, "OperationNotAllowed", "A collection is read-only here.")
		return
	}
	var members []map[string]string
	for _, id := range s.ids() {
		if kind == "Managers" {
			id = "BMC-" + id
		}
		members = append(members, link(uri+"/"+id))
	}
	writeJSON(w, http.StatusOK, map[string]any{"@odata.id": uri, "@odata.type": typ, "Name": name,
		"Members": members, "Members@odata.count": len(members)})
}

func (s *Server) systemRoute(w http.ResponseWriter, r *http.Request, parts []string) {
	s.mu.Lock()
	sys, ok := s.systems[parts[0]]
	s.mu.Unlock()
	if !ok {
		redfishError(w, http.StatusNotFound, "ResourceMissingAtURI", "No such system.")
		return
	}
	switch {
	case len(parts) == 1 && r.Method == http.MethodGet:
		s.getSystem(w, sys)
	case len(parts) == 1 && r.Method == http.MethodPatch:
		s.patchSystem(w, r, sys)
	case len(parts) == 3 && parts[1] == "Actions" && parts[2] == "ComputerSystem.Reset" && r.Method == http.MethodPost:
		s.reset(w, r, sys)
	case len(parts) >= 2 && slices.Contains([]string{"Processors", "Memory", "Storage", "EthernetInterfaces"}, parts[1]):
		s.mu.Lock()
		inv := sys.Inventory
		s.mu.Unlock()
		inventoryRoute(w, r, sys.ID, inv, parts[1:])
	default:
		redfishError(w, http.StatusMethodNotAllowed, "OperationNotAllowed", "The operation is not allowed on this resource.")
	}
}

func (s *Server) getSystem(w http.ResponseWriter, sys *system) {
	on, err := sys.Machine.PoweredOn()
	if err != nil {
		redfishError(w, http.StatusInternalServerError, "InternalError", "The machine's state cannot be read: "+err.Error())
		return
	}
	state := "Off"
	if on {
		state = "On"
	}
	uri := root + "/Systems/" + sys.ID
	s.mu.Lock()
	boot := map[string]any{"BootSourceOverrideTarget": sys.target, "BootSourceOverrideEnabled": sys.enabled,
		"BootSourceOverrideMode": sys.mode, "BootSourceOverrideTarget@Redfish.AllowableValues": bootTargets}
	inv := sys.Inventory
	s.mu.Unlock()
	body := map[string]any{
		"@odata.id": uri, "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
		"Id": sys.ID, "Name": sys.Name, "SystemType": "Physical", "PowerState": state,
		"Status": map[string]string{"State": "Enabled", "Health": "OK"},
		"Boot":   boot,
		"Actions": map[string]any{"#ComputerSystem.Reset": map[string]any{
			"target": uri + "/Actions/ComputerSystem.Reset", "ResetType@Redfish.AllowableValues": sys.ResetTypes}},
		"Links": map[string]any{"ManagedBy": []map[string]string{link(root + "/Managers/BMC-" + sys.ID)}},
	}
	if inv != nil {
		inventoryFields(body, uri, inv)
	}
	writeJSON(w, http.StatusOK, body)
}

// SetInventory replaces what system id's BMC says of its hardware (a
// disk swapped, a DIMM added).
func (s *Server) SetInventory(id string, inv *Inventory) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.systems[id].Inventory = inv
}

func (s *Server) patchSystem(w http.ResponseWriter, r *http.Request, sys *system) {
	var req struct {
		Boot *struct {
			BootSourceOverrideTarget, BootSourceOverrideEnabled, BootSourceOverrideMode string
		}
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil || req.Boot == nil {
		redfishError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON or has no Boot.")
		return
	}
	b := req.Boot
	if b.BootSourceOverrideTarget != "" && !slices.Contains(bootTargets, b.BootSourceOverrideTarget) {
		redfishError(w, http.StatusBadRequest, "PropertyValueNotInList", fmt.Sprintf("The value %s for the property BootSourceOverrideTarget is not in the list of acceptable values.", b.BootSourceOverrideTarget))
		return
	}
	if b.BootSourceOverrideEnabled != "" && !slices.Contains([]string{"Disabled", "Once", "Continuous"}, b.BootSourceOverrideEnabled) {
		redfishError(w, http.StatusBadRequest, "PropertyValueNotInList", fmt.Sprintf("The value %s for the property BootSourceOverrideEnabled is not in the list of acceptable values.", b.BootSourceOverrideEnabled))
		return
	}
	if b.BootSourceOverrideMode != "" && b.BootSourceOverrideMode != "UEFI" && b.BootSourceOverrideMode != "Legacy" {
		redfishError(w, http.StatusBadRequest, "PropertyValueNotInList", fmt.Sprintf("The value %s for the property BootSourceOverrideMode is not in the list of acceptable values.", b.BootSourceOverrideMode))
		return
	}
	s.mu.Lock()
	if b.BootSourceOverrideTarget != "" {
		sys.target = b.BootSourceOverrideTarget
	}
	if b.BootSourceOverrideEnabled != "" {
		sys.enabled = b.BootSourceOverrideEnabled
	}
	if b.BootSourceOverrideMode != "" {
		sys.mode = b.BootSourceOverrideMode
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// nextBoot returns the boot source of the boot about to happen and, for a
// Once override, spends it.
func (s *Server) nextBoot(sys *system) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	boot := ""
	if sys.enabled != "Disabled" && sys.target != "None" {
		boot = sys.target
	}
	if sys.enabled == "Once" {
		sys.enabled, sys.target = "Disabled", "None"
	}
	sys.boots = append(sys.boots, boot)
	return boot
}

func (s *Server) reset(w http.ResponseWriter, r *http.Request, sys *system) {
	var req struct{ ResetType string }
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil {
		redfishError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON.")
		return
	}
	if !slices.Contains(sys.ResetTypes, req.ResetType) {
		redfishError(w, http.StatusBadRequest, "ActionParameterNotSupported", fmt.Sprintf("The parameter ResetType for the action ComputerSystem.Reset is not supported on the target resource: %q.", req.ResetType))
		return
	}
	m := sys.Machine
	on, err := m.PoweredOn()
	if err == nil {
		switch req.ResetType {
		case "On", "ForceOn":
			if !on {
				err = m.PowerOn(s.nextBoot(sys))
			}
		case "ForceOff":
			if on {
				err = m.PowerOff(false)
			}
		case "GracefulShutdown":
			if on {
				err = m.PowerOff(true)
			}
		case "ForceRestart", "GracefulRestart":
			if !on {
				redfishError(w, http.StatusConflict, "ResourceInStandby", "The system is off: it cannot restart.")
				return
			}
			err = m.Reset(s.nextBoot(sys))
		case "PowerCycle":
			if on {
				err = m.PowerOff(false)
			}
			if err == nil {
				err = m.PowerOn(s.nextBoot(sys))
			}
		default:
			err = errors.New("not carried out by this simulator")
		}
	}
	if err != nil {
		redfishError(w, http.StatusInternalServerError, "InternalError", "Reset "+req.ResetType+" failed: "+err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) managerRoute(w http.ResponseWriter, r *http.Request, parts []string) {
	id, ok := strings.CutPrefix(parts[0], "BMC-")
	s.mu.Lock()
	sys := s.systems[id]
	s.mu.Unlock()
	if !ok || sys == nil {
		redfishError(w, http.StatusNotFound, "ResourceMissingAtURI", "No such manager.")
		return
	}
	uri := root + "/Managers/" + parts[0]
	vmURI := uri + "/VirtualMedia"
	switch {
	case len(parts) == 1 && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]any{"@odata.id": uri, "@odata.type": "#Manager.v1_19_0.Manager",
			"Id": parts[0], "Name": "Manager of " + sys.Name, "ManagerType": "BMC",
			"VirtualMedia": link(vmURI),
			"Links":        map[string]any{"ManagerForServers": []map[string]string{link(root + "/Systems/" + id)}}})
	case len(parts) == 2 && parts[1] == "VirtualMedia" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]any{"@odata.id": vmURI, "@odata.type": "#VirtualMediaCollection.VirtualMediaCollection",
			"Name": "Virtual Media Services", "Members": []map[string]string{link(vmURI + "/CD1")}, "Members@odata.count": 1})
	case len(parts) == 3 && parts[1] == "VirtualMedia" && parts[2] == "CD1" && r.Method == http.MethodGet:
		s.mu.Lock()
		img := sys.image
		s.mu.Unlock()
		var image any
		name := ""
		if img != "" {
			image = img
			name = img[strings.LastIndex(img, "/")+1:]
		}
		cd := vmURI + "/CD1"
		writeJSON(w, http.StatusOK, map[string]any{"@odata.id": cd, "@odata.type": "#VirtualMedia.v1_6_0.VirtualMedia",
			"Id": "CD1", "Name": "Virtual CD", "MediaTypes": []string{"CD", "DVD"},
			"Image": image, "ImageName": name, "Inserted": img != "", "WriteProtected": true,
			"ConnectedVia":         map[bool]string{true: "URI", false: "NotConnected"}[img != ""],
			"TransferProtocolType": "HTTP",
			"Actions": map[string]any{
				"#VirtualMedia.InsertMedia": map[string]string{"target": cd + "/Actions/VirtualMedia.InsertMedia"},
				"#VirtualMedia.EjectMedia":  map[string]string{"target": cd + "/Actions/VirtualMedia.EjectMedia"},
			}})
	case len(parts) == 5 && parts[2] == "CD1" && parts[3] == "Actions" && parts[4] == "VirtualMedia.InsertMedia" && r.Method == http.MethodPost:
		s.insert(w, r, sys)
	case len(parts) == 5 && parts[2] == "CD1" && parts[3] == "Actions" && parts[4] == "VirtualMedia.EjectMedia" && r.Method == http.MethodPost:
		if err := sys.Machine.EjectMedia(); err != nil {
			redfishError(w, http.StatusInternalServerError, "InternalError", "Eject failed: "+err.Error())
			return
		}
		s.mu.Lock()
		sys.image = ""
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		redfishError(w, http.StatusMethodNotAllowed, "OperationNotAllowed", "The operation is not allowed on this resource.")
	}
}

// insert fetches the image, as a BMC streams it, into a file the machine's
// CD drive reads.
func (s *Server) insert(w http.ResponseWriter, r *http.Request, sys *system) {
	var req struct {
		Image    string
		Inserted *bool
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil || req.Image == "" {
		redfishError(w, http.StatusBadRequest, "ActionParameterMissing", "The action VirtualMedia.InsertMedia requires the parameter Image to be present in the request body.")
		return
	}
	s.mu.Lock()
	busy := sys.image != ""
	s.mu.Unlock()
	if busy {
		redfishError(w, http.StatusConflict, "ResourceInUse", "The change to the requested resource failed because the resource is in use or in transition: eject the media first.")
		return
	}
	path, err := s.fetch(r.Context(), req.Image, sys.ID)
	if err != nil {
		redfishError(w, http.StatusBadRequest, "ActionParameterValueError", "The value for the parameter Image in the action VirtualMedia.InsertMedia is invalid: "+err.Error())
		return
	}
	if err := sys.Machine.InsertMedia(path); err != nil {
		redfishError(w, http.StatusInternalServerError, "InternalError", "Insert failed: "+err.Error())
		return
	}
	s.mu.Lock()
	sys.image = req.Image
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// fetch downloads an http(s) image into the service's directory.
func (s *Server) fetch(ctx context.Context, url, id string) (string, error) {
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		return "", errors.New("only HTTP and HTTPS images are supported")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	path := filepath.Join(s.dir, "media-"+id+".iso")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return "", err
	}
	return path, f.Close()
}
