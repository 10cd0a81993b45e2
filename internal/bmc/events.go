package bmc

import (
	"context"
	"time"

	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// Outcomes of the events a Job leaves in the machine's record.
const (
	outcomeStarted   = "started"
	outcomeCompleted = "completed"
	outcomeFailed    = "failed"
)

// recordTimeout bounds finding the machines of a Job's Machine.
const recordTimeout = 2 * time.Second

// machines returns the first MAC of every Hardware of the Job's namespace
// whose spec.bmcRef names the Job's Machine: the records the Job's
// progress goes to (the recorder files an event by its MAC). Read once per
// Job; an error leaves the Job's progress out of the records, not the Job.
func (e *Executor) machines(ctx context.Context, j *model.Job) []macaddr.MAC {
	if e.cfg.Events == nil {
		return nil
	}
	ns := j.Namespace
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	objs, _, err := e.cfg.Store.List(ctx, model.KindHardware, store.ListOptions{Namespace: ns})
	if err != nil {
		e.log.Warn("bmc job: cannot find its machines for their records", "job", ns+"/"+j.Name, "err", err)
		return nil
	}
	var out []macaddr.MAC
	for _, o := range objs {
		h := o.(*model.Hardware)
		if h.Spec.BMCRef == nil || h.Spec.BMCRef.Name != j.Spec.MachineRef.Name {
			continue
		}
		if macs := h.MACs(); len(macs) > 0 {
			out = append(out, macs[0])
		}
	}
	return out
}

// record puts one line in the record of each of r's machines.
func (r *jobRun) record(outcome, msg string) {
	for _, mac := range r.macs {
		r.e.cfg.Events.Record(machinelog.Event{Time: r.e.cfg.Clock.Now(), Service: machinelog.ServiceBMC, MAC: mac,
			Outcome: outcome, Message: r.scrub(msg)})
	}
}
