// Package workflow turns a Template and a Hardware into a running Workflow:
// it renders templates, advances the workflow state machine on agent reports,
// enforces action and global timeouts on the server clock, and decides which
// action an agent runs next.
//
// The package has three layers. render.go renders a Template's data (Go
// text/template with Sprig's hermetic functions plus formatPartition,
// netmaskToPrefixLength, toYaml and fromYaml) into a validated
// model.WorkflowDefinition, and offers CheckTemplateStatic for apply time.
// state.go is the state machine as pure functions of a model.WorkflowStatus
// and a time (InitialStatus, ApplyReport, CheckDeadlines, NextActionFor): no
// store, no clock. engine.go is the Engine: a controller (Run) that renders
// new workflows, keeps one active workflow per hardware, toggles netboot and
// schedules deadline timers, and the agent API (GetAction, ReportActionStatus)
// that the transport layer calls. netbootjob.go drives the BMC for netboot
// workflows on Hardware with a bmcRef: it writes Tinkerbell's one-time
// netboot Job (run by internal/bmc, which it does not import) and holds the
// workflow until the Job ends.
//
// Workflows are identified by "namespace/name" (WorkflowID). Task and action
// IDs are assigned at render time and stored in the status.
//
// It reads and writes objects only through store.Store and must not know about
// transports (gRPC, HTTP) or the boot path.
package workflow

import (
	"errors"
	"time"

	"github.com/anvilproj/anvil/internal/model"
)

// NextAction is the action an agent is to run next.
type NextAction struct {
	WorkflowID  string // "namespace/name"
	TaskID      string
	ActionID    string
	TaskName    string
	Name        string
	Image       string
	Timeout     int64 // seconds
	Command     []string
	Volumes     []string
	Environment map[string]string
	Pid         string
	Runtime     string // model.ActionDefinition.Runtime
	Attempt     int
}

// ActionReport is an agent's report about one action: its start (State
// RUNNING the first time), progress (RUNNING again), or end (SUCCESS, FAILED,
// TIMEOUT).
type ActionReport struct {
	WorkflowID string // "namespace/name"
	// Agent is the reporting agent's name as read where the report
	// arrived; when its ID is empty, AgentID is read instead.
	Agent          AgentName
	AgentID        string
	TaskID         string
	ActionID       string
	ActionName     string
	State          model.State
	ExecutionStart *time.Time
	ExecutionStop  *time.Time
	Message        string
	Progress       *model.Progress
}

// Errors the engine returns to the agent and job APIs, mapped to codes at
// the transport.
var (
	// ErrNoAction: nothing for this agent to run now.
	ErrNoAction = errors.New("no action for this agent")
	// ErrUnknownWorkflow: the report names a workflow that does not exist.
	ErrUnknownWorkflow = errors.New("unknown workflow")
	// ErrBadReport: the report does not fit the workflow (wrong agent,
	// action or order, or the workflow already ended).
	ErrBadReport = errors.New("report does not match the workflow")
	// ErrEnded: the workflow to cancel already ended SUCCESS, FAILED or
	// TIMEOUT.
	ErrEnded = errors.New("workflow already ended")
)
