package bootpolicy

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/anvilproj/anvil/internal/labels"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/tmplbudget"
)

// Errors of boot profile selection, wrapped by SelectProfile's and
// ProfileFor's errors (which name the Hardware and the profiles).
var (
	// ErrNoProfile: no boot profile applies — no Hardware has the MAC, no
	// selector matches, or spec.bootProfileRef names a profile that does
	// not exist.
	ErrNoProfile = errors.New("no boot profile applies")
	// ErrProfileConflict: several profiles' selectors match the Hardware
	// and no single one has the highest priority. Anvil never picks one.
	ErrProfileConflict = errors.New("boot profiles conflict")
)

// Selection is the boot profile chosen for a Hardware, and why.
type Selection struct {
	Profile *model.BootProfile
	// By says why: "spec.bootProfileRef", or the selector term that
	// matched the Hardware's labels ("role=worker").
	By string
}

// reason is the Selection's part of a script reason: "boot profile
// flatcar-worker (selected by role=worker)".
func (s *Selection) reason() string {
	if s.By == byRef {
		return fmt.Sprintf("boot profile %s (named by spec.bootProfileRef)", s.Profile.Name)
	}
	return fmt.Sprintf("boot profile %s (selected by %s)", s.Profile.Name, s.By)
}

const byRef = "spec.bootProfileRef"

// compiledProfile is a profile with its selector terms parsed and its
// kernel arguments' templates ready, so that a script request neither
// parses nor allocates them.
type compiledProfile struct {
	p     *model.BootProfile
	terms []labels.Selector // nil entries: terms that do not parse, never matched
	args  []*tmplbudget.Template
	err   error // why the kernel arguments cannot be rendered, if they cannot
}

// kernelArgBudget bounds one kernel argument's rendering: the default
// time, steps and depth, and 4 KiB of output, twice the whole kernel
// command line x86 Linux accepts (2048 bytes).
var kernelArgBudget = tmplbudget.Budget{Output: 4 << 10}

func compileProfile(p *model.BootProfile) *compiledProfile {
	c := &compiledProfile{p: p}
	for _, t := range p.Spec.Selector {
		s, err := labels.Parse(t)
		if err != nil || strings.TrimSpace(t) == "" {
			s = nil // validation refuses these; a term that slipped past matches nothing
		}
		c.terms = append(c.terms, s)
	}
	for i, a := range p.Spec.KernelArgs {
		t, err := tmplbudget.Parse(fmt.Sprintf("spec.kernelArgs[%d]", i), a, tmplbudget.Options{Budget: kernelArgBudget})
		if err != nil {
			c.err = fmt.Errorf("spec.kernelArgs[%d]: %w", i, err)
			break
		}
		c.args = append(c.args, t)
	}
	return c
}

// match returns the first selector term of c that matches l, or "".
func (c *compiledProfile) match(l map[string]string) string {
	for i, s := range c.terms {
		if s != nil && s.Matches(l) {
			return c.p.Spec.Selector[i]
		}
	}
	return ""
}

// SelectProfile decides which boot profile hw boots, from profiles (any
// namespace; only those in hw's count). The rules, in order:
//
//  1. active non-nil (hw has a workflow to run): no profile — a workflow
//     always wins.
//  2. hw.Spec.BootProfileRef set: that profile; an error wrapping
//     ErrNoProfile when it does not exist. Selectors are not consulted.
//  3. profiles whose selector matches hw's labels (any term; every
//     requirement of a term): one is chosen; of several, the one with the
//     highest spec.priority; several sharing the highest priority are an
//     error wrapping ErrProfileConflict that names them.
//  4. none matches: no profile (nil, nil).
//
// It is a pure function: the caller supplies the profiles.
func SelectProfile(hw *model.Hardware, active *model.Workflow, profiles []*model.BootProfile) (*Selection, error) {
	if active != nil {
		return nil, nil
	}
	cs := make([]*compiledProfile, 0, len(profiles))
	for _, p := range profiles {
		if p.Namespace == hw.Namespace {
			cs = append(cs, compileProfile(p))
		}
	}
	sel, _, err := selectCompiled(hw, cs)
	return sel, err
}

// selectCompiled is SelectProfile's rules 2–4 over profiles of hw's
// namespace, returning the compiled profile too.
func selectCompiled(hw *model.Hardware, profiles []*compiledProfile) (*Selection, *compiledProfile, error) {
	if ref := hw.Spec.BootProfileRef; ref != nil && ref.Name != "" {
		for _, c := range profiles {
			if c.p.Name == ref.Name && c.p.Namespace == hw.Namespace {
				return &Selection{Profile: c.p, By: byRef}, c, nil
			}
		}
		return nil, nil, fmt.Errorf("%w: hardware %s: spec.bootProfileRef names BootProfile %s/%s, which does not exist",
			ErrNoProfile, hw.Key(), hw.Namespace, ref.Name)
	}
	type hit struct {
		c  *compiledProfile
		by string
	}
	var hits []hit
	for _, c := range profiles {
		if c.p.Namespace != hw.Namespace {
			continue
		}
		if by := c.match(hw.Labels); by != "" {
			hits = append(hits, hit{c, by})
		}
	}
	if len(hits) == 0 {
		return nil, nil, nil
	}
	// Highest priority first, then by name, so that the error is stable.
	slices.SortFunc(hits, func(a, b hit) int {
		if c := cmp.Compare(b.c.p.Spec.Priority, a.c.p.Spec.Priority); c != 0 {
			return c
		}
		return cmp.Compare(a.c.p.Name, b.c.p.Name)
	})
	top := hits[0]
	tied := 1
	for tied < len(hits) && hits[tied].c.p.Spec.Priority == top.c.p.Spec.Priority {
		tied++
	}
	if tied > 1 {
		names := make([]string, tied)
		for i, h := range hits[:tied] {
			names[i] = fmt.Sprintf("%s (by %s)", h.c.p.Name, h.by)
		}
		return nil, nil, fmt.Errorf("%w: hardware %s matches boot profiles %s, all with priority %d: give one a higher spec.priority, narrow their selectors, or set the Hardware's spec.bootProfileRef",
			ErrProfileConflict, hw.Key(), strings.Join(names, ", "), top.c.p.Spec.Priority)
	}
	return &Selection{Profile: top.c.p, By: top.by}, top.c, nil
}
