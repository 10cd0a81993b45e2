// Package enroll owns auto-enrolment: which WorkflowRuleSet rule a
// discovered Hardware matches (Book.Decide, a pure function), and creating
// the Workflow that rule names, once per machine (Enroller.Pass, and
// Controller, which runs passes as Hardware and rule sets change).
//
// It reads and writes the store only through store.Store, and creates
// Workflows as any client would, after checking with the workflow
// package's public RenderStored that they render; the engine runs them. It does not
// discover machines (the discovery boot labels their Hardware
// model.LabelDiscovered) and does not touch the engine's internals.
package enroll

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/anvilproj/anvil/internal/labels"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/rulepattern"
)

// Rule identifies one rule of a rule set: Index is its place in
// spec.rules, or -1 when the rule set has no rules and its selector alone
// matched.
type Rule struct {
	Set   *model.WorkflowRuleSet
	Index int
}

// String is the rule as AnnotationEnrolledBy records it:
// "namespace/name#rules[i]" or "namespace/name#selector".
func (r Rule) String() string {
	if r.Index < 0 {
		return r.Set.Key() + "#selector"
	}
	return fmt.Sprintf("%s#rules[%d]", r.Set.Key(), r.Index)
}

// Decision is what the rules say of one Hardware.
type Decision struct {
	// Match is the rule that wins, nil when none matches.
	Match *Rule
	// Also are the other rules that matched, in order: the winner's
	// set's later rules, then other sets'. Only Match acts.
	Also []Rule
	// Broken names the rule sets of the Hardware's namespace that were
	// skipped because they do not compile (stored by a tool that did not
	// validate them), with why.
	Broken []string
}

// compiled is one rule set, parsed.
type compiled struct {
	set      *model.WorkflowRuleSet
	rules    []*rulepattern.Pattern
	selector []labels.Selector
	err      error
}

// Book is a set of WorkflowRuleSets in evaluation order, compiled once.
// It is immutable and safe for concurrent use.
type Book struct {
	byNS map[string][]compiled
}

// NewBook compiles sets and orders them per namespace: highest
// spec.priority first, then by name. Within a set, rules go in their
// order; the first matching rule of the first matching set wins.
func NewBook(sets []*model.WorkflowRuleSet) *Book {
	b := &Book{byNS: map[string][]compiled{}}
	for _, s := range sets {
		c := compiled{set: s}
		c.rules, c.err = s.CompiledRules()
		if c.err == nil {
			c.selector, c.err = s.SelectorTerms()
		}
		b.byNS[s.Namespace] = append(b.byNS[s.Namespace], c)
	}
	for _, cs := range b.byNS {
		slices.SortFunc(cs, func(a, b compiled) int {
			if c := cmp.Compare(b.set.Spec.Priority, a.set.Spec.Priority); c != 0 {
				return c
			}
			return cmp.Compare(a.set.Name, b.set.Name)
		})
	}
	return b
}

// Len returns how many rule sets the book has in namespace ns.
func (b *Book) Len(ns string) int { return len(b.byNS[ns]) }

// Decide returns which rule of the book hw matches: only the rule sets of
// hw's namespace apply (the Workflow is made there, with its Template).
// A rule set matches when its selector (if any) matches hw's labels and
// one of its rules matches hw's status.attributes; a rule set without
// rules matches on its selector alone. Without attributes no pattern
// matches (and Pass enrols no Hardware without them).
func (b *Book) Decide(hw *model.Hardware) (Decision, error) {
	var d Decision
	var doc any
	if hw.Status.Attributes != nil {
		raw, err := json.Marshal(hw.Status.Attributes)
		if err != nil {
			return d, fmt.Errorf("hardware %s: encode attributes: %w", hw.Key(), err)
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			return d, fmt.Errorf("hardware %s: decode attributes: %w", hw.Key(), err)
		}
	}
	for _, c := range b.byNS[hw.Namespace] {
		if c.err != nil {
			d.Broken = append(d.Broken, fmt.Sprintf("%s: %v", c.set.Key(), c.err))
			continue
		}
		if len(c.selector) > 0 && !slices.ContainsFunc(c.selector, func(s labels.Selector) bool { return s.Matches(hw.Labels) }) {
			continue
		}
		if len(c.rules) == 0 {
			d.add(Rule{Set: c.set, Index: -1})
			continue
		}
		if doc == nil {
			continue
		}
		for i, p := range c.rules {
			if p.Match(doc) {
				d.add(Rule{Set: c.set, Index: i})
			}
		}
	}
	return d, nil
}

func (d *Decision) add(r Rule) {
	if d.Match == nil {
		d.Match = &r
		return
	}
	d.Also = append(d.Also, r)
}
