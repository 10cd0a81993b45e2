package actions

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// defaultMemoryTolerance is how far below the installed memory (SMBIOS)
// the kernel's MemTotal may be, in percent: firmware and the kernel keep
// some for themselves (about 3 to 6 % on the machines measured).
const defaultMemoryTolerance = 10

// memory checks the memory the kernel manages (MemTotal of /proc/meminfo)
// against MIN_MEMORY ("16GiB"; unset: no minimum) and against the memory
// the firmware reports installed (the SMBIOS memory devices, type 17, of
// /sys/firmware/dmi/tables/DMI) when it is known, allowing
// MEMORY_TOLERANCE_PERCENT (default 10) less: a module the kernel does not
// see fails.
func (c *Catalog) memory(ctx context.Context, s Spec, out Output) (Result, error) {
	e := env(s.Env)
	var minBytes uint64
	if v := e.str("MIN_MEMORY"); v != "" {
		n, err := parseSize(v)
		if err != nil {
			return c.configFailure(NameCommissionMemory, fmt.Errorf("MIN_MEMORY: %w", err))
		}
		minBytes = n
	}
	tol, err := e.integer("MEMORY_TOLERANCE_PERCENT", defaultMemoryTolerance, 0, 99)
	if err != nil {
		return c.configFailure(NameCommissionMemory, err)
	}
	return c.runChecks(ctx, NameCommissionMemory, []check{{name: "memory", run: func() (string, string, map[string]string) {
		return c.checkMemory(minBytes, uint64(tol))
	}}}, out)
}

func (c *Catalog) checkMemory(minBytes, tol uint64) (string, string, map[string]string) {
	mi, err := os.ReadFile(c.sysPath("/proc/meminfo"))
	if err != nil {
		return CheckFailed, fmt.Sprintf("read MemTotal: %v", err), nil
	}
	total, err := parseMemTotal(mi)
	if err != nil {
		return CheckFailed, err.Error(), nil
	}
	v := values("memTotalBytes", total)
	if minBytes > 0 {
		v["minBytes"] = strconv.FormatUint(minBytes, 10)
	}
	installed, modules := c.dmiMemory()
	var bad []string
	detail := fmt.Sprintf("MemTotal %s", formatSize(total))
	if installed > 0 {
		v["installedBytes"] = strconv.FormatUint(installed, 10)
		v["modules"] = strconv.Itoa(modules)
		plural := "s"
		if modules == 1 {
			plural = ""
		}
		detail += fmt.Sprintf(" of %s installed (%d module%s, SMBIOS)", formatSize(installed), modules, plural)
		if floor := installed / 100 * (100 - tol); total < floor {
			bad = append(bad, fmt.Sprintf("the kernel sees less than %d%% of the installed memory (MEMORY_TOLERANCE_PERCENT %d)", 100-tol, tol))
		}
	} else {
		detail += " (installed memory unknown: no SMBIOS memory devices)"
	}
	if minBytes > 0 {
		detail += fmt.Sprintf(", minimum %s", formatSize(minBytes))
		if total < minBytes {
			bad = append(bad, fmt.Sprintf("below MIN_MEMORY %s", formatSize(minBytes)))
		}
	}
	if len(bad) > 0 {
		return CheckFailed, detail + ": " + strings.Join(bad, "; "), v
	}
	return CheckPassed, detail, v
}

// dmiMemory sums the sizes of the SMBIOS memory devices (type 17) of the
// firmware's table, /sys/firmware/dmi/tables/DMI (the kernel exposes it
// whenever the firmware has one); 0 when there are none or none has a
// known size.
func (c *Catalog) dmiMemory() (total uint64, modules int) {
	table, err := os.ReadFile(c.sysPath("/sys/firmware/dmi/tables/DMI"))
	if err != nil {
		return 0, 0
	}
	return parseSMBIOSMemory(table)
}

// smbiosEndOfTable is the type of SMBIOS's last structure.
const smbiosEndOfTable = 127

// parseSMBIOSMemory walks an SMBIOS table (structures of a 4-byte header
// with type and length, the formatted area, then strings ending in two
// NULs) and sums its memory devices' sizes (parseDMIMemoryDevice). A
// structure that runs past the table ends the walk.
func parseSMBIOSMemory(table []byte) (total uint64, modules int) {
	for off := 0; off+4 <= len(table); {
		typ, n := table[off], int(table[off+1])
		if n < 4 || off+n > len(table) {
			break
		}
		if typ == 17 {
			if size, ok := parseDMIMemoryDevice(table[off : off+n]); ok && size > 0 {
				total += size
				modules++
			}
		}
		if typ == smbiosEndOfTable {
			break
		}
		end := bytes.Index(table[off+n:], []byte{0, 0})
		if end < 0 {
			break
		}
		off += n + end + 2
	}
	return total, modules
}

// parseDMIMemoryDevice is the size in bytes of an SMBIOS Memory Device
// structure (type 17): the Size word at 0Ch (bit 15 set: KiB, else MiB;
// 0: no module; FFFFh: unknown), or, when it is 7FFFh, the Extended Size
// dword at 1Ch (MiB). ok is false for anything else than a type 17
// structure with a known size.
func parseDMIMemoryDevice(raw []byte) (uint64, bool) {
	if len(raw) < 0x0e || raw[0] != 17 || int(raw[1]) < 0x0e || int(raw[1]) > len(raw) {
		return 0, false
	}
	size := binary.LittleEndian.Uint16(raw[0x0c:])
	switch {
	case size == 0xffff:
		return 0, false
	case size == 0x7fff:
		if raw[1] < 0x20 {
			return 0, false
		}
		return uint64(binary.LittleEndian.Uint32(raw[0x1c:])&0x7fffffff) << 20, true
	case size&0x8000 != 0:
		return uint64(size&0x7fff) << 10, true
	}
	return uint64(size) << 20, true
}

// parseMemTotal is /proc/meminfo's MemTotal in bytes.
func parseMemTotal(b []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != "MemTotal" {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			break
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil || n > 1<<53 {
			break
		}
		return n << 10, nil
	}
	return 0, fmt.Errorf("no MemTotal in kB in /proc/meminfo")
}

// sizeUnits are the multipliers parseSize knows: binary, whether written
// K, KB, KiB (the inventory writes "16GB" for 16 GiB).
var sizeUnits = map[string]uint{"K": 10, "M": 20, "G": 30, "T": 40, "P": 50}

// parseSize reads a size: a whole number of bytes, or one followed by K,
// M, G, T or P (with or without "i" and "B", in any case), all binary:
// "16GiB", "16G" and "16GB" are 16 × 2³⁰ bytes.
func parseSize(v string) (uint64, error) {
	s := strings.TrimSpace(v)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	digits, unit := s[:i], strings.ToUpper(strings.TrimSpace(s[i:]))
	shift, ok := uint(0), unit == "" || unit == "B"
	if !ok && len(unit) > 0 {
		// K, KB, KiB (and so on): the letter, then nothing, "B" or "IB".
		shift, ok = sizeUnits[unit[:1]]
		ok = ok && (unit[1:] == "" || unit[1:] == "B" || unit[1:] == "IB")
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("%q is not a size (write 16GiB, 512MiB or a number of bytes)", v)
	}
	if n > (1<<64-1)>>shift {
		return 0, fmt.Errorf("%q is too large", v)
	}
	return n << shift, nil
}

// formatSize writes n bytes in the largest binary unit that keeps one
// decimal: "15.6 GiB".
func formatSize(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	f, u := float64(n), 0
	for f >= 1024 && u < len(units)-1 {
		f /= 1024
		u++
	}
	if u == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", f, units[u])
}
