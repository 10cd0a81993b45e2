package model

import "time"

// Template holds a workflow definition as a Go text/template in spec.data.
type Template struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       TemplateSpec   `json:"spec,omitempty"`
	Status     TemplateStatus `json:"status,omitempty"`
}

// TemplateSpec is Tinkerbell's Template spec.
type TemplateSpec struct {
	Data *string `json:"data,omitempty"`
}

// TemplateStatus is Tinkerbell's Template status.
type TemplateStatus struct {
	State string `json:"state,omitempty"`
}

// Workflow runs a Template against a Hardware.
type Workflow struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       WorkflowSpec   `json:"spec,omitempty"`
	Status     WorkflowStatus `json:"status,omitempty"`
}

// WorkflowSpec is Tinkerbell's Workflow spec.
type WorkflowSpec struct {
	TemplateRef string            `json:"templateRef,omitempty"`
	HardwareRef string            `json:"hardwareRef,omitempty"`
	HardwareMap map[string]string `json:"hardwareMap,omitempty"`
	Disabled    *bool             `json:"disabled,omitempty"`
	BootOptions *BootOptions      `json:"bootOptions,omitempty"`
}

// BootOptions says how the machine is to be booted for the workflow.
type BootOptions struct {
	ToggleAllowNetboot bool   `json:"toggleAllowNetboot,omitempty"`
	BootMode           string `json:"bootMode,omitempty"`
	ISOURL             string `json:"isoURL,omitempty"`
	// CustombootConfig holds the BMC actions of bootMode customboot.
	CustombootConfig *CustombootConfig `json:"custombootConfig,omitempty"`
}

// CustombootConfig is Tinkerbell's customboot: BMC actions run as one Job
// before the workflow's first action, and as another after its success.
type CustombootConfig struct {
	PreparingActions []BMCAction `json:"preparingActions,omitempty"`
	PostActions      []BMCAction `json:"postActions,omitempty"`
}

// State is the state of a workflow or of one of its actions: one of the
// State constants, or "" before the engine has set one.
//
// Tinkerbell's older releases wrote states with a STATE_ prefix
// ("STATE_RUNNING"). A State is read in either spelling and held in the
// constants' one: UnmarshalText drops the prefix when a Workflow is
// decoded (from the store, a manifest or the API), so code that reads a
// State compares it with == and never normalises. On the wire a State is
// the plain string it holds.
type State string

// Workflow and action states.
const (
	StatePending State = "PENDING"
	StateRunning State = "RUNNING"
	StateSuccess State = "SUCCESS"
	StateFailed  State = "FAILED"
	StateTimeout State = "TIMEOUT"
	// StateCancelled is Anvil's addition: the workflow was cancelled (see
	// WorkflowStatus.CancelRequested), and so was an action interrupted by
	// a cancellation whose outcome on the machine is unknown.
	StateCancelled State = "CANCELLED"
)

// tinkStatePrefix is how Tinkerbell's older releases began every state.
const tinkStatePrefix = "STATE_"

// ParseState reads a state in either spelling: "STATE_RUNNING" and
// "RUNNING" are StateRunning. Any other text is kept as it is.
func ParseState(s string) State {
	if len(s) > len(tinkStatePrefix) && s[:len(tinkStatePrefix)] == tinkStatePrefix {
		s = s[len(tinkStatePrefix):]
	}
	return State(s)
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseState, so
// that decoding a Workflow from JSON or YAML normalises its states.
func (s *State) UnmarshalText(b []byte) error {
	*s = ParseState(string(b))
	return nil
}

// IsFinal reports whether s is terminal: SUCCESS, FAILED, TIMEOUT or
// CANCELLED.
func (s State) IsFinal() bool {
	switch s {
	case StateSuccess, StateFailed, StateTimeout, StateCancelled:
		return true
	}
	return false
}

// WorkflowStatus is Tinkerbell's Workflow status plus Anvil's history.
type WorkflowStatus struct {
	State               State         `json:"state,omitempty"`
	CurrentState        *CurrentState `json:"currentState,omitempty"`
	GlobalTimeout       int64         `json:"globalTimeout,omitempty"`
	GlobalExecutionStop *time.Time    `json:"globalExecutionStop,omitempty"`
	TemplateRendering   string        `json:"templateRendering,omitempty"`
	Tasks               []Task        `json:"tasks,omitempty"`
	Conditions          []Condition   `json:"conditions,omitempty"`

	// Anvil additions.

	// StartTime is when the first action started.
	StartTime *time.Time `json:"startTime,omitempty"`
	// CompletionTime is when the workflow reached a final state.
	CompletionTime *time.Time `json:"completionTime,omitempty"`
	// History records every state change and every action report, with its
	// time, oldest first. It is capped at MaxHistory entries; HistoryDropped
	// counts the oldest entries dropped to stay under the cap.
	History        []HistoryEvent `json:"history,omitempty"`
	HistoryDropped int64          `json:"historyDropped,omitempty"`
	// CancelRequested is when a cancellation was asked for while an action
	// was running: no further action is handed out, and the workflow ends
	// CANCELLED when that action's end is reported. Nil otherwise (a
	// workflow with no running action is cancelled at once).
	CancelRequested *time.Time `json:"cancelRequested,omitempty"`
	// CancelReason is the reason given with the cancellation, if any.
	CancelReason string `json:"cancelReason,omitempty"`
}

// MaxHistory caps WorkflowStatus.History so a chatty agent cannot grow a
// workflow without bound (Kubernetes refuses objects over ~1.5 MiB).
const MaxHistory = 500

// CurrentState points at the action being run (or last run).
type CurrentState struct {
	AgentID    string `json:"agentID,omitempty"`
	TaskID     string `json:"taskID,omitempty"`
	ActionID   string `json:"actionID,omitempty"`
	State      State  `json:"state,omitempty"`
	ActionName string `json:"actionName,omitempty"`
	TaskName   string `json:"taskName,omitempty"`
}

// Task is one rendered task: the actions one agent runs in order.
type Task struct {
	ID          string            `json:"id,omitempty"`
	Name        string            `json:"name"`
	AgentID     string            `json:"agentID"`
	Actions     []Action          `json:"actions"`
	Volumes     []string          `json:"volumes,omitempty"`
	Environment map[string]string `json:"environment,omitempty"`
}

// Action is one rendered action and how its run went.
type Action struct {
	ID                string            `json:"id,omitempty"`
	Name              string            `json:"name"`
	Image             string            `json:"image"`
	Timeout           int64             `json:"timeout"`
	Command           []string          `json:"command,omitempty"`
	Volumes           []string          `json:"volumes,omitempty"`
	Pid               string            `json:"pid,omitempty"`
	Runtime           string            `json:"runtime,omitempty"` // Anvil's: ActionDefinition.Runtime
	Environment       map[string]string `json:"environment,omitempty"`
	State             State             `json:"state,omitempty"`
	ExecutionStart    *time.Time        `json:"executionStart,omitempty"`
	ExecutionStop     *time.Time        `json:"executionStop,omitempty"`
	ExecutionDuration string            `json:"executionDuration,omitempty"`
	Message           string            `json:"message,omitempty"`

	// Anvil additions.

	// Retries is how many more times a failed or timed-out run is tried
	// before the workflow fails (from the template's per-action `retries`).
	Retries int `json:"retries,omitempty"`
	// Attempt counts runs started, from 1.
	Attempt int `json:"attempt,omitempty"`
	// RetryAfter holds a retry back until this time.
	RetryAfter *time.Time `json:"retryAfter,omitempty"`
	// Progress is the last progress the agent reported, if any.
	Progress *Progress `json:"progress,omitempty"`
}

// Progress is an action's self-reported progress.
type Progress struct {
	Bytes       int64   `json:"bytes,omitempty"`
	TotalBytes  int64   `json:"totalBytes,omitempty"`
	BytesPerSec float64 `json:"bytesPerSec,omitempty"`
	Percent     float64 `json:"percent,omitempty"`
}

// Condition is a Kubernetes-style condition.
type Condition struct {
	Type    string     `json:"type"`
	Status  string     `json:"status"`
	Reason  string     `json:"reason,omitempty"`
	Message string     `json:"message,omitempty"`
	Time    *time.Time `json:"time,omitempty"`
}

// WorkflowConditionWaiting is the Workflow condition that is True while
// another workflow on the same Hardware is active; its message names that
// workflow. The engine sets it; the boot policy, the API and the client
// commands read it.
const WorkflowConditionWaiting = "Waiting"

// NetbootJobName is the name of the BMC Job that powers a Hardware off,
// sets a one-time network boot and powers it on for a workflow of boot
// mode netboot, as Tinkerbell names it. One name per Hardware: a new
// workflow's Job replaces the previous one.
func NetbootJobName(hardware string) string {
	return "tink-controller-" + hardware + "-one-time-netboot"
}

// HistoryEvent is one entry of a workflow's history: a state change of the
// workflow or an action, or an agent's report.
type HistoryEvent struct {
	Time time.Time `json:"time"`
	// Type is "workflow" for a workflow state change, "action" for an
	// action's, "report" for an agent report that changed no state (progress).
	Type     string    `json:"type"`
	Task     string    `json:"task,omitempty"`
	Action   string    `json:"action,omitempty"`
	AgentID  string    `json:"agentID,omitempty"`
	State    State     `json:"state,omitempty"`
	Message  string    `json:"message,omitempty"`
	Attempt  int       `json:"attempt,omitempty"`
	Progress *Progress `json:"progress,omitempty"`
}

// Values of ActionDefinition.Runtime (empty is the default: native when
// Anvil implements the image, else a container).
const (
	RuntimeContainer = "container"
	RuntimeNative    = "native"
)

// WorkflowDefinition is the YAML a Template's data renders to.
type WorkflowDefinition struct {
	Version       string           `yaml:"version" json:"version"`
	Name          string           `yaml:"name" json:"name"`
	GlobalTimeout int64            `yaml:"global_timeout" json:"global_timeout"`
	Tasks         []TaskDefinition `yaml:"tasks" json:"tasks"`
}

// TaskDefinition is one task of a WorkflowDefinition.
type TaskDefinition struct {
	Name        string             `yaml:"name" json:"name"`
	Worker      string             `yaml:"worker" json:"worker"`
	Volumes     []string           `yaml:"volumes,omitempty" json:"volumes,omitempty"`
	Environment map[string]string  `yaml:"environment,omitempty" json:"environment,omitempty"`
	Actions     []ActionDefinition `yaml:"actions" json:"actions"`
}

// ActionDefinition is one action of a TaskDefinition.
type ActionDefinition struct {
	Name        string            `yaml:"name" json:"name"`
	Image       string            `yaml:"image" json:"image"`
	Timeout     int64             `yaml:"timeout" json:"timeout"`
	Command     []string          `yaml:"command,omitempty" json:"command,omitempty"`
	OnTimeout   []string          `yaml:"on-timeout,omitempty" json:"on-timeout,omitempty"`
	OnFailure   []string          `yaml:"on-failure,omitempty" json:"on-failure,omitempty"`
	Volumes     []string          `yaml:"volumes,omitempty" json:"volumes,omitempty"`
	Environment map[string]string `yaml:"environment,omitempty" json:"environment,omitempty"`
	Pid         string            `yaml:"pid,omitempty" json:"pid,omitempty"`
	// Runtime is Anvil's addition: how the agent runs the image. Empty:
	// natively when Anvil implements the image, else in a container;
	// RuntimeContainer: always in a container (as Tinkerbell would);
	// RuntimeNative: never in a container.
	Runtime string `yaml:"runtime,omitempty" json:"runtime,omitempty"`
	// Retries is Anvil's addition: how many more times to run the action
	// after a failure or timeout before failing the workflow.
	Retries int `yaml:"retries,omitempty" json:"retries,omitempty"`
}
