package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/anvilproj/anvil/internal/hwinfo"
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

// describeOutOfBand writes what the machine's BMC says of it
// (status.attributes.outOfBand), then any difference between the BMC's
// and the agent's identity of the machine: a wrong spec.bmcRef.
func describeOutOfBand(w io.Writer, a *model.Attributes) {
	o := a.OutOfBand
	src := joinNonEmpty(", ", "Machine "+o.Source.Machine, o.Source.Provider)
	if !o.Source.ReadAt.IsZero() {
		src = joinNonEmpty(", ", src, "read "+o.Source.ReadAt.UTC().Truncate(time.Second).Format(time.RFC3339))
	}
	fmt.Fprintf(w, "Out-of-band: (the BMC's: %s; all of it: get -o yaml, status.attributes.outOfBand)\n", src)
	fmt.Fprintf(w, "  System:    %s\n", orDash(joinNonEmpty(", ", joinNonEmpty(" ", o.Manufacturer, o.Model),
		labelled("serial", o.SerialNumber), labelled("UUID", o.UUID), labelled("SKU", o.SKU))))
	if o.BIOSVersion != "" {
		fmt.Fprintf(w, "  BIOS:      %s\n", o.BIOSVersion)
	}
	if o.PowerState != "" {
		fmt.Fprintf(w, "  Power:     %s (when read)\n", o.PowerState)
	}
	if len(o.Processors) > 0 {
		var procs []string
		for _, p := range o.Processors {
			procs = append(procs, joinNonEmpty(" ", p.Model, parenthesised(fmt.Sprintf("%d cores, %d threads", p.Cores, p.Threads))))
		}
		fmt.Fprintf(w, "  CPU:       %s\n", countSame(procs))
	} else if s := o.ProcessorSummary; s != nil {
		fmt.Fprintf(w, "  CPU:       %d x %s\n", s.Count, orDash(s.Model))
	}
	if o.MemorySummary != nil || len(o.Memory) > 0 {
		var dimms []string
		for _, m := range o.Memory {
			dimms = append(dimms, joinNonEmpty(" ", hwinfo.HumanBytes(m.CapacityMiB<<20), m.Type, speed(m.SpeedMHz, "MHz"), m.Manufacturer))
		}
		total := "-" // in the agent's units (hwinfo.HumanBytes), to compare
		if s := o.MemorySummary; s != nil && s.TotalGiB > 0 && s.TotalGiB < 1<<33 {
			total = hwinfo.HumanBytes(uint64(s.TotalGiB * (1 << 30)))
		}
		fmt.Fprintf(w, "  Memory:    %s\n", joinNonEmpty(": ", total, countSame(dimms)))
	}
	if len(o.Drives) > 0 {
		fmt.Fprintln(w, "  Drives:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "    TYPE\tSIZE\tMODEL\tSERIAL")
		for _, d := range o.Drives {
			size := "-"
			if d.CapacityBytes > 0 {
				size = hwinfo.HumanBytes(d.CapacityBytes)
			}
			fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\n", orDash(d.MediaType), size, orDash(d.Model), orDash(d.SerialNumber))
		}
		tw.Flush()
	}
	if len(o.EthernetInterfaces) > 0 {
		fmt.Fprintln(w, "  NICs:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "    ID\tMAC\tSPEED\tLINK")
		for _, n := range o.EthernetInterfaces {
			fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\n", orDash(n.ID), orDash(n.MAC), orDash(speed(n.SpeedMbps, "Mb/s")), orDash(n.LinkStatus))
		}
		tw.Flush()
	}
	if len(o.Truncated) > 0 {
		fmt.Fprintf(w, "  Truncated: %s (over Anvil's caps)\n", strings.Join(o.Truncated, ", "))
	}
	for _, d := range a.IdentityMismatch() {
		fmt.Fprintf(w, "  Mismatch:  %s: spec.bmcRef may name another machine's BMC\n", d)
	}
}

// speed is "n unit", or "" when n is 0 (unknown, or no link).
func speed(n uint32, unit string) string {
	if n == 0 {
		return ""
	}
	return strconv.FormatUint(uint64(n), 10) + unit
}
