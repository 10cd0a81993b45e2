package actions

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strings"
)

// smart asks each disk for its health: an NVMe disk for its SMART / Health
// Information log page (the admin Get Log Page command), any other disk
// for ATA SMART RETURN STATUS through SG_IO (ATA PASS-THROUGH (16)), which
// SATA disks answer (also behind a SAS HBA). A disk that answers neither
// (virtio, a SAS disk, a RAID volume) is "unsupported", not a failure.
//
// Environment: DISKS (default: every disk), SMART_MAX_MEDIA_ERRORS (NVMe;
// default 0: any media error fails), SMART_MAX_PERCENTAGE_USED (NVMe;
// default 100: a disk at its rated endurance fails).
func (c *Catalog) smart(ctx context.Context, s Spec, out Output) (Result, error) {
	e := env(s.Env)
	maxMedia, err := e.integer("SMART_MAX_MEDIA_ERRORS", 0, 0, 1<<62)
	if err != nil {
		return c.configFailure(NameCommissionSmart, err)
	}
	maxUsed, err := e.integer("SMART_MAX_PERCENTAGE_USED", 100, 1, 255)
	if err != nil {
		return c.configFailure(NameCommissionSmart, err)
	}
	disks, err := c.disks(ctx, e)
	if err != nil {
		return c.configFailure(NameCommissionSmart, err)
	}
	checks := make([]check, len(disks))
	for i, d := range disks {
		checks[i] = check{name: "smart/" + d, run: func() (string, string, map[string]string) {
			return c.smartDisk(d, uint64(maxMedia), int(maxUsed))
		}}
	}
	return c.runChecks(ctx, NameCommissionSmart, checks, out)
}

// smartDisk checks one disk.
func (c *Catalog) smartDisk(name string, maxMedia uint64, maxUsed int) (string, string, map[string]string) {
	f, err := os.Open(c.sysPath("/dev/" + name))
	if err != nil {
		return CheckFailed, fmt.Sprintf("open: %v", err), nil
	}
	defer f.Close()
	if strings.HasPrefix(name, "nvme") {
		return c.smartNVMe(f, maxMedia, maxUsed)
	}
	return c.smartATA(f)
}

// nvmeLogSMART is the SMART / Health Information log page's ID and size.
const (
	nvmeLogSMART     = 0x02
	nvmeLogSMARTSize = 512
)

// nvmeHealth is what smart reads of the NVMe SMART / Health Information
// log page (NVMe base specification, Get Log Page, log identifier 02h).
type nvmeHealth struct {
	criticalWarning  uint8
	temperatureK     uint16 // composite temperature, kelvin
	availableSpare   uint8  // percent
	spareThreshold   uint8  // percent
	percentageUsed   uint8  // of the rated endurance; may exceed 100
	powerOnHours     *big.Int
	mediaErrors      *big.Int
	errorLogEntries  *big.Int
	unsafeShutdowns  *big.Int
	dataUnitsRead    *big.Int // thousands of 512-byte units
	dataUnitsWritten *big.Int
}

// parseNVMeHealth reads the log page. Its 16-byte counters are
// little-endian 128-bit integers.
func parseNVMeHealth(b []byte) (nvmeHealth, error) {
	if len(b) < nvmeLogSMARTSize {
		return nvmeHealth{}, fmt.Errorf("SMART log page is %d bytes, want %d", len(b), nvmeLogSMARTSize)
	}
	u128 := func(off int) *big.Int {
		be := make([]byte, 16)
		for i := range 16 {
			be[15-i] = b[off+i]
		}
		return new(big.Int).SetBytes(be)
	}
	return nvmeHealth{
		criticalWarning:  b[0],
		temperatureK:     binary.LittleEndian.Uint16(b[1:3]),
		availableSpare:   b[3],
		spareThreshold:   b[4],
		percentageUsed:   b[5],
		dataUnitsRead:    u128(32),
		dataUnitsWritten: u128(48),
		powerOnHours:     u128(128),
		unsafeShutdowns:  u128(144),
		mediaErrors:      u128(160),
		errorLogEntries:  u128(176),
	}, nil
}

// nvmeCriticalWarnings names the bits of the critical warning byte.
var nvmeCriticalWarnings = []string{
	"available spare below its threshold",
	"temperature outside its thresholds",
	"reliability degraded by media or internal errors",
	"media placed in read-only mode",
	"volatile memory backup device failed",
	"persistent memory region read-only or unreliable",
}

// warnings names the set bits of the critical warning.
func (h nvmeHealth) warnings() []string {
	var w []string
	for i, name := range nvmeCriticalWarnings {
		if h.criticalWarning&(1<<i) != 0 {
			w = append(w, name)
		}
	}
	if h.criticalWarning>>len(nvmeCriticalWarnings) != 0 {
		w = append(w, fmt.Sprintf("reserved bits 0x%02x", h.criticalWarning&^(1<<len(nvmeCriticalWarnings)-1)))
	}
	return w
}

// smartNVMe reads and judges an NVMe disk's SMART log page.
func (c *Catalog) smartNVMe(f *os.File, maxMedia uint64, maxUsed int) (string, string, map[string]string) {
	buf := make([]byte, nvmeLogSMARTSize)
	if err := c.cfg.NVMeLog(f, nvmeLogSMART, buf); err != nil {
		if errors.Is(err, errNotSupported) {
			return CheckUnsupported, fmt.Sprintf("the NVMe admin command is not supported here: %v", err), nil
		}
		return CheckFailed, fmt.Sprintf("NVMe Get Log Page (SMART): %v", err), nil
	}
	h, err := parseNVMeHealth(buf)
	if err != nil {
		return CheckFailed, err.Error(), nil
	}
	v := values("protocol", "nvme", "criticalWarning", fmt.Sprintf("0x%02x", h.criticalWarning),
		"temperatureCelsius", int(h.temperatureK)-273, "availableSparePercent", h.availableSpare,
		"availableSpareThresholdPercent", h.spareThreshold, "percentageUsed", h.percentageUsed,
		"mediaErrors", h.mediaErrors, "errorLogEntries", h.errorLogEntries, "powerOnHours", h.powerOnHours,
		"unsafeShutdowns", h.unsafeShutdowns, "dataUnitsRead", h.dataUnitsRead, "dataUnitsWritten", h.dataUnitsWritten)
	var bad []string
	if w := h.warnings(); len(w) > 0 {
		bad = append(bad, fmt.Sprintf("critical warning 0x%02x (%s)", h.criticalWarning, strings.Join(w, ", ")))
	}
	if h.mediaErrors.Cmp(new(big.Int).SetUint64(maxMedia)) > 0 {
		bad = append(bad, fmt.Sprintf("%s media errors (at most %d allowed: SMART_MAX_MEDIA_ERRORS)", h.mediaErrors, maxMedia))
	}
	if int(h.percentageUsed) >= maxUsed {
		bad = append(bad, fmt.Sprintf("%d%% of its rated endurance used (fails at %d%%: SMART_MAX_PERCENTAGE_USED)", h.percentageUsed, maxUsed))
	}
	if len(bad) > 0 {
		return CheckFailed, strings.Join(bad, "; "), v
	}
	return CheckPassed, fmt.Sprintf("NVMe health: no critical warning, %s media errors, %d%% used, %d°C",
		h.mediaErrors, h.percentageUsed, int(h.temperatureK)-273), v
}

// ataSMARTReturnStatus is the ATA PASS-THROUGH (16) command block of ATA
// SMART RETURN STATUS (SAT; ATA command B0h, feature DAh): non-data, with
// CK_COND set so that the device's registers come back in the sense data.
var ataSMARTReturnStatus = []byte{
	0x85,       // ATA PASS-THROUGH (16)
	3 << 1,     // protocol: non-data
	1 << 5,     // CK_COND: return the registers
	0x00, 0xda, // features: SMART RETURN STATUS
	0x00, 0x00, // count
	0x00, 0x00, // LBA low
	0x00, 0x4f, // LBA mid
	0x00, 0xc2, // LBA high
	0x00, // device
	0xb0, // command: SMART
	0x00, // control
}

// SMART RETURN STATUS's answers, in LBA mid and high.
const (
	ataSMARTOKMid, ataSMARTOKHigh     = 0x4f, 0xc2
	ataSMARTFailMid, ataSMARTFailHigh = 0xf4, 0x2c
)

// ataStatus is what a SMART RETURN STATUS answered.
type ataStatus int

const (
	ataNoAnswer   ataStatus = iota // no ATA registers in the sense data: not an ATA device
	ataHealthy                     // 4Fh C2h
	ataThreshold                   // F4h 2Ch: a threshold was exceeded
	ataUnexpected                  // registers, but neither answer
)

// parseATAStatus reads LBA mid and high from the sense data of an ATA
// PASS-THROUGH with CK_COND: in the ATA Status Return descriptor (09h) of
// descriptor-format sense data, or in the command-specific information of
// fixed-format sense data (ASC/ASCQ 00h/1Dh, ATA PASS THROUGH INFORMATION
// AVAILABLE), as SAT lays them out.
func parseATAStatus(sense []byte) (st ataStatus, mid, high byte) {
	if len(sense) < 8 {
		return ataNoAnswer, 0, 0
	}
	switch sense[0] & 0x7f {
	case 0x72, 0x73: // descriptor format
		end := min(len(sense), 8+int(sense[7]))
		for off := 8; off+2 <= end; {
			code, n := sense[off], int(sense[off+1])
			if code == 0x09 && n >= 0x0c && off+14 <= end {
				mid, high = sense[off+9], sense[off+11]
				return judgeATA(mid, high), mid, high
			}
			off += 2 + n
		}
	case 0x70, 0x71: // fixed format
		if len(sense) >= 14 && sense[12] == 0x00 && sense[13] == 0x1d {
			mid, high = sense[10], sense[11]
			return judgeATA(mid, high), mid, high
		}
	}
	return ataNoAnswer, 0, 0
}

func judgeATA(mid, high byte) ataStatus {
	switch {
	case mid == ataSMARTOKMid && high == ataSMARTOKHigh:
		return ataHealthy
	case mid == ataSMARTFailMid && high == ataSMARTFailHigh:
		return ataThreshold
	}
	return ataUnexpected
}

// smartATA sends SMART RETURN STATUS and judges the answer.
func (c *Catalog) smartATA(f *os.File) (string, string, map[string]string) {
	sense := make([]byte, 64)
	n, err := c.cfg.SGIO(f, ataSMARTReturnStatus, sense)
	if errors.Is(err, errNotSupported) {
		return CheckUnsupported, fmt.Sprintf("neither NVMe nor SCSI (SG_IO: %v)", err), nil
	}
	if err != nil {
		return CheckFailed, fmt.Sprintf("SG_IO ATA PASS-THROUGH: %v", err), nil
	}
	st, mid, high := parseATAStatus(sense[:min(max(n, 0), len(sense))])
	v := values("protocol", "ata", "lbaMid", fmt.Sprintf("0x%02x", mid), "lbaHigh", fmt.Sprintf("0x%02x", high))
	switch st {
	case ataHealthy:
		return CheckPassed, "ATA SMART RETURN STATUS: healthy", v
	case ataThreshold:
		return CheckFailed, "ATA SMART RETURN STATUS: a threshold was exceeded (the disk predicts its failure)", v
	case ataUnexpected:
		return CheckFailed, fmt.Sprintf("ATA SMART RETURN STATUS answered %02xh %02xh, neither healthy (4Fh C2h) nor failing (F4h 2Ch)", mid, high), v
	}
	return CheckUnsupported, "no ATA answer to SMART RETURN STATUS (not an ATA disk: SAS, a RAID volume, or SMART is off)", values("protocol", "scsi")
}
