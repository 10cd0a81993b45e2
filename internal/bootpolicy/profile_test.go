package bootpolicy

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/httpboot"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// profile returns a BootProfile "ns/name" with a kernel, the selector
// terms and the priority.
func profile(ns, name string, priority int64, selector ...string) *model.BootProfile {
	return &model.BootProfile{ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name},
		Spec: model.BootProfileSpec{Kernel: "/assets/" + name + "/vmlinuz", Selector: selector, Priority: priority}}
}

// labelled returns Hardware "ns/name" with the labels (k, v pairs).
func labelled(ns, name string, kv ...string) *model.Hardware {
	h := hw(name, nic(mac1, "10.0.0.11", bp(true)))
	h.Namespace = ns
	if len(kv) > 0 {
		h.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Labels[kv[i]] = kv[i+1]
		}
	}
	return h
}

func refTo(h *model.Hardware, name string) *model.Hardware {
	h.Spec.BootProfileRef = &model.LocalObjectReference{Name: name}
	return h
}

func TestSelectProfile(t *testing.T) {
	worker := profile("default", "worker", 0, "role=worker")
	gpu := profile("default", "gpu", 0, "role in (gpu,storage),site=lab", "gpu=true")
	anyLab := profile("default", "lab", 0, "site=lab")
	labHigh := profile("default", "lab-high", 5, "site=lab")
	labHigh2 := profile("default", "lab-high-2", 5, "site in (lab,dc)")
	otherNS := profile("other", "worker-elsewhere", 100, "role=worker")
	active := wf("default", "w", "m1", model.StatePending)

	tests := []struct {
		name     string
		hw       *model.Hardware
		active   *model.Workflow
		profiles []*model.BootProfile
		want     string // profile name, "" for none
		wantBy   string
		wantErr  error    // errors.Is target
		errHas   []string // substrings of the error
	}{
		{name: "equality", hw: labelled("default", "m1", "role", "worker"), profiles: []*model.BootProfile{worker, gpu},
			want: "worker", wantBy: "role=worker"},
		{name: "in, and within a term", hw: labelled("default", "m1", "role", "storage", "site", "lab"), profiles: []*model.BootProfile{worker, gpu},
			want: "gpu", wantBy: "role in (gpu,storage),site=lab"},
		{name: "in, but a requirement of the term fails", hw: labelled("default", "m1", "role", "storage", "site", "dc"),
			profiles: []*model.BootProfile{worker, gpu}},
		{name: "OR across terms: the second matches", hw: labelled("default", "m1", "gpu", "true"), profiles: []*model.BootProfile{worker, gpu},
			want: "gpu", wantBy: "gpu=true"},
		{name: "no labels", hw: labelled("default", "m1"), profiles: []*model.BootProfile{worker, gpu, anyLab}},
		{name: "no profiles", hw: labelled("default", "m1", "role", "worker")},
		{name: "ref wins over selectors", hw: refTo(labelled("default", "m1", "role", "worker"), "gpu"),
			profiles: []*model.BootProfile{worker, gpu}, want: "gpu", wantBy: "spec.bootProfileRef"},
		{name: "ref wins over a conflict", hw: refTo(labelled("default", "m1", "role", "worker", "site", "lab"), "lab"),
			profiles: []*model.BootProfile{worker, anyLab}, want: "lab", wantBy: "spec.bootProfileRef"},
		{name: "ref to a missing profile", hw: refTo(labelled("default", "m1", "role", "worker"), "nope"),
			profiles: []*model.BootProfile{worker}, wantErr: ErrNoProfile, errHas: []string{"hardware default/m1", "BootProfile default/nope", "does not exist"}},
		{name: "ref to a profile of another namespace", hw: refTo(labelled("default", "m1"), "worker-elsewhere"),
			profiles: []*model.BootProfile{otherNS}, wantErr: ErrNoProfile},
		{name: "conflict without priority", hw: labelled("default", "m1", "role", "worker", "site", "lab"),
			profiles: []*model.BootProfile{worker, anyLab}, wantErr: ErrProfileConflict,
			errHas: []string{"hardware default/m1", "lab (by site=lab)", "worker (by role=worker)", "priority 0"}},
		{name: "priority resolves a conflict", hw: labelled("default", "m1", "role", "worker", "site", "lab"),
			profiles: []*model.BootProfile{worker, anyLab, labHigh}, want: "lab-high", wantBy: "site=lab"},
		{name: "conflict at the highest priority", hw: labelled("default", "m1", "site", "lab"),
			profiles: []*model.BootProfile{anyLab, labHigh, labHigh2}, wantErr: ErrProfileConflict,
			errHas: []string{"lab-high (by site=lab)", "lab-high-2 (by site in (lab,dc))", "priority 5"}},
		{name: "other namespaces ignored", hw: labelled("default", "m1", "role", "worker"),
			profiles: []*model.BootProfile{otherNS}},
		{name: "other namespaces ignored in a conflict", hw: labelled("default", "m1", "role", "worker"),
			profiles: []*model.BootProfile{otherNS, worker}, want: "worker", wantBy: "role=worker"},
		{name: "workflow wins over a selector", hw: labelled("default", "m1", "role", "worker"), active: active,
			profiles: []*model.BootProfile{worker}},
		{name: "workflow wins over a ref", hw: refTo(labelled("default", "m1"), "worker"), active: active,
			profiles: []*model.BootProfile{worker}},
		{name: "workflow wins over a conflict", hw: labelled("default", "m1", "role", "worker", "site", "lab"), active: active,
			profiles: []*model.BootProfile{worker, anyLab}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := SelectProfile(tc.hw, tc.active, tc.profiles)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || sel != nil {
					t.Fatalf("SelectProfile = %+v, %v; want an error wrapping %v", sel, err, tc.wantErr)
				}
				for _, s := range tc.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("SelectProfile: %v", err)
			}
			got, by := "", ""
			if sel != nil {
				got, by = sel.Profile.Name, sel.By
			}
			if got != tc.want || by != tc.wantBy {
				t.Errorf("SelectProfile = %q by %q; want %q by %q", got, by, tc.want, tc.wantBy)
			}
		})
	}
}

// flatcar is the example profile.
func flatcar() *model.BootProfile {
	p := profile("default", "flatcar-worker", 0, "role=worker")
	p.Spec.Initrds = []string{"/assets/flatcar/initrd.cpio.gz", "https://cdn.example.com/sysext.cpio"}
	p.Spec.KernelArgs = []string{"flatcar.first_boot=1", `ignition.config.url={{ .ConfigURL "ignition" }}`,
		"hostname={{ .Hostname }}", "ip={{ .IP }}", "site={{ .Labels.role }}", `{{ if index .Labels "debug" }}debug{{ end }}`, "server={{ .ServerURL }}"}
	p.Spec.Configs = map[string]model.BootConfig{"ignition": {Format: model.ConfigButane, Template: "variant: flatcar\n"}}
	return p
}

func TestScriptBootProfile(t *testing.T) {
	worker := func() *model.Hardware {
		h := labelled("default", "m1", "role", "worker")
		h.Spec.Interfaces[0].DHCP.Hostname = "node1"
		return h
	}
	broken := flatcar()
	broken.Name = "broken"
	broken.Spec.Selector = []string{"role=broken"}
	broken.Spec.KernelArgs = []string{"x={{ .Labels.missing }}"}
	spaced := flatcar()
	spaced.Name = "spaced"
	spaced.Spec.Selector = []string{"role=spaced"}
	spaced.Spec.KernelArgs = []string{"x={{ .Hardware.Name }} y"}
	other := profile("default", "other", 0, "site=lab")
	nocloud := flatcar()
	nocloud.Name = "nocloud"
	nocloud.Spec.Selector = []string{"role=nocloud"}
	nocloud.Spec.KernelArgs = []string{`ds=nocloud-net;s={{ .ConfigURL "" }}`}
	// Nested ranges pass the apply-time check (each literal is within the
	// step budget) and are stopped by the budget at boot.
	endless := flatcar()
	endless.Name = "endless"
	endless.Spec.Selector = []string{"role=endless"}
	endless.Spec.KernelArgs = []string{"x={{ range 100000 }}{{ range 100000 }}{{ end }}{{ end }}"}

	tests := []struct {
		name      string
		objs      []model.Object
		mac       string
		wantLine  []string // kernel command; nil: no check
		wantBody  []string // substrings of the script
		reason    string
		err       string // substring of the error; "" for success
		notFound  bool   // the error wraps httpboot.ErrNoScript (404)
		wantWarns int
	}{
		{name: "selected by label", objs: []model.Object{worker(), flatcar()},
			wantLine: []string{"kernel", "http://10.0.0.1:7080/assets/flatcar-worker/vmlinuz", "initrd=initrd.cpio.gz", "initrd=sysext.cpio",
				"flatcar.first_boot=1", "ignition.config.url=http://10.0.0.1:7080/configs/52:54:00:00:00:01/ignition",
				"hostname=node1", "ip=10.0.0.11", "site=worker", "server=http://10.0.0.1:7080"},
			wantBody: []string{"initrd http://10.0.0.1:7080/assets/flatcar/initrd.cpio.gz || goto", "initrd https://cdn.example.com/sysext.cpio || goto", "loading boot profile "},
			reason:   "hardware default/m1: boot profile flatcar-worker (selected by role=worker)"},
		{name: "named by ref", objs: []model.Object{refTo(labelled("default", "m1"), "flatcar-worker"), flatcar()},
			err: `spec.kernelArgs[4]`, wantWarns: 1}, // no role label: .Labels.role is a missing key
		{name: "workflow wins", objs: []model.Object{worker(), flatcar(), wf("default", "w", "m1", model.StatePending)},
			reason: "workflow default/w is PENDING: boot environment"},
		{name: "allowPXE false: local disk", objs: []model.Object{with(worker(), func(h *model.Hardware) { h.Spec.Interfaces[0].Netboot.AllowPXE = bp(false) }), flatcar()},
			wantBody: []string{"sanboot"}},
		{name: "missing ref: refused", objs: []model.Object{refTo(worker(), "gone"), flatcar()},
			err: "spec.bootProfileRef names BootProfile default/gone, which does not exist", notFound: true, wantWarns: 1},
		{name: "conflict: refused", objs: []model.Object{with(worker(), func(h *model.Hardware) { h.Labels["site"] = "lab" }), flatcar(), other},
			err: "matches boot profiles flatcar-worker (by role=worker), other (by site=lab)", notFound: true, wantWarns: 1},
		{name: "template error: 500", objs: []model.Object{labelled("default", "m1", "role", "broken"), broken},
			err: `hardware default/m1: boot profile broken: spec.kernelArgs[0]`, wantWarns: 1},
		{name: "kernel arg over its budget: 500", objs: []model.Object{labelled("default", "m1", "role", "endless"), endless},
			err: "template exceeded its steps budget", wantWarns: 1},
		{name: "rendered arg with whitespace", objs: []model.Object{labelled("default", "m1", "role", "spaced"), spaced},
			err: "spec.kernelArgs[0] renders to", wantWarns: 1},
		{name: "no profile: existing behaviour", objs: []model.Object{labelled("default", "m1", "role", "none"), flatcar()},
			reason: "no pending workflow for hardware default/m1: booting from local disk"},
		{name: "ConfigURL of no name: the configs' directory", objs: []model.Object{labelled("default", "m1", "role", "nocloud"), nocloud},
			wantLine: []string{"kernel", "http://10.0.0.1:7080/assets/flatcar-worker/vmlinuz", "initrd=initrd.cpio.gz", "initrd=sysext.cpio",
				"ds=nocloud-net;s=http://10.0.0.1:7080/configs/52:54:00:00:00:01/"}},
		{name: "by IP: the interface's MAC in ConfigURL", objs: []model.Object{worker(), flatcar()}, mac: "-",
			wantBody: []string{"ignition.config.url=http://10.0.0.1:7080/configs/52:54:00:00:00:01/ignition"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, w := newPolicy(t, baseConfig(), tc.objs...)
			req := httpboot.ScriptRequest{MAC: mustMAC(mac1)}
			if tc.mac == "-" {
				req = httpboot.ScriptRequest{Source: netip.MustParseAddr("10.0.0.11")}
			}
			s, err := p.Script(context.Background(), req)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || s != nil {
					t.Fatalf("Script = %v, %v; want an error containing %q", s, err, tc.err)
				}
				if got := errors.Is(err, httpboot.ErrNoScript); got != tc.notFound {
					t.Errorf("errors.Is(err, ErrNoScript) = %v; want %v (%v)", got, tc.notFound, err)
				}
			} else if err != nil {
				t.Fatalf("Script: %v", err)
			}
			if got := len(w.all()); got != tc.wantWarns {
				t.Errorf("%d warnings %q; want %d", got, w.all(), tc.wantWarns)
			}
			if s == nil {
				return
			}
			if tc.wantLine != nil {
				if got := kernelLine(s.Body); !slices.Equal(got, tc.wantLine) {
					t.Errorf("kernel line\n got %q\nwant %q", got, tc.wantLine)
				}
			}
			for _, b := range tc.wantBody {
				if !strings.Contains(s.Body, b) {
					t.Errorf("script lacks %q:\n%s", b, s.Body)
				}
			}
			if tc.reason != "" && s.Reason != tc.reason {
				t.Errorf("reason %q; want %q", s.Reason, tc.reason)
			}
		})
	}
}

func TestProfileFor(t *testing.T) {
	ctx := context.Background()
	p, _ := newPolicy(t, baseConfig(),
		labelled("default", "m1", "role", "worker"),
		with(hw("m2", nic(mac2, "", bp(false))), func(h *model.Hardware) { h.Labels = map[string]string{"role": "db"} }),
		flatcar(),
		wf("default", "w", "m1", model.StatePending), // ignored: no workflow rule
	)
	h, prof, err := p.ProfileFor(ctx, mustMAC(mac1))
	if err != nil || h == nil || h.Name != "m1" || prof == nil || prof.Name != "flatcar-worker" {
		t.Fatalf("ProfileFor(%s) = %v, %v, %v; want m1 and flatcar-worker", mac1, h, prof, err)
	}
	prof.Spec.Kernel = "changed" // a copy: the policy's view is not touched
	if _, again, _ := p.ProfileFor(ctx, mustMAC(mac1)); again.Spec.Kernel == "changed" {
		t.Error("ProfileFor returned a shared profile")
	}
	h, prof, err = p.ProfileFor(ctx, mustMAC(mac2))
	if !errors.Is(err, ErrNoProfile) || h == nil || h.Name != "m2" || prof != nil || !strings.Contains(err.Error(), "role=db") {
		t.Errorf("ProfileFor(%s) = %v, %v, %v; want m2, no profile and ErrNoProfile naming its labels", mac2, h, prof, err)
	}
	h, prof, err = p.ProfileFor(ctx, mustMAC("52:54:00:00:00:99"))
	if !errors.Is(err, ErrNoProfile) || h != nil || prof != nil {
		t.Errorf("ProfileFor(unknown) = %v, %v, %v; want ErrNoProfile", h, prof, err)
	}
}

// TestProfileCacheFollowsTheStore: with Run, profiles come from memory and
// follow creates, updates and deletes.
func TestProfileCacheFollowsTheStore(t *testing.T) {
	p, _ := newPolicy(t, baseConfig(), labelled("default", "m1", "role", "worker"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	waitFor(t, "the profile cache's first sync", func() bool { _, ok := p.profiles.inNamespace("default"); return ok })

	st := p.store.(store.Store)
	reason := func() string {
		s, err := p.Script(ctx, httpboot.ScriptRequest{MAC: mustMAC(mac1)})
		if err != nil {
			return err.Error()
		}
		return s.Reason
	}
	if _, err := st.Create(ctx, flatcar()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new profile", func() bool { return strings.Contains(reason(), "boot profile flatcar-worker") })
	if _, err := st.Create(ctx, profile("default", "second", 0, "role=worker")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the conflict", func() bool { return strings.Contains(reason(), "matches boot profiles") })
	obj, err := st.Get(ctx, model.KindBootProfile, "default", "second")
	if err != nil {
		t.Fatal(err)
	}
	obj.(*model.BootProfile).Spec.Priority = 1
	if _, err := st.Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the priority to win", func() bool { return strings.Contains(reason(), "boot profile second") })
	if err := st.Delete(ctx, model.KindBootProfile, "default", "second", ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the delete", func() bool { return strings.Contains(reason(), "boot profile flatcar-worker") })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}
