package model

import (
	"fmt"
	"strings"
	"time"
)

// BMCAPIVersion is the group/version of Rufio's kinds (Machine, Job, Task):
// out-of-band control of a machine through its baseboard management
// controller. Manifests written for Tinkerbell's Rufio apply unchanged.
const BMCAPIVersion = "bmc.tinkerbell.org/v1alpha1"

// The kinds of the BMC group.
const (
	KindMachine = "Machine"
	KindJob     = "Job"
	KindTask    = "Task"
)

// DefaultIPMIPort is the port of a Machine's connection when it names none
// (RMCP, UDP 623), as Rufio defaults it.
const DefaultIPMIPort = 623

// Power states a Machine reports in status.powerState.
const (
	PowerOn      = "on"
	PowerOff     = "off"
	PowerUnknown = "unknown"
)

// Power actions a Job's task may ask for (Rufio's spelling).
const (
	PowerActionOn     = "on"
	PowerActionOff    = "off"    // hard power off
	PowerActionSoft   = "soft"   // ACPI soft shutdown
	PowerActionCycle  = "cycle"  // off, then on
	PowerActionReset  = "reset"  // hard reset
	PowerActionStatus = "status" // read the power state only
)

// PowerActions lists every power action, for errors and help.
var PowerActions = []string{PowerActionOn, PowerActionOff, PowerActionSoft, PowerActionCycle, PowerActionReset, PowerActionStatus}

// Boot devices a oneTimeBootDeviceAction may name (Rufio's spelling).
const (
	BootDevicePXE   = "pxe"
	BootDeviceDisk  = "disk"
	BootDeviceCDROM = "cdrom"
	BootDeviceBIOS  = "bios"
	BootDeviceSafe  = "safe"
)

// BootDevices lists every boot device, for errors and help.
var BootDevices = []string{BootDevicePXE, BootDeviceDisk, BootDeviceCDROM, BootDeviceBIOS, BootDeviceSafe}

// Condition statuses and types, as Rufio writes them.
const (
	ConditionTrue  = "True"
	ConditionFalse = "False"

	// ConditionCompleted: every task of a Job (or the Task) succeeded.
	ConditionCompleted = "Completed"
	// ConditionFailed: a task failed; the message says which, through
	// which provider and why.
	ConditionFailed = "Failed"
	// ConditionRunning: the Job is being executed.
	ConditionRunning = "Running"
	// ConditionContactable: Machine condition, whether the BMC answered.
	ConditionContactable = "Contactable"
)

// Machine is Rufio's Machine: how to reach one machine's BMC.
type Machine struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       MachineSpec   `json:"spec,omitempty"`
	Status     MachineStatus `json:"status,omitempty"`
}

// MachineSpec is a Machine's desired state: its connection.
type MachineSpec struct {
	Connection Connection `json:"connection"`
}

// Connection is how to reach a BMC.
type Connection struct {
	// Host is the BMC's address or host name.
	Host string `json:"host"`
	// Port is the BMC's port; 0 means DefaultIPMIPort.
	Port int `json:"port,omitempty"`
	// AuthSecretRef names the Secret holding the username and password.
	AuthSecretRef SecretReference `json:"authSecretRef"`
	// InsecureTLS skips verifying a TLS provider's certificate.
	InsecureTLS bool `json:"insecureTLS,omitempty"`
	// ProviderOptions tunes each provider.
	ProviderOptions *ProviderOptions `json:"providerOptions,omitempty"`
}

// SecretReference names a Secret; an empty namespace is the referrer's.
type SecretReference struct {
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}

// ProviderOptions are Rufio's per-provider options. Anvil drives IPMI,
// Redfish and Intel AMT; rpc is accepted so Rufio manifests apply, and
// refused when a task would need it (see internal/bmc).
type ProviderOptions struct {
	// PreferredOrder lists provider names to try, in order.
	PreferredOrder []string         `json:"preferredOrder,omitempty"`
	IPMITOOL       *IPMIOptions     `json:"ipmitool,omitempty"`
	Redfish        *RedfishOptions  `json:"redfish,omitempty"`
	IntelAMT       *IntelAMTOptions `json:"intelAMT,omitempty"`
	// RPC is Rufio's webhook provider; kept as written, not used.
	RPC map[string]any `json:"rpc,omitempty"`
}

// IPMIOptions tunes the IPMI provider (Rufio calls it ipmitool).
type IPMIOptions struct {
	Port int `json:"port,omitempty"`
	// CipherSuite is the RMCP+ cipher suite ID, "3" or "17"; empty tries
	// 17, then 3.
	CipherSuite string `json:"cipherSuite,omitempty"`
}

// RedfishOptions tunes the Redfish provider: its HTTPS port (default 443),
// basic auth instead of a session, and which system of a service with
// several (by Id or Name).
type RedfishOptions struct {
	Port         int    `json:"port,omitempty"`
	UseBasicAuth bool   `json:"useBasicAuth,omitempty"`
	SystemName   string `json:"systemName,omitempty"`
}

// IntelAMTOptions tunes the Intel AMT provider: its port (default 16992
// for http, 16993 for https) and hostScheme, http (Rufio's default) or
// https.
type IntelAMTOptions struct {
	Port       int    `json:"port,omitempty"`
	HostScheme string `json:"hostScheme,omitempty"`
}

// MachineStatus is what the BMC last said.
type MachineStatus struct {
	// PowerState is on, off or unknown.
	PowerState string             `json:"powerState,omitempty"`
	Conditions []MachineCondition `json:"conditions,omitempty"`
}

// MachineCondition is one observation of a Machine.
type MachineCondition struct {
	Type           string     `json:"type"`
	Status         string     `json:"status"`
	LastUpdateTime *time.Time `json:"lastUpdateTime,omitempty"`
	Message        string     `json:"message,omitempty"`
}

// Job is Rufio's Job: an ordered list of BMC tasks for one Machine.
type Job struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       JobSpec   `json:"spec,omitempty"`
	Status     JobStatus `json:"status,omitempty"`
}

// JobSpec names the Machine and the tasks, run in order; the first failure
// stops the Job.
type JobSpec struct {
	MachineRef ObjectReference `json:"machineRef"`
	Tasks      []BMCAction     `json:"tasks"`
}

// ObjectReference names an object; an empty namespace is the referrer's.
type ObjectReference struct {
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}

// BMCAction is one task: exactly one of its fields is set.
type BMCAction struct {
	PowerAction             *string                  `json:"powerAction,omitempty"`
	OneTimeBootDeviceAction *OneTimeBootDeviceAction `json:"oneTimeBootDeviceAction,omitempty"`
	VirtualMediaAction      *VirtualMediaAction      `json:"virtualMediaAction,omitempty"`
	// BootDevice is the newer Tinkerbell spelling of a boot device task
	// (bmc.tinkerbell.org Operations, used by customboot's actions).
	BootDevice *BootDeviceConfig `json:"bootDevice,omitempty"`
}

// BootDeviceConfig sets the device of the next boot (of every boot when
// persistent).
type BootDeviceConfig struct {
	Device     string `json:"device,omitempty"`
	Persistent bool   `json:"persistent,omitempty"`
	EFIBoot    bool   `json:"efiBoot,omitempty"`
}

// BootDeviceOf returns the boot device task a holds, in either spelling
// (oneTimeBootDeviceAction or bootDevice), and whether it holds one.
func (a BMCAction) BootDeviceOf() (device string, efi, persistent, ok bool) {
	if b := a.OneTimeBootDeviceAction; b != nil && len(b.Devices) > 0 {
		return b.Devices[0], b.EFIBoot, b.Persistent, true
	}
	if b := a.BootDevice; b != nil {
		return b.Device, b.EFIBoot, b.Persistent, true
	}
	return "", false, false, false
}

// OneTimeBootDeviceAction sets the device of the next boot. Only the first
// device is used, as in Rufio.
type OneTimeBootDeviceAction struct {
	Devices []string `json:"device"`
	EFIBoot bool     `json:"efiBoot,omitempty"`
	// Persistent (Anvil's) keeps the device for every later boot instead
	// of the next one only.
	Persistent bool `json:"persistent,omitempty"`
}

// VirtualMediaAction inserts (mediaURL set) or ejects media; Redfish does
// it, IPMI cannot.
type VirtualMediaAction struct {
	MediaURL string `json:"mediaURL,omitempty"`
	Kind     string `json:"kind"`
}

// JobStatus is Rufio's Job status.
type JobStatus struct {
	Conditions     []JobCondition `json:"conditions,omitempty"`
	StartTime      *time.Time     `json:"startTime,omitempty"`
	CompletionTime *time.Time     `json:"completionTime,omitempty"`
}

// JobCondition is a Job's (and a Task's) condition.
type JobCondition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
}

// BMCTask is one task of a Job, as the executor runs it: Rufio names it
// "<job>-task-<n>".
type BMCTask struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       TaskSpec   `json:"spec,omitempty"`
	Status     TaskStatus `json:"status,omitempty"`
}

// TaskSpec is the action and the connection it used.
type TaskSpec struct {
	Task       BMCAction  `json:"task"`
	Connection Connection `json:"connection,omitempty"`
}

// TaskStatus is Rufio's Task status.
type TaskStatus struct {
	Conditions     []JobCondition `json:"conditions,omitempty"`
	StartTime      *time.Time     `json:"startTime,omitempty"`
	CompletionTime *time.Time     `json:"completionTime,omitempty"`
}

// BMCJobLabel is the label the executor puts on each Task, naming its Job
// (Rufio links them by owner reference, which Anvil's metadata lacks).
const BMCJobLabel = "bmc.tinkerbell.org/job"

// TaskName is the name of a Job's n-th task (from 0), Rufio's form.
func TaskName(job string, n int) string { return fmt.Sprintf("%s-task-%d", job, n) }

// SetCondition sets the condition of type t in conds, adding it if absent.
func SetCondition(conds []JobCondition, t, status, msg string) []JobCondition {
	for i := range conds {
		if conds[i].Type == t {
			conds[i].Status, conds[i].Message = status, msg
			return conds
		}
	}
	return append(conds, JobCondition{Type: t, Status: status, Message: msg})
}

// HasCondition reports whether conds hold type t with status True.
func HasCondition(conds []JobCondition, t string) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == ConditionTrue
		}
	}
	return false
}

// Finished reports whether the Job has completed or failed.
func (j *Job) Finished() bool {
	return HasCondition(j.Status.Conditions, ConditionCompleted) || HasCondition(j.Status.Conditions, ConditionFailed)
}

// Describe names the action for messages: "powerAction on",
// "oneTimeBootDeviceAction pxe (efiBoot)".
func (a BMCAction) Describe() string {
	switch {
	case a.PowerAction != nil:
		return "powerAction " + *a.PowerAction
	case a.OneTimeBootDeviceAction != nil:
		s := "oneTimeBootDeviceAction"
		if len(a.OneTimeBootDeviceAction.Devices) > 0 {
			s += " " + a.OneTimeBootDeviceAction.Devices[0]
		}
		if a.OneTimeBootDeviceAction.EFIBoot {
			s += " (efiBoot)"
		}
		return s
	case a.VirtualMediaAction != nil:
		return "virtualMediaAction " + a.VirtualMediaAction.Kind
	case a.BootDevice != nil:
		s := "bootDevice " + a.BootDevice.Device
		if a.BootDevice.EFIBoot {
			s += " (efiBoot)"
		}
		if a.BootDevice.Persistent {
			s += " (persistent)"
		}
		return s
	}
	return "empty action"
}

func validateMachine(m *Machine, add addFunc) {
	c := m.Spec.Connection
	validateConnection(c, "spec.connection", add)
}

func validateConnection(c Connection, p string, add addFunc) {
	if c.Host == "" {
		add(p+".host", "missing host (the BMC's address)")
	}
	if c.Port < 0 || c.Port > 65535 {
		add(p+".port", "%d is not a port", c.Port)
	}
	if r := c.AuthSecretRef; r.Name == "" {
		add(p+".authSecretRef.name", "missing name (of a Secret with username and password)")
	} else if msg := checkDNSSubdomain(r.Name); msg != "" {
		add(p+".authSecretRef.name", "%q: %s", r.Name, msg)
	}
	if o := c.ProviderOptions; o != nil {
		for i, name := range o.PreferredOrder {
			if _, ok := CanonicalProvider(name); !ok {
				add(fmt.Sprintf("%s.providerOptions.preferredOrder[%d]", p, i), "unknown provider %q (want ipmitool, redfish, intelAMT or rpc)", name)
			}
		}
		if o.IPMITOOL != nil {
			switch o.IPMITOOL.CipherSuite {
			case "", "3", "17":
			default:
				add(p+".providerOptions.ipmitool.cipherSuite", "%q: Anvil speaks cipher suites 3 and 17", o.IPMITOOL.CipherSuite)
			}
			if o.IPMITOOL.Port < 0 || o.IPMITOOL.Port > 65535 {
				add(p+".providerOptions.ipmitool.port", "%d is not a port", o.IPMITOOL.Port)
			}
		}
		if o.Redfish != nil && (o.Redfish.Port < 0 || o.Redfish.Port > 65535) {
			add(p+".providerOptions.redfish.port", "%d is not a port", o.Redfish.Port)
		}
		if a := o.IntelAMT; a != nil {
			if a.Port < 0 || a.Port > 65535 {
				add(p+".providerOptions.intelAMT.port", "%d is not a port", a.Port)
			}
			switch strings.ToLower(a.HostScheme) {
			case "", "http", "https":
			default:
				add(p+".providerOptions.intelAMT.hostScheme", "%q: want http or https", a.HostScheme)
			}
		}
	}
}

// Provider names, as Rufio's providerOptions and preferredOrder spell them.
const (
	ProviderIPMI     = "ipmitool"
	ProviderRedfish  = "redfish"
	ProviderIntelAMT = "intelAMT"
	ProviderRPC      = "rpc"
)

// CanonicalProvider maps a preferredOrder name to Anvil's provider name.
// Rufio's names are bmclib's and case-insensitive ("IntelAMT",
// "gofish", "ipmitool"); Anvil's own ("redfish", "intelAMT") count too.
func CanonicalProvider(name string) (string, bool) {
	switch strings.ToLower(name) {
	case "ipmitool", "ipmi":
		return ProviderIPMI, true
	case "redfish", "gofish":
		return ProviderRedfish, true
	case "intelamt":
		return ProviderIntelAMT, true
	case "rpc":
		return ProviderRPC, true
	}
	return name, false
}

func validateJob(j *Job, add addFunc) {
	if j.Spec.MachineRef.Name == "" {
		add("spec.machineRef.name", "missing name (of the Machine the tasks run on)")
	}
	// A namespace is an organisation: a Job drives its own namespace's
	// Machines only, or an operator of one could power another's off.
	if ns, own := j.Spec.MachineRef.Namespace, namespaceOrDefault(j.Namespace); ns != "" && ns != own {
		add("spec.machineRef.namespace", "%q: a Job drives the Machines of its own namespace (%q) only", ns, own)
	}
	if len(j.Spec.Tasks) == 0 {
		add("spec.tasks", "no tasks (want powerAction, oneTimeBootDeviceAction or virtualMediaAction entries)")
	}
	for i, a := range j.Spec.Tasks {
		validateAction(a, fmt.Sprintf("spec.tasks[%d]", i), add)
	}
}

func namespaceOrDefault(ns string) string {
	if ns == "" {
		return DefaultNamespace
	}
	return ns
}

func validateAction(a BMCAction, p string, add addFunc) {
	n := 0
	if a.PowerAction != nil {
		n++
		if !contains(PowerActions, *a.PowerAction) {
			add(p+".powerAction", "%q is not a power action (want one of %v)", *a.PowerAction, PowerActions)
		}
	}
	if b := a.OneTimeBootDeviceAction; b != nil {
		n++
		if len(b.Devices) == 0 {
			add(p+".oneTimeBootDeviceAction.device", "no device (want one of %v)", BootDevices)
		}
		for i, d := range b.Devices {
			if !contains(BootDevices, d) {
				add(fmt.Sprintf("%s.oneTimeBootDeviceAction.device[%d]", p, i), "%q is not a boot device (want one of %v)", d, BootDevices)
			}
		}
	}
	if b := a.BootDevice; b != nil {
		n++
		if !contains(BootDevices, b.Device) {
			add(p+".bootDevice.device", "%q is not a boot device (want one of %v)", b.Device, BootDevices)
		}
	}
	if v := a.VirtualMediaAction; v != nil {
		n++
		if v.Kind != "CD" && v.Kind != "Floppy" {
			add(p+".virtualMediaAction.kind", "%q: want CD or Floppy", v.Kind)
		}
	}
	switch n {
	case 0:
		add(p, "empty task: set one of powerAction, oneTimeBootDeviceAction (or bootDevice), virtualMediaAction")
	case 1:
	default:
		add(p, "a task holds exactly one action; split it into %d tasks", n)
	}
}

func validateTask(t *BMCTask, add addFunc) {
	validateAction(t.Spec.Task, "spec.task", add)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// PreferredProvider is the provider Anvil drives m's BMC with: the first
// of its providerOptions.preferredOrder that Anvil has (IPMI, Redfish,
// Intel AMT), else IPMI, the executor's first. Nil m gives "".
func PreferredProvider(m *Machine) string {
	if m == nil {
		return ""
	}
	if o := m.Spec.Connection.ProviderOptions; o != nil {
		for _, name := range o.PreferredOrder {
			switch p, _ := CanonicalProvider(name); p {
			case ProviderIPMI, ProviderRedfish, ProviderIntelAMT:
				return p
			}
		}
	}
	return ProviderIPMI
}
