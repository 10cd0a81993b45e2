package model

import "time"

// LabelCommissioning marks a Hardware whose commissioning checks ended:
// CommissioningPassed or CommissioningFailed. A failed machine gets no
// workflow: admission refuses one and enrolment skips it, until the label
// is removed (by hand, or to re-commission it).
const LabelCommissioning = "anvil.io/commissioning"

// Outcomes of commissioning, as LabelCommissioning and
// Commissioning.Result carry them.
const (
	CommissioningPassed = "passed"
	CommissioningFailed = "failed"
)

// Results of one commissioning check (CommissioningCheck.Result).
const (
	CheckPassed      = "passed"
	CheckFailed      = "failed"
	CheckUnsupported = "unsupported" // the device cannot be asked (a virtio disk has no SMART)
)

// Commissioning is what the machine's commissioning checks found: each
// check's result as the agent reported it, and the outcome. Written by
// the server from its agent's reports, never by hand. Anvil's: Tinkerbell's
// Hardware status has no such field.
type Commissioning struct {
	// Result is CommissioningPassed or CommissioningFailed once decided;
	// empty while the workflow that runs the checks has not ended.
	Result string `json:"result,omitempty"`
	// Workflow is the workflow whose actions reported the checks
	// ("namespace/name").
	Workflow string `json:"workflow,omitempty"`
	// Message says why the result is what it is.
	Message string `json:"message,omitempty"`
	// UpdatedAt is when the server last recorded a report.
	UpdatedAt *time.Time `json:"updatedAt,omitempty"`
	// Checks are the results, one per check and device, in the order
	// they were first reported.
	Checks []CommissioningCheck `json:"checks,omitempty"`
}

// CommissioningCheck is the result of one check on one device.
type CommissioningCheck struct {
	// Name is the check and what it looked at: "smart/nvme0n1",
	// "disk-read/vda", "memory", "nic-link/eth0".
	Name string `json:"name"`
	// Result is CheckPassed, CheckFailed or CheckUnsupported.
	Result string `json:"result"`
	// Detail says what was found, for a person.
	Detail string `json:"detail,omitempty"`
	// Values are the measurements, by name ("mediaErrors": "0",
	// "readMBps": "812.4").
	Values map[string]string `json:"values,omitempty"`
	// Time is when the check ran, on the machine's clock.
	Time *time.Time `json:"time,omitempty"`
}

// Failed reports whether any check failed.
func (c *Commissioning) Failed() bool {
	for _, ch := range c.Checks {
		if ch.Result == CheckFailed {
			return true
		}
	}
	return false
}
