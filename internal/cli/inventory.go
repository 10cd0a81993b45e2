package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/anvilproj/anvil/internal/model"
)

// describeInventory prints what the machine's agent last reported
// (status.attributes) for people: a line per part, disks and NICs as
// tables. `anvil get hardware NAME -o yaml` has all of it.
func describeInventory(w io.Writer, a *model.Attributes) {
	an := a.Anvil
	if an == nil {
		an = &model.AnvilAttributes{}
	}
	fmt.Fprintln(w, "Inventory:   (the agent's last report; all of it: get -o yaml, status.attributes)")
	if p := a.Product; p != nil || an.UUID != "" {
		if p == nil {
			p = &model.Product{}
		}
		fmt.Fprintf(w, "  Product:   %s\n", joinNonEmpty(", ", joinNonEmpty(" ", p.Vendor, p.Name), labelled("serial", p.SerialNumber), labelled("UUID", an.UUID)))
	}
	if b := a.Baseboard; b != nil {
		fmt.Fprintf(w, "  Board:     %s\n", joinNonEmpty(", ", joinNonEmpty(" ", b.Vendor, b.Product, b.Version), labelled("serial", b.SerialNumber)))
	}
	if c := a.Chassis; c != nil {
		fmt.Fprintf(w, "  Chassis:   %s\n", joinNonEmpty(", ", c.Vendor, labelled("serial", c.Serial)))
	}
	fw := strings.ToUpper(an.Firmware)
	if an.SecureBoot != "" {
		fw = joinNonEmpty(", ", fw, "Secure Boot "+an.SecureBoot)
	}
	if b := a.BIOS; b != nil {
		fw = joinNonEmpty("; ", fw, joinNonEmpty(" ", b.Vendor, b.Version, parenthesised(b.ReleaseDate)))
	}
	if fw != "" {
		fmt.Fprintf(w, "  Firmware:  %s\n", fw)
	}
	if an.TPM != "" {
		fmt.Fprintf(w, "  TPM:       %s\n", an.TPM)
	}
	if c := a.CPU; c != nil {
		var procs []string
		for _, p := range c.Processors {
			procs = append(procs, joinNonEmpty(" ", p.Vendor, p.Model))
		}
		fmt.Fprintf(w, "  CPU:       %d cores, %d threads: %s\n", c.TotalCores, c.TotalThreads, countSame(procs))
	}
	if m := a.Memory; m != nil {
		fmt.Fprintf(w, "  Memory:    %s\n", orDash(m.Total))
	}
	if len(a.BlockDevices) > 0 {
		fmt.Fprintln(w, "  Disks:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "    NAME\tTYPE\tCONTROLLER\tSIZE\tMODEL\tSERIAL")
		for _, d := range a.BlockDevices {
			fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\t%s\t%s\n", d.Name, orDash(d.DriveType), orDash(d.ControllerType), orDash(d.Size),
				orDash(joinNonEmpty(" ", d.Vendor, d.Model)), orDash(d.SerialNumber))
		}
		tw.Flush()
	}
	if len(a.NetworkInterfaces) > 0 {
		extra := map[string]model.AnvilNetInterface{}
		for _, n := range an.NetworkInterfaces {
			extra[n.Name] = n
		}
		fmt.Fprintln(w, "  NICs:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "    NAME\tMAC\tSPEED\tDRIVER\tSTATE")
		for _, n := range a.NetworkInterfaces {
			x := extra[n.Name]
			fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\t%s\n", n.Name, orDash(n.MAC), orDash(n.Speed), orDash(x.Driver), orDash(x.State))
		}
		tw.Flush()
	}
	for i, g := range a.GPUDevices {
		head := "  GPUs:      "
		if i > 0 {
			head = "             "
		}
		fmt.Fprintf(w, "%s%s\n", head, joinNonEmpty(" ", g.Vendor, g.Product, parenthesised(g.Driver)))
	}
	if len(an.Truncated) > 0 {
		fmt.Fprintf(w, "  Truncated: %s (over the collector's caps)\n", strings.Join(an.Truncated, ", "))
	}
}

// labelled is "name value", or "" when value is.
func labelled(name, value string) string {
	if value == "" {
		return ""
	}
	return name + " " + value
}

// parenthesised is "(s)", or "" when s is.
func parenthesised(s string) string {
	if s == "" {
		return ""
	}
	return "(" + s + ")"
}

// countSame writes a list with runs of the same item counted: "2 x Xeon".
func countSame(items []string) string {
	var out []string
	for i := 0; i < len(items); {
		j := i
		for j < len(items) && items[j] == items[i] {
			j++
		}
		out = append(out, fmt.Sprintf("%d x %s", j-i, orDash(items[i])))
		i = j
	}
	return strings.Join(out, ", ")
}
