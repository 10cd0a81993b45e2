package model

import "cmp"

// One machine runs one workflow at a time: of the workflows on a hardware,
// the active one is the one it boots into (internal/bootpolicy) and the one
// the engine runs, the others waiting for it (internal/workflow). Both ask
// here, so that they cannot disagree.

// Contends reports whether w competes to be the active workflow on its
// hardware: it is neither in a final state nor disabled.
func Contends(w *Workflow) bool {
	return !w.Status.State.IsFinal() && !BoolValue(w.Spec.Disabled, false)
}

// CompareActive orders workflows of one hardware, the active one first:
//
//  1. one that contends (Contends) before one that does not;
//  2. a RUNNING one before the others: the machine is busy with it, and a
//     workflow that became pending again (re-enabled, or older but
//     reprovisioned) must not take the machine over mid-install;
//  3. the oldest by creation time (ObjectMeta.CreatedAt: the
//     creationTimestamp, or the first store's for a workflow moved from
//     another), so that workflows run in the order they were created. One
//     without a time comes after every one with: the store stamps every
//     workflow it creates, so one without has not been stored yet and is
//     the newest;
//  4. by name, then namespace, for equal timestamps: the order is total,
//     so the result does not depend on the order workflows are listed in.
//
// It returns a negative number when a comes first, a positive one when b
// does, and 0 only for workflows of the same namespace and name.
func CompareActive(a, b *Workflow) int {
	if c := cmp.Compare(activeRank(a), activeRank(b)); c != 0 {
		return c
	}
	at, bt := a.CreatedAt(), b.CreatedAt()
	switch {
	case at != nil && bt != nil:
		if c := at.Compare(*bt); c != 0 {
			return c
		}
	case at != nil:
		return -1
	case bt != nil:
		return 1
	}
	if c := cmp.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	return cmp.Compare(a.Namespace, b.Namespace)
}

// activeRank is the part of CompareActive that is about state: 0 running,
// 1 contending, 2 final or disabled.
func activeRank(w *Workflow) int {
	switch {
	case !Contends(w):
		return 2
	case w.Status.State == StateRunning:
		return 0
	}
	return 1
}

// ActiveWorkflow returns the active workflow among ws, the workflows on one
// hardware: the first by CompareActive, if it contends; nil if none does.
// The caller chooses which workflows are on the hardware (the same
// namespace, say).
func ActiveWorkflow(ws []*Workflow) *Workflow {
	var best *Workflow
	for _, w := range ws {
		if Contends(w) && (best == nil || CompareActive(w, best) < 0) {
			best = w
		}
	}
	return best
}
