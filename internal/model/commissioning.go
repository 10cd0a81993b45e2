package model

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

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
	// Result is "passed" or "failed" once decided; empty while the
	// workflow that runs the checks has not ended.
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
	// Result is "passed", "failed" or "unsupported" (the device cannot
	// be asked: a virtio disk has no SMART).
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

// Bounds on what a Hardware keeps of commissioning: an agent that sends
// thousands of checks or megabytes of detail does not bloat the store.
const (
	MaxCommissioningChecks = 256 // per Hardware; later ones are dropped
	maxCheckName           = 128
	maxCheckDetail         = 1024
	maxCheckValues         = 32
	maxCheckValue          = 256
)

// Record merges the checks a report of workflow wf carried into c: a check
// of the same name is replaced, a new one appended (up to
// MaxCommissioningChecks). A report of another workflow than the one
// recorded starts afresh (a re-commissioning). A failed check decides
// the result at once: the machine is failed before its workflow ends.
// Record bounds every string and repairs what it cannot store: an unknown
// result counts as failed.
func (c *Commissioning) Record(wf string, checks []CommissioningCheck, now time.Time) {
	if c.Workflow != wf {
		*c = Commissioning{Workflow: wf}
	}
	for _, ch := range checks {
		ch = boundCheck(ch)
		i := 0
		for i < len(c.Checks) && c.Checks[i].Name != ch.Name {
			i++
		}
		switch {
		case i < len(c.Checks):
			c.Checks[i] = ch
		case len(c.Checks) < MaxCommissioningChecks:
			c.Checks = append(c.Checks, ch)
		}
	}
	c.UpdatedAt = &now
	if c.Failed() {
		var names []string
		for _, ch := range c.Checks {
			if ch.Result == CheckFailed {
				names = append(names, ch.Name)
			}
		}
		c.Result = CommissioningFailed
		c.Message = "failed: " + strings.Join(names, ", ")
	}
}

// End records that workflow wf ended in state: a workflow that reported
// checks and ended SUCCESS with none failed passes; one that ended
// FAILED, TIMEOUT or CANCELLED fails (an action other than a check failed,
// or the checks never all ran). A workflow that reported no check, or a
// result already decided, is left as it is.
func (c *Commissioning) End(wf string, state State, now time.Time) {
	if c.Workflow != wf || c.Result != "" || !state.IsFinal() {
		return
	}
	c.UpdatedAt = &now
	if state == StateSuccess && !c.Failed() {
		c.Result, c.Message = CommissioningPassed, "every check passed or is unsupported; workflow "+wf+" ended SUCCESS"
		return
	}
	c.Result, c.Message = CommissioningFailed, "workflow "+wf+" ended "+string(state)+" before its checks passed"
}

// boundCheck cuts ch's strings and values to the bounds, and makes an
// unknown result a failure that says what it was.
func boundCheck(ch CommissioningCheck) CommissioningCheck {
	ch.Name = cut(ch.Name, maxCheckName)
	if ch.Name == "" {
		ch.Name = "unnamed"
	}
	switch ch.Result {
	case CheckPassed, CheckFailed, CheckUnsupported:
	default:
		ch.Detail = fmt.Sprintf("unknown result %q: %s", cut(ch.Result, maxCheckName), ch.Detail)
		ch.Result = CheckFailed
	}
	ch.Detail = cut(ch.Detail, maxCheckDetail)
	if len(ch.Values) > 0 {
		keys := slices.Sorted(maps.Keys(ch.Values))
		vals := make(map[string]string, min(len(keys), maxCheckValues))
		for _, k := range keys[:min(len(keys), maxCheckValues)] {
			vals[cut(k, maxCheckName)] = cut(ch.Values[k], maxCheckValue)
		}
		ch.Values = vals
	}
	return ch
}

// cut is s cut to at most n bytes, on a rune boundary, marked when cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n-3]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "..."
}

// RecordCommissioning records a report of workflow wf on h: its checks
// (Record), and the workflow's state after it (End), then sets the label.
// A result that was decided and whose label has since been removed (an
// operator cleared it to re-commission the machine) is forgotten first,
// so that a commissioning workflow of the same name starts afresh.
func (h *Hardware) RecordCommissioning(wf string, checks []CommissioningCheck, state State, now time.Time) {
	c := h.Status.Commissioning
	if c == nil || (c.Result != "" && h.Labels[LabelCommissioning] == "") {
		c = &Commissioning{}
		h.Status.Commissioning = c
	}
	if len(checks) > 0 {
		c.Record(wf, checks, now)
	}
	c.End(wf, state, now)
	h.SetCommissioningLabel()
}

// SetCommissioningLabel sets LabelCommissioning to c's result, or removes
// it while there is none. It reports whether the labels changed.
func (h *Hardware) SetCommissioningLabel() bool {
	want := ""
	if h.Status.Commissioning != nil {
		want = h.Status.Commissioning.Result
	}
	have, had := h.Labels[LabelCommissioning]
	switch {
	case want == "" && had:
		delete(h.Labels, LabelCommissioning)
		return true
	case want != "" && have != want:
		if h.Labels == nil {
			h.Labels = map[string]string{}
		}
		h.Labels[LabelCommissioning] = want
		return true
	}
	return false
}

// CommissioningFailed reports whether h is marked as failed commissioning
// (LabelCommissioning): no workflow may target it while it is.
func (h *Hardware) CommissioningFailed() bool {
	return h.Labels[LabelCommissioning] == CommissioningFailed
}
