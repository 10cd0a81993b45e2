package actions

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// nicLink reports the link of each physical NIC (one with a device in
// /sys/class/net: not lo, bridges, bonds, VLANs or tunnels): its carrier,
// speed (Mb/s) and operstate. NIC_LINK_REQUIRED says which must have a
// carrier: "all", or names or MACs (comma or space separated); unset,
// none must (the machine reached the server through one). NIC_MIN_SPEED_MBPS
// fails a NIC with a carrier that reports a lower or unknown speed.
func (c *Catalog) nicLink(ctx context.Context, s Spec, out Output) (Result, error) {
	e := env(s.Env)
	minSpeed, err := e.integer("NIC_MIN_SPEED_MBPS", 0, 0, 1<<31)
	if err != nil {
		return c.configFailure(NameCommissionNICLink, err)
	}
	nics, err := c.physicalNICs()
	if err != nil {
		return c.configFailure(NameCommissionNICLink, err)
	}
	required, err := requiredNICs(e.str("NIC_LINK_REQUIRED"), nics)
	if err != nil {
		return c.configFailure(NameCommissionNICLink, err)
	}
	checks := make([]check, len(nics))
	for i, n := range nics {
		checks[i] = check{name: "nic-link/" + n.name, run: func() (string, string, map[string]string) {
			return n.judge(required[n.name], minSpeed)
		}}
	}
	return c.runChecks(ctx, NameCommissionNICLink, checks, out)
}

// nic is one physical NIC as sysfs shows it.
type nic struct {
	name, mac, operstate string
	carrier              bool
	speed                int64 // Mb/s; -1 unknown
}

// physicalNICs lists the NICs of /sys/class/net that have a device.
func (c *Catalog) physicalNICs() ([]nic, error) {
	dir := c.sysPath("/sys/class/net")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list NICs: %w", err)
	}
	var nics []nic
	for _, ent := range ents {
		d := filepath.Join(dir, ent.Name())
		if _, err := os.Stat(filepath.Join(d, "device")); err != nil {
			continue
		}
		n := nic{name: ent.Name(), mac: strings.ToLower(readSysString(filepath.Join(d, "address"))),
			operstate: readSysString(filepath.Join(d, "operstate")), speed: -1}
		// carrier and speed cannot be read while the interface is
		// down (EINVAL): no carrier, speed unknown.
		n.carrier = readSysString(filepath.Join(d, "carrier")) == "1"
		if sp, err := readSysInt(filepath.Join(d, "speed")); err == nil && sp > 0 {
			n.speed = sp
		}
		nics = append(nics, n)
	}
	sort.Slice(nics, func(i, j int) bool { return nics[i].name < nics[j].name })
	if len(nics) == 0 {
		return nil, errors.New("the machine has no physical NIC (/sys/class/net lists none with a device)")
	}
	return nics, nil
}

// requiredNICs reads NIC_LINK_REQUIRED into the set of NIC names that
// must have a carrier; a name or MAC the machine has not is an error.
func requiredNICs(v string, nics []nic) (map[string]bool, error) {
	req := map[string]bool{}
	if strings.EqualFold(v, "all") {
		for _, n := range nics {
			req[n.name] = true
		}
		return req, nil
	}
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' }) {
		i := slices.IndexFunc(nics, func(n nic) bool { return n.name == f || n.mac == strings.ToLower(f) })
		if i < 0 {
			names := make([]string, len(nics))
			for j, n := range nics {
				names[j] = n.name + " (" + n.mac + ")"
			}
			return nil, fmt.Errorf("NIC_LINK_REQUIRED: %s is not a physical NIC of this machine (it has %s)", f, strings.Join(names, ", "))
		}
		req[nics[i].name] = true
	}
	return req, nil
}

// judge is one NIC's check.
func (n nic) judge(required bool, minSpeed int64) (string, string, map[string]string) {
	v := values("mac", n.mac, "carrier", n.carrier, "speedMbps", n.speed, "operstate", n.operstate, "required", required)
	speed := "speed unknown"
	if n.speed > 0 {
		speed = fmt.Sprintf("%d Mb/s", n.speed)
	}
	switch {
	case !n.carrier && required:
		return CheckFailed, fmt.Sprintf("no link (operstate %s), and NIC_LINK_REQUIRED names it", n.operstate), v
	case !n.carrier:
		return CheckPassed, fmt.Sprintf("no link (operstate %s); not required", n.operstate), v
	case minSpeed > 0 && n.speed < minSpeed:
		return CheckFailed, fmt.Sprintf("link up at %s, below NIC_MIN_SPEED_MBPS %d", speed, minSpeed), v
	}
	return CheckPassed, "link up, " + speed, v
}
