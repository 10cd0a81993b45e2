package kmod

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestModprobeCommand(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantStatus int
		wantLoads  []string
		wantStderr string // contained; "" means empty
		fail       map[string]error
	}{
		{"kernel's request_module", []string{"-q", "--", "fs-vfat"}, 0, []string{"fat", "vfat"}, "", nil},
		{"by name, verbose", []string{"-v", "virtio-blk"}, 0, []string{"virtio_ring", "virtio", "virtio_blk"}, "modprobe: virtio-blk: loaded virtio_ring virtio virtio_blk", nil},
		{"several with -a", []string{"-a", "vfat", "crc16"}, 0, []string{"fat", "vfat", "crc16"}, "", nil},
		{"blacklist flag accepted", []string{"-b", "crc16"}, 0, []string{"crc16"}, "", nil},
		{"built-in", []string{"-q", "--", "crypto-sha256"}, 0, nil, "", nil},
		{"unknown, quiet", []string{"-q", "--", "fs-zfs"}, 1, nil, "", nil},
		{"unknown", []string{"net-pf-99"}, 1, nil, "modprobe: module net-pf-99: not found", nil},
		{"failing, quiet still says why", []string{"-q", "--", "crc16"}, 1, []string{"crc16"}, "modprobe: module crc16: Exec format error",
			map[string]error{"crc16": errors.New("Exec format error")}},
		{"a name after -- that looks like a flag", []string{"-q", "--", "-x"}, 1, nil, "", nil},
		{"parameters", []string{"vfat", "utf8=1"}, 2, nil, "module parameters are not supported (utf8=1)", nil},
		{"no name", []string{"-q"}, 2, nil, "no module named", nil},
		{"unknown option", []string{"-r", "vfat"}, 2, nil, "option -r is not supported", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := &recordingLoader{fail: tc.fail}
			var stderr bytes.Buffer
			status := ModprobeCommand(tc.args, ProberConfig{Index: openMini(t), Loader: l}, &stderr)
			if status != tc.wantStatus {
				t.Errorf("status %d; want %d (stderr %q)", status, tc.wantStatus, stderr.String())
			}
			if !reflect.DeepEqual(l.loaded(), tc.wantLoads) {
				t.Errorf("loaded %q; want %q", l.loaded(), tc.wantLoads)
			}
			if tc.wantStderr == "" && stderr.Len() > 0 || !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("stderr %q; want %q", stderr.String(), tc.wantStderr)
			}
		})
	}
}
