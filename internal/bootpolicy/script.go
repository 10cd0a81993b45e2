package bootpolicy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anvilproj/anvil/internal/agentcmdline"
	"github.com/anvilproj/anvil/internal/httpboot"
	"github.com/anvilproj/anvil/internal/ipxe"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// Script implements httpboot.Scripter: the iPXE script of the machine with
// r.MAC, or, when the request has no MAC, of the machine whose interface
// has r.Source as its address. The first that applies wins:
//
//  1. no such Hardware: with Config.Discovery (and a MAC) the discovery
//     boot (discoveryScript); in auto-proxy mode ipxe.Unknown; else an
//     error wrapping httpboot.ErrNoScript ("no Hardware has MAC …").
//  2. the interface's netboot.allowPXE is not true: the local disk.
//  3. an active workflow on the Hardware (same namespace, not finished, not
//     disabled, not waiting for another) and netboot.allowWorkflow not
//     false: the boot environment.
//  4. no active workflow, and a boot profile applies (SelectProfile:
//     spec.bootProfileRef, else the profiles whose selectors match the
//     Hardware's labels): the profile's kernel, initrds and rendered
//     kernel arguments. A referenced profile that does not exist, or
//     several matching profiles with the same highest priority, is a
//     refusal (an error wrapping httpboot.ErrNoScript, a 404) naming them,
//     and is logged: never a guess.
//  5. with Config.Discovery, a discovered Hardware (model.LabelDiscovered)
//     with no boot profile and no workflow at all (an installed one,
//     whose workflow ended, boots its disk): the discovery boot again
//     (its inventory is refreshed and it waits for work).
//  6. netboot.ipxe.url: chain to it.
//  7. netboot.ipxe.contents: that script.
//  8. otherwise the local disk.
//
// A Hardware value that cannot be placed in a script safely (see
// ipxe.CheckArg) is an error naming the field, not a script; so is a
// profile's kernel argument that does not render (a template error).
func (p *Policy) Script(ctx context.Context, r httpboot.ScriptRequest) (*httpboot.Script, error) {
	var (
		hw  *model.Hardware
		i   int
		err error
		who string
	)
	switch {
	case r.MAC.IsValid():
		who = "MAC " + r.MAC.String()
		hw, i, err = p.byMAC(ctx, r.MAC)
	case r.Source.IsValid():
		ip := r.Source.Unmap().String()
		who = "IP " + ip
		hw, i, err = p.byIP(ctx, ip)
	default:
		return nil, fmt.Errorf("%w: the request has neither a MAC nor a source address", httpboot.ErrNoScript)
	}
	if err != nil {
		return nil, err
	}
	if hw == nil {
		reason := "no Hardware has " + who
		if p.discovery && r.MAC.IsValid() {
			return p.discoveryScript(ctx, r.MAC, "", r, reason)
		}
		if p.mode == ModeAutoProxy {
			return &httpboot.Script{Body: ipxe.Unknown(r.MAC, reason), Reason: reason + " (auto-proxy: generic script)"}, nil
		}
		return nil, fmt.Errorf("%w: %s", httpboot.ErrNoScript, reason)
	}

	key := hw.Key()
	nb := hw.Spec.Interfaces[i].Netboot
	if nb == nil {
		nb = &model.Netboot{}
	}
	field := fmt.Sprintf("spec.interfaces[%d].netboot", i)

	if !model.BoolValue(nb.AllowPXE, false) {
		is := "false"
		if nb.AllowPXE == nil {
			is = "not set, which means false"
		}
		return localBoot(fmt.Sprintf("netboot not allowed for hardware %s (%s.allowPXE is %s)", key, field, is)), nil
	}

	wf, err := p.activeWorkflow(ctx, hw)
	if err != nil {
		return nil, err
	}
	if wf != nil && model.BoolValue(nb.AllowWorkflow, true) {
		return p.bootEnv(ctx, hw, i, nb, wf, r)
	}
	if wf == nil {
		sel, cp, err := p.selectFor(ctx, hw)
		if err != nil {
			return nil, p.profileRefusal(hw, err)
		}
		if sel != nil {
			s, err := p.profileScript(ctx, hw, i, sel, cp, r)
			if err != nil {
				p.warnOnce("profile script "+hw.Key()+"@"+hw.ResourceVersion+"@"+sel.Profile.ResourceVersion+" "+err.Error(),
					"bootpolicy: cannot render a boot profile's script: "+err.Error(), "hardware", hw.Key(), "profile", sel.Profile.Key())
				return nil, err
			}
			return s, nil
		}
		if p.discovery && hw.Labels[model.LabelDiscovered] == "true" {
			none, err := p.noWorkflows(ctx, hw)
			if err != nil {
				return nil, err
			}
			if none {
				return p.discoveryScript(ctx, bootingMAC(r.MAC, hw, i), hw.Spec.Interfaces[i].DHCP.Arch, r,
					fmt.Sprintf("hardware %s was discovered and has no workflow yet", key))
			}
		}
	}

	if ix := nb.IPXE; ix != nil && ix.URL != "" {
		reason := fmt.Sprintf("hardware %s: %s.ipxe.url", key, field)
		body, err := ipxe.Chain(ix.URL, reason)
		if err != nil {
			return nil, fmt.Errorf("hardware %s: %s.ipxe.url: %w", key, field, err)
		}
		return &httpboot.Script{Body: body, Reason: reason}, nil
	}
	if ix := nb.IPXE; ix != nil && ix.Contents != "" {
		reason := fmt.Sprintf("hardware %s: %s.ipxe.contents", key, field)
		return &httpboot.Script{Body: ipxe.Custom(ix.Contents, reason), Reason: reason}, nil
	}

	if wf != nil {
		return localBoot(fmt.Sprintf("workflow %s is %s but %s.allowWorkflow is false for hardware %s: booting from local disk",
			wf.Key(), stateOf(wf), field, key)), nil
	}
	return localBoot(fmt.Sprintf("no pending workflow for hardware %s: booting from local disk", key)), nil
}

func localBoot(reason string) *httpboot.Script {
	return &httpboot.Script{Body: ipxe.LocalBoot(reason), Reason: reason}
}

// stateOf is the workflow's state for a reason; a workflow the engine has
// not rendered yet has none and is about to be PENDING.
func stateOf(wf *model.Workflow) model.State {
	if s := wf.Status.State; s != "" {
		return s
	}
	return model.StatePending
}

// bootEnv renders the boot environment script for interface i of hw.
func (p *Policy) bootEnv(ctx context.Context, hw *model.Hardware, i int, nb *model.Netboot, wf *model.Workflow, r httpboot.ScriptRequest) (*httpboot.Script, error) {
	key := hw.Key()
	iface := &hw.Spec.Interfaces[i]
	d := iface.DHCP // not nil: the interface was found by its MAC or IP
	f := fmt.Sprintf("spec.interfaces[%d]", i)
	bad := func(field string, err error) (*httpboot.Script, error) {
		return nil, fmt.Errorf("hardware %s: %s: %w", key, field, err)
	}

	arch := bootArch(d.Arch, r.BuildArch)
	kernel := p.bootEnvURL + "/vmlinuz-" + arch
	initrd := p.bootEnvURL + "/initramfs-" + arch
	var params []string
	if o := nb.OSIE; o != nil {
		// Tinkerbell's semantics: baseURL + "/" + kernel, each defaulting.
		base := p.bootEnvURL
		if o.BaseURL != "" {
			base = strings.TrimRight(o.BaseURL, "/")
			if err := ipxe.CheckURL(base); err != nil {
				return bad(f+".netboot.osie.baseURL", err)
			}
		}
		kernel = osieURL(base, o.Kernel, "vmlinuz-"+arch)
		if err := ipxe.CheckURL(kernel); err != nil {
			return bad(f+".netboot.osie.kernel", err)
		}
		initrd = osieURL(base, o.Initrd, "initramfs-"+arch)
		if err := ipxe.CheckURL(initrd); err != nil {
			return bad(f+".netboot.osie.initrd", err)
		}
		params = o.KernelParams
	}

	// The MAC that booted: Hook brings up (and puts vlan_id on) the
	// interface with hw_addr=; the agent is that MAC unless the Hardware
	// names it, as Smee does.
	a := p.agentArgs
	a.Server = p.servers(ctx)
	a.HWAddr = bootingMAC(r.MAC, hw, i).String()
	a.WorkerID = hw.Spec.AgentID
	// The Hardware field each per-machine argument comes from, for errors.
	fields := map[string]string{
		agentcmdline.ArgWorkerID: "spec.agentID",
		agentcmdline.ArgVLANID:   f + ".dhcp.vlan_id",
		agentcmdline.ArgFacility: "spec.metadata.facility.facility_code",
	}
	if a.WorkerID == "" {
		a.WorkerID, fields[agentcmdline.ArgWorkerID] = a.HWAddr, f+".dhcp.mac"
	}
	var err error
	if a.VLANID, err = agentcmdline.ParseVLANID(d.VLANID); err != nil {
		return bad(fields[agentcmdline.ArgVLANID], fmt.Errorf("%q: %w", d.VLANID, err))
	}
	if m := hw.Spec.Metadata; m != nil && m.Facility != nil {
		a.Facility = m.Facility.FacilityCode
	}
	if p.agentToken != nil {
		a.Token = p.agentToken(wf)
	}
	// The operator's arguments: the Hardware's, then anvil serve's.
	var operator []string
	for j, o := range params {
		if o == "" {
			continue
		}
		if err := ipxe.CheckArg(o); err != nil {
			return bad(fmt.Sprintf("%s.netboot.osie.kernelParams[%d]", f, j), err)
		}
		operator = append(operator, o)
	}
	operator = append(operator, p.extraArgs...)
	// argErr names where a bad argument's value came from: a Hardware
	// field, or the workflow's token (base64url, which needs no quoting,
	// but is checked all the same, as every argument is).
	argErr := func(name string, err error) (*httpboot.Script, error) {
		if name == agentcmdline.ArgToken {
			return nil, fmt.Errorf("workflow %s: agent token: %w", wf.Key(), err)
		}
		if field, ok := fields[name]; ok {
			return bad(field, err)
		}
		return nil, fmt.Errorf("hardware %s: kernel argument: %w", key, err)
	}
	args, err := a.Build(p.console(arch), operator)
	if err != nil {
		var ae *agentcmdline.ArgError
		if errors.As(err, &ae) {
			return argErr(ae.Name, err)
		}
		return nil, fmt.Errorf("hardware %s: %w", key, err)
	}
	for _, arg := range args {
		if err := ipxe.CheckArg(arg); err != nil {
			name, _, _ := strings.Cut(arg, "=")
			return argErr(name, err)
		}
	}

	reason := fmt.Sprintf("workflow %s is %s: boot environment", wf.Key(), stateOf(wf))
	body, err := ipxe.BootEnv(ipxe.BootEnvParams{Reason: reason, KernelURL: kernel, InitrdURLs: []string{initrd}, KernelArgs: args})
	if err != nil {
		return nil, fmt.Errorf("hardware %s: %w", key, err)
	}
	return &httpboot.Script{Body: body, Reason: reason}, nil
}

// noWorkflows reports whether no workflow of hw's namespace names hw, in
// whatever state.
func (p *Policy) noWorkflows(ctx context.Context, hw *model.Hardware) (bool, error) {
	objs, err := p.store.ByIndex(ctx, model.KindWorkflow, store.IndexHardwareRef, hw.Name)
	if err != nil {
		return false, fmt.Errorf("find workflows of hardware %s: %w", hw.Key(), err)
	}
	for _, o := range objs {
		if o.GetObjectMeta().Namespace == hw.Namespace {
			return false, nil
		}
	}
	return true, nil
}

// discoveryScript boots the machine that netboots from mac into the boot
// environment in discovery mode: anvil.discovery=1, its agent ID the MAC,
// no token (it has no workflow; Discover hands it one's token when it
// gets work). arch is its Hardware's dhcp.arch, "" for a machine with
// none. why says what led here; the reason adds "discovery boot".
func (p *Policy) discoveryScript(ctx context.Context, mac macaddr.MAC, arch string, r httpboot.ScriptRequest, why string) (*httpboot.Script, error) {
	a := p.agentArgs
	a.Server = p.servers(ctx)
	a.HWAddr = mac.String()
	a.WorkerID = mac.String()
	a.Discovery = true
	a64 := bootArch(arch, r.BuildArch)
	args, err := a.Build(p.console(a64), p.extraArgs)
	if err != nil {
		return nil, fmt.Errorf("discovery boot of %s: %w", mac, err)
	}
	for _, arg := range args {
		if err := ipxe.CheckArg(arg); err != nil {
			return nil, fmt.Errorf("discovery boot of %s: kernel argument: %w", mac, err)
		}
	}
	reason := why + ": discovery boot"
	body, err := ipxe.BootEnv(ipxe.BootEnvParams{Reason: reason, KernelURL: p.bootEnvURL + "/vmlinuz-" + a64,
		InitrdURLs: []string{p.bootEnvURL + "/initramfs-" + a64}, KernelArgs: args})
	if err != nil {
		return nil, fmt.Errorf("discovery boot of %s: %w", mac, err)
	}
	return &httpboot.Script{Body: body, Reason: reason}, nil
}

// replicasTimeout bounds the listing of the other replicas at each boot
// script: a slow API server delays the machine's boot by that much at
// most, and the machine then gets this replica's address alone.
const replicasTimeout = 2 * time.Second

// servers is the agent's anvil.server=: this server's public URL and then,
// in Kubernetes mode, the other live replicas' (Config.Replicas), each
// once. A replica that cannot be listed, or whose URL could not be read
// back from the command line, is left out with a warning: the machine
// boots with fewer addresses rather than not at all.
func (p *Policy) servers(ctx context.Context) string {
	urls := []string{p.publicHTTP}
	if p.replicas == nil {
		return p.publicHTTP
	}
	lctx, cancel := context.WithTimeout(ctx, replicasTimeout)
	others, err := p.replicas(lctx)
	cancel()
	if err != nil {
		p.log.Warn("bootpolicy: the other replicas could not be listed; this boot script gives the agent this replica's address alone",
			"err", err)
	}
	for _, u := range others {
		base, err := checkBaseURL("replica URL", u)
		if err == nil && strings.Contains(base, agentcmdline.ServerSeparator) {
			err = fmt.Errorf("bootpolicy: replica URL %q holds %q, which separates anvil.server='s URLs", u, agentcmdline.ServerSeparator)
		}
		if err != nil {
			p.warnOnce("replica URL "+u, "bootpolicy: leaving a replica out of anvil.server=", "err", err)
			continue
		}
		if !slices.Contains(urls, base) {
			urls = append(urls, base)
		}
	}
	return agentcmdline.JoinServers(urls)
}

// osieURL joins base and name ("vmlinuz-x86_64") as Tinkerbell does, name
// defaulting to def; a name that is a whole URL is used as it is.
func osieURL(base, name, def string) string {
	if name == "" {
		name = def
	}
	if strings.Contains(name, "://") {
		return name
	}
	return base + "/" + strings.TrimLeft(name, "/")
}

// console is the console= arguments of a machine of the boot
// environment architecture arch (bootArch's name).
func (p *Policy) console(arch string) []string {
	if arch == "aarch64" {
		return p.consoleARM64
	}
	return p.consoleArg
}

// bootArch names the boot environment's architecture as its files do
// (vmlinuz-x86_64, vmlinuz-aarch64): from the interface's dhcp.arch, else
// from iPXE's ${buildarch}, else x86_64. undionly.kpxe reports i386 on
// 64-bit PCs, hence i386 → x86_64.
func bootArch(hwArch, buildArch string) string {
	switch a := strings.ToLower(hwArch); a {
	case "":
	case "x86_64", "amd64", "x86", "i386":
		return "x86_64"
	case "aarch64", "arm64", "hua", "2a2":
		return "aarch64"
	default:
		if validFileName(a) {
			return a // riscv64, …: served if the files are there
		}
	}
	switch buildArch {
	case "arm64":
		return "aarch64"
	case "riscv64":
		return "riscv64"
	}
	return "x86_64"
}
