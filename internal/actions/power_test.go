package actions

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/anvilproj/anvil/internal/container"
	"github.com/anvilproj/anvil/internal/oci"
)

func TestLookup(t *testing.T) {
	c := New(Config{})
	known := []struct {
		image string
		name  string
	}{
		{image: "quay.io/tinkerbell/actions/image2disk:v1.0.0", name: "image2disk"},
		{image: "quay.io/tinkerbell-actions/image2disk:v1.0.0", name: "image2disk"},
		{image: "registry.local:5000/mirror/tinkerbell/writefile:latest", name: "writefile"},
		{image: "quay.io/tinkerbell/actions/cexec@sha256:0123abcd", name: "cexec"},
		{image: "quay.io/tinkerbell/actions/kexec:v1.0.0@sha256:0123abcd", name: "kexec"},
		{image: "quay.io/tinkerbell/actions/archive2disk", name: "archive2disk"},
		{image: "ghcr.io/jacobweinstock/waitdaemon:0.2.1", name: "waitdaemon"},
		{image: "reboot", name: "reboot"},
		{image: " poweroff ", name: "poweroff"},
		{image: "Quay.io/Tinkerbell/Actions/CEXEC:V1", name: "cexec"},
	}
	for _, tc := range known {
		t.Run(tc.image, func(t *testing.T) {
			if got := actionName(tc.image); got != tc.name {
				t.Errorf("actionName(%q) = %q; want %q", tc.image, got, tc.name)
			}
			if r, err := c.Lookup(tc.image); err != nil || r == nil {
				t.Errorf("Lookup(%q) = %v, %v; want a runner", tc.image, r, err)
			}
		})
	}
	for _, image := range []string{"quay.io/tinkerbell/actions/oci2disk:v1.0.0", "alpine:3.20", "", "quay.io/tinkerbell/actions/"} {
		t.Run("unknown "+image, func(t *testing.T) {
			r, err := c.Lookup(image)
			if r != nil || !errors.Is(err, ErrUnknownImage) {
				t.Fatalf("Lookup(%q) = %v, %v; want an error wrapping ErrUnknownImage", image, r, err)
			}
			for _, want := range []string{`"` + image + `"`, "native actions: archive2disk, cexec, commission-disk-read, commission-memory, commission-nic-link, commission-smart, image2disk, kexec, poweroff"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
}

// TestPower: reboot, poweroff and waitdaemon do nothing while they run;
// their Then syncs and calls reboot(2) with the right command.
func TestPower(t *testing.T) {
	tests := []struct {
		name    string
		image   string
		command []string
		env     map[string]string
		want    int
		wait    time.Duration // how long Then waits before reboot(2)
		wantErr string
	}{
		{name: "reboot", image: "reboot", want: unix.LINUX_REBOOT_CMD_RESTART},
		{name: "poweroff", image: "poweroff", want: unix.LINUX_REBOOT_CMD_POWER_OFF},
		{name: "waitdaemon reboot", image: "ghcr.io/jacobweinstock/waitdaemon:latest", command: []string{"reboot"}, want: unix.LINUX_REBOOT_CMD_RESTART, wait: 10 * time.Second},
		{name: "waitdaemon /sbin/poweroff", image: "ghcr.io/jacobweinstock/waitdaemon:0.2.1", command: []string{"/sbin/poweroff", "-f"}, env: map[string]string{"WAIT_SECONDS": "0"},
			want: unix.LINUX_REBOOT_CMD_POWER_OFF},
		{name: "waitdaemon reboot with an IMAGE", image: "ghcr.io/jacobweinstock/waitdaemon:latest", command: []string{"reboot"}, env: map[string]string{"IMAGE": "alpine", "WAIT_SECONDS": "3"},
			want: unix.LINUX_REBOOT_CMD_RESTART, wait: 3 * time.Second},
		{name: "waitdaemon other command, no IMAGE", image: "ghcr.io/jacobweinstock/waitdaemon:0.2.1", command: []string{"sh", "-c", "echo hi"},
			wantErr: `waitdaemon: IMAGE is required (the image to run once the action is reported), unless the command is [reboot] or [poweroff]; command ["sh" "-c" "echo hi"]`},
		{name: "waitdaemon no command, no IMAGE", image: "ghcr.io/jacobweinstock/waitdaemon:0.2.1", wantErr: "waitdaemon: IMAGE is required"},
		{name: "waitdaemon WAIT_SECONDS not a number", image: "ghcr.io/jacobweinstock/waitdaemon:0.2.1", command: []string{"reboot"}, env: map[string]string{"WAIT_SECONDS": "10s"},
			wantErr: `waitdaemon: WAIT_SECONDS: "10s" is not a whole number from 0 to 86400`},
		{name: "waitdaemon IMAGE waitdaemon", image: "ghcr.io/jacobweinstock/waitdaemon:0.2.1", env: map[string]string{"IMAGE": "ghcr.io/jacobweinstock/waitdaemon:0.2.1"},
			wantErr: "waitdaemon: IMAGE ghcr.io/jacobweinstock/waitdaemon:0.2.1 is waitdaemon itself"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t)
			res, err := runAction(t, m.catalog(), tc.image, Spec{Command: tc.command, Env: tc.env}, &recorder{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(m.power) != 0 || m.syncs != 0 {
				t.Fatalf("Run called Power %v (syncs %d); it must leave that to Then", m.power, m.syncs)
			}
			if res.Then == nil {
				t.Fatal("no Then")
			}
			before := m.clock.Now()
			if err := res.Then(); err != nil {
				t.Fatal(err)
			}
			if waited := m.clock.Now().Sub(before); waited < tc.wait || waited > tc.wait+time.Second {
				t.Errorf("Then waited %s; want %s", waited, tc.wait)
			}
			if len(m.power) != 1 || m.power[0] != tc.want || m.syncs != 1 {
				t.Errorf("Then called Power %#x (syncs %d); want [%#x] after 1 sync", m.power, m.syncs, tc.want)
			}
		})
	}
}

// TestPowerThenError: a reboot(2) that fails is Then's error.
func TestPowerThenError(t *testing.T) {
	m := newMachine(t)
	cfg := m.config()
	cfg.Power = func(int) error { return syscall.EPERM }
	r, _ := New(cfg).Lookup("reboot")
	res, err := r(t.Context(), Spec{}, &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Then(); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("Then() = %v; want EPERM", err)
	}
}

func TestKexec(t *testing.T) {
	needRoot(t)
	tests := []struct {
		name       string
		grub       string // /boot/grub/grub.cfg's contents (at grubPath if set), if not ""
		grubPath   string
		env        map[string]string
		kexecErr   error
		wantKernel string
		wantInitrd string // "" for none
		wantCmd    string
		wantFlags  int
		wantErr    string
	}{
		{
			name:       "kernel, initrd and command line",
			env:        map[string]string{"KERNEL_PATH": "/boot/vmlinuz", "INITRD_PATH": "/boot/initrd.img", "CMD_LINE": "root=/dev/sda2 ro console=ttyS0"},
			wantKernel: "KERNEL", wantInitrd: "INITRD", wantCmd: "root=/dev/sda2 ro console=ttyS0",
		},
		{
			name:       "no initrd",
			env:        map[string]string{"KERNEL_PATH": "boot/vmlinuz", "CMD_LINE": "root=/dev/sda2"},
			wantKernel: "KERNEL", wantCmd: "root=/dev/sda2", wantFlags: unix.KEXEC_FILE_NO_INITRAMFS,
		},
		{name: "missing kernel", env: map[string]string{"KERNEL_PATH": "/boot/nope"}, wantErr: "kexec: KERNEL_PATH: openat boot/nope: no such file or directory"},
		{name: "kernel through a link out of the filesystem", env: map[string]string{"KERNEL_PATH": "/escape/vmlinuz"}, wantErr: "path escapes from parent"},
		{
			name: "no KERNEL_PATH: grub.cfg's default entry, microcode and initrd as one",
			grub: "set default=\"1>0\"\nmenuentry 'Old' {\n linux /boot/old\n}\nsubmenu 'More' {\n  menuentry 'New' {\n\tlinux\t/boot/vmlinuz root=UUID=1234 ro console=ttyS0\n\tinitrd\t/boot/ucode.img /boot/initrd.img\n  }\n}\n",
			env:  map[string]string{}, wantKernel: "KERNEL", wantInitrd: "UCODEINITRD", wantCmd: "root=UUID=1234 ro console=ttyS0",
		},
		{
			name: "GRUBCFG_PATH, and CMD_LINE over grub.cfg's arguments; INITRD_PATH is grub.cfg's",
			grub: "menuentry 'Debian' {\n linux /boot/vmlinuz root=/dev/sda1\n initrd /boot/initrd.img\n}\n", grubPath: "/boot/grub2/grub.cfg",
			env:        map[string]string{"GRUBCFG_PATH": "/boot/grub2/grub.cfg", "CMD_LINE": "root=/dev/vda1", "INITRD_PATH": "/boot/nope"},
			wantKernel: "KERNEL", wantInitrd: "INITRD", wantCmd: "root=/dev/vda1",
		},
		{name: "no KERNEL_PATH, no grub.cfg", env: map[string]string{}, wantErr: "kexec: no KERNEL_PATH, and grub.cfg: openat boot/grub/grub.cfg: no such file or directory"},
		{name: "grub.cfg's kernel missing", grub: "menuentry 'Ubuntu' {\n linux /boot/vmlinuz-6.1 ro\n}\n", env: map[string]string{},
			wantErr: `kexec: /boot/grub/grub.cfg entry 0 ("Ubuntu"): linux: openat boot/vmlinuz-6.1: no such file or directory`},
		{name: "grub.cfg without an entry", grub: "set timeout=5\n", env: map[string]string{}, wantErr: "kexec: no KERNEL_PATH, and /boot/grub/grub.cfg: no menuentry"},
		{name: "kexec_file_load fails", env: map[string]string{"KERNEL_PATH": "/boot/vmlinuz"}, kexecErr: syscall.EPERM, wantErr: "kexec_file_load /boot/vmlinuz: operation not permitted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			top := t.TempDir()
			os.Mkdir(filepath.Join(top, "boot"), 0o755)
			os.WriteFile(filepath.Join(top, "boot/vmlinuz"), []byte("KERNEL"), 0o644)
			os.WriteFile(filepath.Join(top, "boot/initrd.img"), []byte("INITRD"), 0o644)
			os.WriteFile(filepath.Join(top, "boot/ucode.img"), []byte("UCODE"), 0o644)
			if tc.grub != "" {
				p := tc.grubPath
				if p == "" {
					p = "/boot/grub/grub.cfg"
				}
				os.MkdirAll(filepath.Dir(filepath.Join(top, p)), 0o755)
				os.WriteFile(filepath.Join(top, p), []byte(tc.grub), 0o644)
			}
			outside := t.TempDir()
			os.WriteFile(filepath.Join(outside, "vmlinuz"), []byte("HOST KERNEL"), 0o644)
			os.Symlink(outside, filepath.Join(top, "escape"))
			m := newMachine(t)
			m.kexecErr = tc.kexecErr
			env := map[string]string{"BLOCK_DEVICE": top, "FS_TYPE": "ext4"}
			for k, v := range tc.env {
				env[k] = v
			}
			res, err := runAction(t, m.catalog(), "quay.io/tinkerbell/actions/kexec:v1.0.0", Spec{Env: env}, &recorder{})
			m.checkUnmounted()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v; want %q", err, tc.wantErr)
				}
				if res.Then != nil {
					t.Error("a failed kexec returned a Then")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(m.kexecs) != 1 {
				t.Fatalf("%d kexec_file_load calls; want 1", len(m.kexecs))
			}
			k := m.kexecs[0]
			if string(k.kernel) != tc.wantKernel || string(k.initrd) != tc.wantInitrd || k.cmdline != tc.wantCmd || k.flags != tc.wantFlags {
				t.Errorf("kexec_file_load(kernel %q, initrd %q, %q, flags %#x); want (%q, %q, %q, %#x)",
					k.kernel, k.initrd, k.cmdline, k.flags, tc.wantKernel, tc.wantInitrd, tc.wantCmd, tc.wantFlags)
			}
			if len(m.power) != 0 {
				t.Fatalf("Run called Power %v", m.power)
			}
			if err := res.Then(); err != nil {
				t.Fatal(err)
			}
			if len(m.power) != 1 || m.power[0] != unix.LINUX_REBOOT_CMD_KEXEC || m.syncs != 1 {
				t.Errorf("Then called Power %#x (syncs %d); want [LINUX_REBOOT_CMD_KEXEC] after a sync", m.power, m.syncs)
			}
		})
	}
}

// TestImageNameForms: the three ways templates name an upstream action —
// quay.io/tinkerbell/actions/X (today's), quay.io/tinkerbell-actions/X
// (the older organisation, in the playground's and CAPT's older templates)
// and a bare X:v1.0.0 — are the same action: the same native runner for
// those Anvil implements, the container path for the rest.
func TestImageNameForms(t *testing.T) {
	on := New(Config{Images: &oci.Puller{}, Containers: &container.Runtime{}}) // Select only asks whether they are there
	forms := []string{"quay.io/tinkerbell/actions/%s:v1.0.0", "quay.io/tinkerbell-actions/%s:v1.0.0", "%s:v1.0.0"}
	native := []string{NameImage2Disk, NameArchive2Disk, NameWriteFile, NameCexec, NameKexec}
	for _, name := range native {
		want, err := on.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range forms {
			image := fmt.Sprintf(f, name)
			sel, err := on.Select(Spec{Image: image})
			if err != nil || sel.Path != PathNative || sel.Why != "native "+name {
				t.Errorf("Select(%q) = %s (%s), %v; want native %s", image, sel.Path, sel.Why, err, name)
				continue
			}
			if reflect.ValueOf(sel.Run).Pointer() != reflect.ValueOf(want).Pointer() {
				t.Errorf("Select(%q) runs another function than Lookup(%q)", image, name)
			}
		}
	}
	for _, name := range []string{"oci2disk", "qemuimg2disk", "rootio", "grub2disk", "syslinux", "slurp"} {
		for _, f := range forms {
			image := fmt.Sprintf(f, name)
			sel, err := on.Select(Spec{Image: image})
			if err != nil || sel.Path != PathContainer || sel.Why != "no native "+name {
				t.Errorf("Select(%q) = %s (%s), %v; want the container path (no native %s)", image, sel.Path, sel.Why, err, name)
			}
		}
	}
}
