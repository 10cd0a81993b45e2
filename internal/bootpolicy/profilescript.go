package bootpolicy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/anvilproj/anvil/internal/httpboot"
	"github.com/anvilproj/anvil/internal/ipxe"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/model"
)

// ConfigPathPrefix is where a profile's configs are served:
// ConfigPathPrefix + "<mac>/<name>", mac in lower-case colon form.
const ConfigPathPrefix = "/configs/"

// ProfileData is what a boot profile's kernel arguments (Go templates,
// missingkey=error) can use:
//
//	{{ .Hardware.Name }}           the Hardware (a *model.Hardware)
//	{{ .Labels.role }}             its labels (a missing key is an error)
//	{{ .MAC }} {{ .IP }} {{ .Hostname }}  of the booting interface
//	{{ .ServerURL }}               Anvil's public HTTP base, no trailing '/'
//	{{ .ConfigURL "ignition" }}    <ServerURL>/configs/<MAC>/ignition
//	{{ .ConfigURL "" }}            <ServerURL>/configs/<MAC>/ (NoCloud's prefix)
//	{{ .Vars.ssh_key }}            the Hardware's variables (model.VarsAnnotation)
//
// MAC is lower-case with colons; IP and Hostname are "" when the interface
// has none (Hostname falls back to spec.metadata.instance.hostname). A
// label that only some machines have is tested with index, which does not
// fail on a missing key: {{ if index .Labels "debug" }}debug{{ end }}. An
// argument that renders empty is left out.
type ProfileData struct {
	Hardware  *model.Hardware
	Labels    map[string]string
	MAC       string
	IP        string
	Hostname  string
	ServerURL string
	Vars      map[string]any

	spec *model.BootProfileSpec // for ConfigURL's names
}

// ConfigURL returns the URL the machine fetches the profile's config name
// from (name "" is the directory of its configs, with a trailing '/'), or
// an error when the profile has no config of that name.
func (d *ProfileData) ConfigURL(name string) (string, error) {
	if err := d.spec.CheckConfigURL(name); err != nil {
		return "", err
	}
	return d.ServerURL + ConfigPathPrefix + d.MAC + "/" + name, nil
}

// profileData builds the template data of interface i of hw. mac is the
// booting interface's MAC when the request carried it.
func (p *Policy) profileData(hw *model.Hardware, i int, mac macaddr.MAC, bp *model.BootProfile) *ProfileData {
	d := hw.Spec.Interfaces[i].DHCP
	data := &ProfileData{
		Hardware:  hw,
		Labels:    hw.Labels,
		MAC:       bootingMAC(mac, hw, i).String(),
		ServerURL: p.publicHTTP,
		spec:      &bp.Spec,
	}
	if data.Labels == nil {
		data.Labels = map[string]string{}
	}
	if d.IP != nil {
		data.IP = d.IP.Address
	}
	data.Hostname = d.Hostname
	if data.Hostname == "" && hw.Spec.Metadata != nil && hw.Spec.Metadata.Instance != nil {
		data.Hostname = hw.Spec.Metadata.Instance.Hostname
	}
	// A malformed annotation leaves Vars empty: a template that uses it
	// then fails with missingkey, naming the key.
	if vars, err := hw.Vars(); err == nil {
		data.Vars = vars
	} else {
		data.Vars = map[string]any{}
		p.hwWarn(hw, "metadata.annotations["+model.VarsAnnotation+"]", err.Error())
	}
	return data
}

// ConfigData is the template data of hw's interface with mac for profile
// bp: what its kernel arguments saw, for rendering its configs.
func (p *Policy) ConfigData(hw *model.Hardware, mac macaddr.MAC, bp *model.BootProfile) *ProfileData {
	i := 0
	for j := range hw.Spec.Interfaces {
		if hw.Spec.Interfaces[j].MAC() == mac {
			i = j
			break
		}
	}
	if i >= len(hw.Spec.Interfaces) || hw.Spec.Interfaces[i].DHCP == nil {
		return &ProfileData{Hardware: hw, Labels: hw.Labels, MAC: mac.String(), ServerURL: p.publicHTTP,
			Vars: map[string]any{}, spec: &bp.Spec}
	}
	return p.profileData(hw, i, mac, bp)
}

// assetURL makes a profile's kernel or initrd absolute: an http(s) URL is
// kept, a path ("/assets/…") is put under the public HTTP base.
func (p *Policy) assetURL(s string) string {
	if strings.HasPrefix(s, "/") {
		return p.publicHTTP + s
	}
	return s
}

// profileScript renders the iPXE script that boots sel's profile on
// interface i of hw. Every error names the Hardware, the profile and the
// field; nothing is returned alongside one.
func (p *Policy) profileScript(ctx context.Context, hw *model.Hardware, i int, sel *Selection, cp *compiledProfile, r httpboot.ScriptRequest) (*httpboot.Script, error) {
	bp := sel.Profile
	who := fmt.Sprintf("hardware %s: boot profile %s", hw.Key(), bp.Name)
	if cp.err != nil {
		return nil, fmt.Errorf("%s: %w", who, cp.err)
	}
	data := p.profileData(hw, i, r.MAC, bp)
	args := make([]string, 0, len(cp.args))
	for j, t := range cp.args {
		out, err := t.Execute(ctx, data)
		if err != nil {
			return nil, fmt.Errorf("%s: spec.kernelArgs[%d]: %w", who, j, err)
		}
		a := string(out)
		if a == "" {
			continue // a conditional argument that is off for this machine
		}
		if err := ipxe.CheckArg(a); err != nil {
			return nil, fmt.Errorf("%s: spec.kernelArgs[%d] renders to %w", who, j, err)
		}
		args = append(args, a)
	}
	kernel := p.assetURL(bp.Spec.Kernel)
	if err := ipxe.CheckURL(kernel); err != nil {
		return nil, fmt.Errorf("%s: spec.kernel: %w", who, err)
	}
	initrds := make([]string, 0, len(bp.Spec.Initrds))
	for j, u := range bp.Spec.Initrds {
		u = p.assetURL(u)
		if err := ipxe.CheckURL(u); err != nil {
			return nil, fmt.Errorf("%s: spec.initrds[%d]: %w", who, j, err)
		}
		initrds = append(initrds, u)
	}
	reason := fmt.Sprintf("hardware %s: %s", hw.Key(), sel.reason())
	body, err := ipxe.BootEnv(ipxe.BootEnvParams{Reason: reason, KernelURL: kernel, InitrdURLs: initrds, KernelArgs: args,
		What: "boot profile " + bp.Name})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", who, err)
	}
	return &httpboot.Script{Body: body, Reason: reason}, nil
}

// selectFor applies SelectProfile's rules 2–4 to hw with the profiles of
// its namespace.
func (p *Policy) selectFor(ctx context.Context, hw *model.Hardware) (*Selection, *compiledProfile, error) {
	ps, err := p.profilesOf(ctx, hw.Namespace)
	if err != nil {
		return nil, nil, err
	}
	return selectCompiled(hw, ps)
}

// ProfileFor returns the Hardware with an interface of that MAC and the
// boot profile that applies to it, by the precedence of SelectProfile
// without the workflow rule: spec.bootProfileRef, else the one profile (or
// the one of highest priority) whose selector matches its labels. It does
// not look at netboot.allowPXE.
//
// Errors: no such Hardware, no profile, or a missing referenced profile
// wrap ErrNoProfile (the Hardware is returned when there is one); a tie
// wraps ErrProfileConflict and names the profiles; a store failure is
// returned as it is. The returned objects are copies, the caller's to keep.
// This is the API the config renderer (/configs/<mac>/<name>) builds on.
func (p *Policy) ProfileFor(ctx context.Context, mac macaddr.MAC) (*model.Hardware, *model.BootProfile, error) {
	hw, _, err := p.byMAC(ctx, mac)
	if err != nil {
		return nil, nil, err
	}
	if hw == nil {
		return nil, nil, fmt.Errorf("%w: no Hardware has MAC %s", ErrNoProfile, mac)
	}
	sel, _, err := p.selectFor(ctx, hw)
	if err != nil {
		return hw, nil, err
	}
	if sel == nil {
		return hw, nil, fmt.Errorf("%w: hardware %s has no spec.bootProfileRef and no BootProfile in namespace %s selects its labels (%s)",
			ErrNoProfile, hw.Key(), hw.Namespace, labelsString(hw.Labels))
	}
	return hw, model.DeepCopy(sel.Profile), nil
}

// labelsString renders labels for an error: "role=worker,site=lab" or
// "none".
func labelsString(l map[string]string) string {
	if len(l) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		keys[i] = k + "=" + l[k]
	}
	return strings.Join(keys, ",")
}

// profileRefusal turns a selection error into the script handler's 404
// (httpboot.ErrNoScript) with the reason, logged once per Hardware version
// and reason; other errors (a store failure) are returned as they are.
func (p *Policy) profileRefusal(hw *model.Hardware, err error) error {
	if !errors.Is(err, ErrNoProfile) && !errors.Is(err, ErrProfileConflict) {
		return err
	}
	p.warnOnce("profile "+hw.Key()+"@"+hw.ResourceVersion+" "+err.Error(),
		"bootpolicy: refusing a script: "+err.Error(), "hardware", hw.Key())
	return fmt.Errorf("%w: %v", httpboot.ErrNoScript, err)
}

// bootingMAC is the MAC of the interface that booted: the request's (the
// script URL's) when it carried one, else that of interface i of hw, the
// one its source address matched.
func bootingMAC(req macaddr.MAC, hw *model.Hardware, i int) macaddr.MAC {
	if req.IsValid() {
		return req
	}
	return hw.Spec.Interfaces[i].MAC()
}
