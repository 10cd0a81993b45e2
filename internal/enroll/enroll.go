package enroll

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"

	"github.com/anvilproj/anvil/internal/labels"
	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/workflow"
)

// Outcomes of a Result: short, stable words.
const (
	// Enrolled: this pass created the Workflow.
	Enrolled = "enrolled"
	// WouldEnrol: a dry run; the rule would create the Workflow.
	WouldEnrol = "would-enrol"
	// NoMatch: no rule of the Hardware's namespace matches it.
	NoMatch = "no-match"
	// AlreadyEnrolled: a rule enrolled it before (AnnotationEnrolledBy).
	AlreadyEnrolled = "already-enrolled"
	// HasWorkflow: a workflow already targets it; rules leave it alone.
	HasWorkflow = "has-workflow"
	// NoAttributes: its agent has not reported an inventory yet.
	NoAttributes = "no-attributes"
	// Failed: the rule matched but the Workflow could not be made.
	Failed = "failed"
	// Commissioning: with Config.CommissionTemplate, the machine's
	// commissioning workflow was made (or would be, in a dry run) or has
	// not passed yet; it is enrolled once it passes.
	Commissioning = "commissioning"
	// CommissioningFailed: the machine failed commissioning (label
	// anvil.io/commissioning=failed); no rule enrols it.
	CommissioningFailed = "commissioning-failed"
)

// Result is what a pass did, or would do, for one discovered Hardware.
type Result struct {
	Hardware *model.Hardware
	Decision Decision
	// Outcome is one of the outcome constants.
	Outcome string
	// Workflow is the name of the enrolment Workflow (made, to be made,
	// or the one already there).
	Workflow string
	// Message says why, for a person.
	Message string
}

// Config configures an Enroller.
type Config struct {
	// Store holds the Hardware, rule sets, Templates and Workflows.
	Store store.Store
	// Logger gets a line per enrolment. If nil, slog.Default().
	Logger *slog.Logger
	// Events gets an event per enrolment, in the machine's record. If
	// nil, machinelog.Discard.
	Events machinelog.Sink
	// CommissionTemplate, when set, names a Template (of the machine's
	// namespace) of commissioning actions: a discovered machine first
	// gets Workflow commission-<hardware> from it, and is enrolled by the
	// rules only once commissioning passed (label
	// anvil.io/commissioning=passed). Empty: machines are enrolled as
	// they are discovered.
	CommissionTemplate string
}

// Enroller matches discovered Hardware to rules and creates their
// Workflows. It is safe for concurrent use: two passes (the controller's
// and `anvil enroll`'s) never create two Workflows for one machine,
// because the Workflow's name is the Hardware's (WorkflowName) and a
// store refuses a taken name.
type Enroller struct {
	cfg Config
	log *slog.Logger
}

// New returns an Enroller.
func New(cfg Config) *Enroller {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Events == nil {
		cfg.Events = machinelog.Discard
	}
	return &Enroller{cfg: cfg, log: cfg.Logger}
}

// discovered selects the Hardware enrolment considers.
var discovered = labels.Selector{{Key: model.LabelDiscovered, Operator: labels.Equals, Values: []string{"true"}}}

// Pass considers every discovered Hardware of namespace ns (all when
// empty), in the store's order, and enrols those that are due; with
// dryRun it only says what it would do. A failure on one Hardware is in
// its Result and does not stop the pass; the error is for the pass as a
// whole (the store could not list).
func (e *Enroller) Pass(ctx context.Context, ns string, dryRun bool) ([]Result, error) {
	book, err := e.book(ctx, ns)
	if err != nil {
		return nil, err
	}
	objs, _, err := e.cfg.Store.List(ctx, model.KindHardware, store.ListOptions{Namespace: ns, Labels: discovered})
	if err != nil {
		return nil, fmt.Errorf("list discovered hardware: %w", err)
	}
	out := make([]Result, 0, len(objs))
	for _, o := range objs {
		if hw, ok := o.(*model.Hardware); ok {
			out = append(out, e.one(ctx, book, hw, dryRun))
		}
	}
	return out, nil
}

// One enrols hw if it is due, with the rule sets of its namespace as
// stored now: what the controller does when a Hardware changes.
func (e *Enroller) One(ctx context.Context, hw *model.Hardware) (Result, error) {
	book, err := e.book(ctx, hw.Namespace)
	if err != nil {
		return Result{}, err
	}
	return e.one(ctx, book, hw, false), nil
}

func (e *Enroller) book(ctx context.Context, ns string) (*Book, error) {
	objs, _, err := e.cfg.Store.List(ctx, model.KindWorkflowRuleSet, store.ListOptions{Namespace: ns})
	if err != nil {
		return nil, fmt.Errorf("list workflow rule sets: %w", err)
	}
	sets := make([]*model.WorkflowRuleSet, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*model.WorkflowRuleSet); ok {
			sets = append(sets, s)
		}
	}
	return NewBook(sets), nil
}

// WorkflowName is the name of hw's enrolment Workflow: "enroll-<name>",
// or, when that is longer than a name may be, a prefix of it and a hash
// of the whole, so two machines never share one.
func WorkflowName(hw *model.Hardware) string {
	return derivedName("enroll-", hw)
}

// CommissionWorkflowName is the name of hw's commissioning Workflow:
// "commission-<name>", shortened as WorkflowName is.
func CommissionWorkflowName(hw *model.Hardware) string {
	return derivedName("commission-", hw)
}

// derivedName is prefix+hw.Name, or, when that is longer than a name may
// be, a prefix of it and a hash of the whole, so two machines never share
// one.
func derivedName(prefix string, hw *model.Hardware) string {
	const maxName = 253
	n := prefix + hw.Name
	if len(n) <= maxName {
		return n
	}
	sum := sha256.Sum256([]byte(hw.Name))
	h := hex.EncodeToString(sum[:])[:16]
	head := n[:maxName-len(h)-1]
	for head[len(head)-1] == '-' || head[len(head)-1] == '.' {
		head = head[:len(head)-1]
	}
	return head + "-" + h
}

func (e *Enroller) one(ctx context.Context, book *Book, hw *model.Hardware, dryRun bool) Result {
	r := Result{Hardware: hw, Workflow: WorkflowName(hw)}
	var err error
	if r.Decision, err = book.Decide(hw); err != nil {
		r.Outcome, r.Message = Failed, err.Error()
		return r
	}
	if by, ok := hw.Annotations[model.AnnotationEnrolledBy]; ok {
		r.Outcome, r.Message = AlreadyEnrolled, "enrolled by "+by
		return r
	}
	if hw.Status.Attributes == nil {
		r.Outcome, r.Message = NoAttributes, "its agent has not reported an inventory (status.attributes) yet"
		return r
	}
	if hw.CommissioningFailed() {
		r.Outcome = CommissioningFailed
		r.Message = fmt.Sprintf("it failed commissioning (%s=%s): no rule enrols it until the label is removed", model.LabelCommissioning, model.CommissioningFailed)
		return r
	}
	wfs, err := e.cfg.Store.ByIndex(ctx, model.KindWorkflow, store.IndexHardwareRef, hw.Name)
	if err != nil {
		r.Outcome, r.Message = Failed, fmt.Sprintf("find workflows of hardware %s: %v", hw.Key(), err)
		return r
	}
	commissioned := hw.Labels[model.LabelCommissioning] == model.CommissioningPassed
	if e.cfg.CommissionTemplate != "" && !commissioned {
		return e.commission(ctx, hw, wfs, r, dryRun)
	}
	for _, o := range wfs {
		wf, ok := o.(*model.Workflow)
		if !ok || wf.Namespace != hw.Namespace {
			continue
		}
		if commissioned && wf.Name == CommissionWorkflowName(hw) {
			continue // it passed: what it leaves is no work of the machine's
		}
		if by := wf.Annotations[model.AnnotationEnrolledBy]; by != "" && wf.Name == r.Workflow && !dryRun {
			// A pass made it and stopped before marking the Hardware
			// (a restart): finish that pass.
			e.markHardware(ctx, hw, by, wf.Name)
			r.Outcome, r.Message = AlreadyEnrolled, "enrolled by "+by
			return r
		}
		r.Outcome, r.Workflow, r.Message = HasWorkflow, wf.Name, "workflow "+wf.Name+" targets it"
		return r
	}
	if r.Decision.Match == nil {
		r.Outcome = NoMatch
		r.Message = fmt.Sprintf("no rule of the %d workflow rule set(s) of namespace %s matches it", book.Len(hw.Namespace), hw.Namespace)
		return r
	}
	rule := *r.Decision.Match
	if dryRun {
		r.Outcome = WouldEnrol
		r.Message = fmt.Sprintf("%s would create workflow %s from template %s", rule, r.Workflow, rule.Set.Spec.Workflow.Template.Ref)
		return r
	}
	if err := e.create(ctx, hw, rule, r.Workflow); errors.Is(err, errRaced) {
		r.Outcome, r.Message = AlreadyEnrolled, err.Error()
		return r
	} else if err != nil {
		enrolments.WithLabelValues(Failed).Inc()
		r.Outcome, r.Message = Failed, err.Error()
		e.log.Warn("enrolment failed", "hardware", hw.Key(), "rule", rule.String(), "err", err)
		return r
	}
	enrolments.WithLabelValues(Enrolled).Inc()
	r.Outcome = Enrolled
	r.Message = fmt.Sprintf("%s created workflow %s from template %s", rule, r.Workflow, rule.Set.Spec.Workflow.Template.Ref)
	return r
}

// errRaced: another pass created the machine's enrolment Workflow first.
var errRaced = errors.New("another enrolment pass made its workflow")

// NewWorkflow is the Workflow rule makes for hw, named name.
func NewWorkflow(hw *model.Hardware, rule Rule, name string) (*model.Workflow, error) {
	macs := hw.MACs()
	if len(macs) == 0 {
		return nil, fmt.Errorf("hardware %s has no interface with a MAC: a workflow's worker is the machine's first MAC", hw.Key())
	}
	tc := rule.Set.Spec.Workflow.Template
	hm := make(map[string]string, len(tc.KVs)+1)
	maps.Copy(hm, tc.KVs)
	hm[rule.Set.AgentKey()] = macs[0].String()
	wf := &model.Workflow{
		TypeMeta: model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindWorkflow},
		ObjectMeta: model.ObjectMeta{Namespace: hw.Namespace, Name: name,
			Annotations: map[string]string{model.AnnotationEnrolledBy: rule.String()}},
		Spec: model.WorkflowSpec{
			TemplateRef: tc.Ref,
			HardwareRef: hw.Name,
			HardwareMap: hm,
			// The machine waits in the boot environment or is off: the
			// engine allows it to netboot when the workflow starts.
			BootOptions: &model.BootOptions{ToggleAllowNetboot: true, BootMode: "netboot"},
		},
	}
	if d := rule.Set.Spec.Workflow.Disabled; d != nil && *d {
		wf.Spec.Disabled = model.Bool(true)
	}
	if rule.Set.Spec.Workflow.AddAttributes && hw.Status.Attributes != nil {
		raw, err := json.Marshal(hw.Status.Attributes)
		if err != nil {
			return nil, fmt.Errorf("hardware %s: encode attributes: %w", hw.Key(), err)
		}
		wf.Annotations[model.AgentAttributesAnnotation] = string(raw)
	}
	if err := model.Validate(wf); err != nil {
		return nil, fmt.Errorf("workflow %s/%s is invalid: %w", hw.Namespace, name, err)
	}
	return wf, nil
}

func (e *Enroller) create(ctx context.Context, hw *model.Hardware, rule Rule, name string) error {
	tpl := rule.Set.Spec.Workflow.Template.Ref
	if _, err := e.cfg.Store.Get(ctx, model.KindTemplate, hw.Namespace, tpl); errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%s names template %s/%s, which does not exist (anvil get templates -n %s lists them)", rule, hw.Namespace, tpl, hw.Namespace)
	} else if err != nil {
		return fmt.Errorf("get template %s/%s: %w", hw.Namespace, tpl, err)
	}
	wf, err := NewWorkflow(hw, rule, name)
	if err != nil {
		return err
	}
	// A workflow that cannot render would sit FAILED on the machine and
	// keep rules away from it; refuse it now, so that fixing the
	// Hardware (its disks) or the Template enrols it on the next pass.
	if _, err := workflow.RenderStored(ctx, e.cfg.Store, wf); err != nil {
		return fmt.Errorf("%s: workflow %s/%s would not render, so it is not created: %w", rule, hw.Namespace, name, err)
	}
	if _, err := e.cfg.Store.Create(ctx, wf); errors.Is(err, store.ErrAlreadyExists) {
		// Another pass won the race (and marks the Hardware), or a
		// workflow of that name was made by hand: this pass makes none.
		o, gerr := e.cfg.Store.Get(ctx, model.KindWorkflow, hw.Namespace, name)
		if gerr == nil {
			if by := o.GetObjectMeta().Annotations[model.AnnotationEnrolledBy]; by != "" {
				return fmt.Errorf("%w: enrolled by %s", errRaced, by)
			}
		}
		return fmt.Errorf("workflow %s/%s already exists and no rule made it: not enrolled (delete or rename it)", hw.Namespace, name)
	} else if err != nil {
		return fmt.Errorf("create workflow %s/%s: %w", hw.Namespace, name, err)
	}
	e.log.Info("enrolled", "hardware", hw.Key(), "rule", rule.String(), "workflow", name, "template", tpl)
	e.cfg.Events.Record(machinelog.Event{Service: machinelog.ServiceEnroll, MAC: hw.MACs()[0], Outcome: Enrolled,
		Message: fmt.Sprintf("enrolled by %s: workflow %s from template %s", rule, name, tpl)})
	e.markHardware(ctx, hw, rule.String(), name)
	return nil
}

// markHardware records on hw which rule enrolled it, re-reading it on a
// conflict. A failure is logged, not returned: the Workflow exists, and
// the next pass finds it (and tries the mark again).
func (e *Enroller) markHardware(ctx context.Context, hw *model.Hardware, by, workflow string) {
	const attempts = 5
	for range attempts {
		cur := model.DeepCopy(hw)
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[model.AnnotationEnrolledBy] = by
		_, err := e.cfg.Store.Update(ctx, cur)
		if err == nil {
			return
		}
		if !errors.Is(err, store.ErrConflict) {
			e.log.Warn("enrolled hardware not marked", "hardware", hw.Key(), "workflow", workflow, "err", err)
			return
		}
		o, err := e.cfg.Store.Get(ctx, model.KindHardware, hw.Namespace, hw.Name)
		if err != nil {
			e.log.Warn("enrolled hardware not marked", "hardware", hw.Key(), "workflow", workflow, "err", err)
			return
		}
		hw = o.(*model.Hardware)
		if hw.Annotations[model.AnnotationEnrolledBy] != "" {
			return
		}
	}
	e.log.Warn("enrolled hardware not marked: it kept changing", "hardware", hw.Key(), "workflow", workflow)
}
