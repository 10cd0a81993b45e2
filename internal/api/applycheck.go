package api

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/anvilproj/anvil/internal/actions"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/oci"
	"github.com/anvilproj/anvil/internal/workflow"
)

// ImageChecker tells whether an image can be pulled the way Source says
// (a mirror, plain HTTP, a CA, credentials). *oci.Checker implements it.
type ImageChecker interface {
	Check(ctx context.Context, src oci.Source) error
}

// maxImageChecks bounds the registries asked at once for one apply.
const maxImageChecks = 4

// nativeCatalog answers which images the agent runs natively. Its
// configuration does not matter: only Lookup is asked.
var nativeCatalog = sync.OnceValue(func() *actions.Catalog { return actions.New(actions.Config{}) })

// applyWarnings returns what in docs applies but can only fail later, one
// message each: an action image that is neither native nor reachable
// under the server's registry settings, and a Workflow whose boot mode
// needs a BMC its Hardware lacks. get reads objects not in docs (a
// Workflow's Hardware applied earlier); its errors only skip a check.
func (s *Services) applyWarnings(ctx context.Context, docs []model.Document) []string {
	var warns []string
	warns = append(warns, s.imageWarnings(ctx, docs)...)
	warns = append(warns, s.bmcWarnings(ctx, docs)...)
	return warns
}

// imageUse is one action naming an image.
type imageUse struct {
	template string
	action   workflow.StaticAction
}

// imageWarnings checks every written-out image of every Template in docs
// once: a native image needs nothing (unless the action asks for a
// container); any other is looked up with a manifest HEAD through the
// server's mirrors, CAs and credentials (a Hardware's own
// anvil.dev/registries is not considered: a Template serves many
// machines). Without an ImageChecker, only the native/runtime rule is
// checked.
func (s *Services) imageWarnings(ctx context.Context, docs []model.Document) []string {
	var uses []imageUse
	for i := range docs {
		t, ok := docs[i].Object.(*model.Template)
		if !ok || t.Spec.Data == nil {
			continue
		}
		for _, a := range workflow.TemplateActions(*t.Spec.Data) {
			uses = append(uses, imageUse{template: t.Name, action: a})
		}
	}
	var warns []string
	type check struct {
		image string
		src   oci.Source
		err   error
	}
	checks := map[string]*check{}
	// pulled are the images each use pulls: its own, or waitdaemon's IMAGE.
	pulled := make([][]string, len(uses))
	for i, u := range uses {
		if u.action.Runtime != "" && u.action.Runtime != model.RuntimeNative && u.action.Runtime != model.RuntimeContainer {
			warns = append(warns, fmt.Sprintf("template %q action %q: runtime %q: want %s, %s or nothing (a workflow of this template fails when it is rendered)",
				u.template, u.action.Name, u.action.Runtime, model.RuntimeContainer, model.RuntimeNative))
			continue
		}
		// The server's --action-runtime is the runtime of an action that
		// names none.
		runtime := cmp.Or(u.action.Runtime, s.cfg.ActionRuntime)
		for _, image := range actions.NamedImages(u.action.Image, u.action.Environment) {
			path, err := nativeCatalog().PathOf(image, runtime)
			switch {
			case err != nil:
				warns = append(warns, fmt.Sprintf("template %q action %q: image %q has no native action, and runtime: native forbids a container",
					u.template, u.action.Name, image))
				continue
			case path == actions.PathNative:
				continue
			}
			pulled[i] = append(pulled[i], image)
			if _, ok := checks[image]; !ok {
				c := &check{image: image}
				c.src, c.err = s.cfg.Registries.Resolve(image)
				checks[image] = c
			}
		}
	}
	if s.cfg.ImageChecker != nil {
		sem := make(chan struct{}, maxImageChecks)
		var wg sync.WaitGroup
		for _, c := range checks {
			if c.err != nil {
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				c.err = s.cfg.ImageChecker.Check(ctx, c.src)
			}()
		}
		wg.Wait()
	}
	for i, u := range uses {
		for _, image := range pulled[i] {
			c := checks[image]
			if c.err == nil {
				continue
			}
			what, which := "is not native", "image"
			switch {
			case u.action.Runtime == model.RuntimeContainer:
				what = "runs in a container (runtime: container)"
			case u.action.Runtime == "" && s.cfg.ActionRuntime == model.RuntimeContainer:
				what = "runs in a container (the server's --action-runtime container)"
			}
			if image != u.action.Image {
				which = "waitdaemon's IMAGE"
			}
			via := "from " + registryOf(c.src)
			if c.src.Mirror != "" {
				via = "via mirror " + c.src.Mirror
			}
			warns = append(warns, fmt.Sprintf("template %q action %q: %s %q %s and could not be resolved %s: %v",
				u.template, u.action.Name, which, image, what, via, c.err))
		}
	}
	return warns
}

// registryOf names the registry src is pulled from, for messages.
func registryOf(src oci.Source) string {
	if src.Ref == "" {
		return "its registry"
	}
	host, _, _ := strings.Cut(src.Ref, "/")
	return host
}

// bootModesNeedingBMC are Workflow boot modes in which the machine is
// booted through its BMC other than by a network boot: from virtual media
// (isoboot; "iso" is v1alpha1's older spelling) or by custom BMC
// operations.
var bootModesNeedingBMC = []string{"isoboot", "iso", "customboot"}

// isISOBoot reports whether a Workflow's boot mode boots virtual media.
var isISOBoot = workflow.IsISOBoot

// workflowHardware returns the Hardware of each Workflow in docs that has
// boot options, from docs or else the store (nil when neither has it:
// CheckReferences refused it; or when it cannot be read: nothing to say).
func (s *Services) workflowHardware(ctx context.Context, docs []model.Document) map[*model.Workflow]*model.Hardware {
	inFile := map[string]*model.Hardware{}
	for i := range docs {
		if h, ok := docs[i].Object.(*model.Hardware); ok {
			inFile[h.Key()] = h
		}
	}
	out := map[*model.Workflow]*model.Hardware{}
	for i := range docs {
		w, ok := docs[i].Object.(*model.Workflow)
		if !ok || w.Spec.BootOptions == nil || w.Spec.HardwareRef == "" {
			continue
		}
		h := inFile[w.Namespace+"/"+w.Spec.HardwareRef]
		if h == nil {
			obj, err := s.cfg.Store.Get(ctx, model.KindHardware, w.Namespace, w.Spec.HardwareRef)
			if err != nil {
				continue
			}
			h = obj.(*model.Hardware)
		}
		out[w] = h
	}
	return out
}

func hasBMC(h *model.Hardware) bool { return h.Spec.BMCRef != nil && h.Spec.BMCRef.Name != "" }

// checkISOBoot refuses a Workflow booting from virtual media (isoboot)
// that cannot: its Hardware has no BMC, its BMC's Machine is unknown or
// its provider has no virtual media (only Redfish has), or it names no
// isoURL while this server serves no boot ISO (Config.BootISO).
// Accepted, such a workflow would wait for a boot that never comes.
func (s *Services) checkISOBoot(ctx context.Context, docs []model.Document) error {
	hws := s.workflowHardware(ctx, docs)
	machines := map[string]*model.Machine{}
	for i := range docs {
		if m, ok := docs[i].Object.(*model.Machine); ok {
			machines[m.Key()] = m
		}
	}
	var errs model.ErrorList
	for i := range docs {
		d := &docs[i]
		w, ok := d.Object.(*model.Workflow)
		if !ok || !isISOBoot(w.Spec.BootOptions) {
			continue
		}
		var missing []string
		if h := hws[w]; h != nil && !hasBMC(h) {
			missing = append(missing, fmt.Sprintf("hardware %q has no spec.bmcRef", h.Name))
		} else if h != nil {
			key := h.Namespace + "/" + h.Spec.BMCRef.Name
			m := machines[key]
			if m == nil {
				if obj, err := s.cfg.Store.Get(ctx, model.KindMachine, h.Namespace, h.Spec.BMCRef.Name); err == nil {
					m = obj.(*model.Machine)
				}
			}
			switch p := model.PreferredProvider(m); {
			case m == nil:
				missing = append(missing, fmt.Sprintf("machine %q (hardware %q's spec.bmcRef) does not exist", h.Spec.BMCRef.Name, h.Name))
			case p != model.ProviderRedfish:
				missing = append(missing, fmt.Sprintf("machine %q is driven by %s, which has no virtual media (put redfish first in its spec.connection.providerOptions.preferredOrder)", m.Name, p))
			}
		}
		if w.Spec.BootOptions.ISOURL == "" && !s.cfg.BootISO {
			missing = append(missing, "spec.bootOptions.isoURL is empty and this server serves no boot ISO of its own")
		}
		if len(missing) == 0 {
			continue
		}
		errs = append(errs, &model.FieldError{Source: d.Source, Line: d.FieldLine("spec.bootOptions.bootMode"), Doc: d.Describe(),
			Path: "spec.bootOptions.bootMode",
			Msg: fmt.Sprintf("%q boots the machine from virtual media through its BMC, and %s; use bootMode netboot (the BMC powers the machine on to a one-time PXE boot)",
				w.Spec.BootOptions.BootMode, strings.Join(missing, ", and "))})
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// bmcWarnings names each Workflow in docs whose boot options need a BMC
// (customboot, or an isoURL; isoboot is refused by checkISOBoot) while its
// Hardware has no spec.bmcRef.
func (s *Services) bmcWarnings(ctx context.Context, docs []model.Document) []string {
	var warns []string
	hws := s.workflowHardware(ctx, docs)
	for i := range docs {
		w, ok := docs[i].Object.(*model.Workflow)
		if !ok || hws[w] == nil || isISOBoot(w.Spec.BootOptions) {
			continue
		}
		b := w.Spec.BootOptions
		why := ""
		switch {
		case slices.Contains(bootModesNeedingBMC, b.BootMode):
			why = fmt.Sprintf("spec.bootOptions.bootMode %q", b.BootMode)
		case b.ISOURL != "":
			why = "spec.bootOptions.isoURL"
		default:
			continue
		}
		if h := hws[w]; !hasBMC(h) {
			warns = append(warns, fmt.Sprintf("workflow %q: %s needs a BMC to boot the machine, and hardware %q has no spec.bmcRef: the workflow waits until the machine is booted another way",
				w.Name, why, h.Name))
		}
	}
	return warns
}
