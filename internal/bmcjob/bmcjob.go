// Package bmcjob owns the BMC Job that an operator's request makes —
// `anvil power`, `anvil bootdev` and the web UI's power buttons: which
// Machine a Hardware names, the Job's name and labels, its one task, and
// its shape on the API (v1.BmcJob for BmcJobService.Create). One place
// decides it, so a Job made from the UI is the Job the CLI makes, and the
// server's BMC executor (internal/bmc) runs either alike.
//
// It links neither the server nor the store: the CLI, a client, imports
// it.
package bmcjob

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/wire"
)

// CreatedByLabel marks the Jobs made here; its value says by what
// (CreatedByCLI, CreatedByUI), for `anvil get jobs -l` and the audit.
const CreatedByLabel = "anvil.dev/created-by"

// Values of CreatedByLabel.
const (
	CreatedByCLI = "anvil-cli"
	CreatedByUI  = "anvil-ui"
)

// MachineOf returns the name of the Machine (BMC) that hw names in
// spec.bmcRef, in hw's namespace, or an error saying it names none.
func MachineOf(hw *model.Hardware) (string, error) {
	if hw.Spec.BMCRef == nil || hw.Spec.BMCRef.Name == "" {
		return "", fmt.Errorf("hardware %s/%s has no spec.bmcRef: it names no Machine (BMC) to drive; add one (docs/bmc.md)", hw.Namespace, hw.Name)
	}
	return hw.Spec.BMCRef.Name, nil
}

// New returns the Job that runs task on the Machine machine of namespace
// ns. what names it ("power-on", "bootdev-pxe"); createdBy is the value
// of CreatedByLabel.
func New(ns, machine, what, createdBy string, task model.BMCAction) *model.Job {
	return &model.Job{
		TypeMeta:   model.TypeMeta{APIVersion: model.BMCAPIVersion, Kind: model.KindJob},
		ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name(machine, what), Labels: map[string]string{CreatedByLabel: createdBy}},
		Spec:       model.JobSpec{MachineRef: model.ObjectReference{Name: machine, Namespace: ns}, Tasks: []model.BMCAction{task}},
	}
}

// Power returns the Job of one power action (model.PowerActions) on the
// Machine machine of namespace ns; an unknown action is an error naming
// the known ones.
func Power(ns, machine, action, createdBy string) (*model.Job, error) {
	if err := CheckPower(action); err != nil {
		return nil, err
	}
	return New(ns, machine, "power-"+action, createdBy, model.BMCAction{PowerAction: &action}), nil
}

// CheckPower says whether action is a power action, naming the known
// ones when it is not: for a caller that refuses a bad one before it
// reads anything.
func CheckPower(action string) error {
	if !slices.Contains(model.PowerActions, action) {
		return fmt.Errorf("unknown power action %q (want one of %s)", action, strings.Join(model.PowerActions, ", "))
	}
	return nil
}

// Message returns job as BmcJobService.Create takes it.
func Message(job *model.Job) (*v1.BmcJob, error) {
	p, err := wire.ToParts(job)
	if err != nil {
		return nil, err
	}
	return &v1.BmcJob{ApiVersion: p.APIVersion, Kind: p.Kind, Metadata: p.Meta, Spec: p.Spec}, nil
}

// name is "<machine>-<what>-<time><random>": unique, readable, and a DNS
// subdomain (lower case, at most 253 characters).
func name(machine, what string) string {
	var b [2]byte
	_, _ = rand.Read(b[:])
	suffix := strconv.FormatInt(time.Now().UnixMilli(), 36) + hex.EncodeToString(b[:])
	base := machine + "-" + what
	if max := 253 - len(suffix) - 1; len(base) > max {
		base = strings.TrimRight(base[:max], "-.")
	}
	return base + "-" + suffix
}
