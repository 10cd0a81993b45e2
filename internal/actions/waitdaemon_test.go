package actions

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const waitdaemonImage = "ghcr.io/jacobweinstock/waitdaemon:latest"

// TestWaitDaemonKexec is the playground's last action: waitdaemon with
// IMAGE kexec and no command. The kernel is loaded while the action runs
// (so a missing one fails it); Then waits WAIT_SECONDS and jumps into it.
func TestWaitDaemonKexec(t *testing.T) {
	needRoot(t)
	top := t.TempDir()
	os.Mkdir(filepath.Join(top, "boot"), 0o755)
	os.WriteFile(filepath.Join(top, "boot/vmlinuz"), []byte("KERNEL"), 0o644)
	for _, image := range []string{"quay.io/tinkerbell/actions/kexec:v1.0.0", "quay.io/tinkerbell-actions/kexec:v1.0.0"} {
		t.Run(image, func(t *testing.T) {
			m := newMachine(t)
			out := &recorder{}
			res, err := runAction(t, m.catalog(), waitdaemonImage, Spec{Pid: "host", Env: map[string]string{
				"BLOCK_DEVICE": top, "FS_TYPE": "ext4", "KERNEL_PATH": "/boot/vmlinuz", "CMD_LINE": "root=/dev/vda1",
				"IMAGE": image, "WAIT_SECONDS": "7",
			}}, out)
			if err != nil {
				t.Fatal(err)
			}
			m.checkUnmounted()
			if len(m.kexecs) != 1 || string(m.kexecs[0].kernel) != "KERNEL" || m.kexecs[0].cmdline != "root=/dev/vda1" {
				t.Fatalf("kexec_file_load calls while the action ran: %+v; want the kernel loaded", m.kexecs)
			}
			if len(m.power) != 0 {
				t.Fatalf("the action called reboot(2) %#x before it was reported", m.power)
			}
			before := m.clock.Now()
			if err := res.Then(); err != nil {
				t.Fatal(err)
			}
			if waited := m.clock.Now().Sub(before); waited < 7*time.Second || waited > 8*time.Second {
				t.Errorf("Then waited %s; want WAIT_SECONDS (7s)", waited)
			}
			if !slices.Equal(m.power, []int{unix.LINUX_REBOOT_CMD_KEXEC}) {
				t.Errorf("Then called reboot(2) %#x; want LINUX_REBOOT_CMD_KEXEC", m.power)
			}
			if want := image + " natively 7s after the action is reported"; !strings.Contains(out.text(StreamAction), want) {
				t.Errorf("the action's lines lack %q:\n%s", want, out.text(StreamAction))
			}
		})
	}
}

// TestWaitDaemonNativeImageFails: a native IMAGE that can only fail
// (kexec of a missing kernel) fails the action, naming IMAGE and the
// cause, and leaves nothing to run.
func TestWaitDaemonNativeImageFails(t *testing.T) {
	needRoot(t)
	top := t.TempDir()
	m := newMachine(t)
	res, err := runAction(t, m.catalog(), waitdaemonImage, Spec{Env: map[string]string{
		"BLOCK_DEVICE": top, "FS_TYPE": "ext4", "KERNEL_PATH": "/boot/vmlinuz", "IMAGE": "quay.io/tinkerbell/actions/kexec:v1.0.0",
	}}, &recorder{})
	m.checkUnmounted()
	want := "waitdaemon: IMAGE quay.io/tinkerbell/actions/kexec:v1.0.0: kexec: KERNEL_PATH: openat boot/vmlinuz: no such file or directory"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v; want %q", err, want)
	}
	if res.Then != nil {
		t.Error("a failed waitdaemon returned a Then")
	}
}

// TestWaitDaemonWritefileAfterReport: a native IMAGE that changes the
// disk (writefile) runs only in Then, after the wait, as upstream runs it
// after the report.
func TestWaitDaemonWritefileAfterReport(t *testing.T) {
	needRoot(t)
	top := t.TempDir()
	m := newMachine(t)
	res, err := runAction(t, m.catalog(), waitdaemonImage, Spec{Env: map[string]string{
		"DEST_DISK": top, "FS_TYPE": "ext4", "DEST_PATH": "/etc/motd", "CONTENTS": "installed\n",
		"IMAGE": "writefile:v1.0.0", "WAIT_SECONDS": "0",
	}}, &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(top, "etc/motd")); !os.IsNotExist(err) {
		t.Fatalf("the file exists before Then (stat: %v)", err)
	}
	if err := res.Then(); err != nil {
		t.Fatal(err)
	}
	m.checkUnmounted()
	if b, err := os.ReadFile(filepath.Join(top, "etc/motd")); err != nil || string(b) != "installed\n" {
		t.Errorf("/etc/motd = %q, %v; want what writefile writes", b, err)
	}
}

func TestNamedImages(t *testing.T) {
	tests := []struct {
		image string
		env   map[string]string
		want  []string
	}{
		{image: "quay.io/tinkerbell/actions/image2disk:v1.0.0", env: map[string]string{"IMAGE": "x"}, want: []string{"quay.io/tinkerbell/actions/image2disk:v1.0.0"}},
		{image: waitdaemonImage, env: map[string]string{"IMAGE": " quay.io/tinkerbell/actions/kexec:v1.0.0 "},
			want: []string{waitdaemonImage, "quay.io/tinkerbell/actions/kexec:v1.0.0"}},
		{image: waitdaemonImage, want: []string{waitdaemonImage}},
		{image: waitdaemonImage, env: map[string]string{"IMAGE": waitdaemonImage}, want: []string{waitdaemonImage}},
	}
	for _, tc := range tests {
		if got := NamedImages(tc.image, tc.env); !slices.Equal(got, tc.want) {
			t.Errorf("NamedImages(%q, %v) = %q; want %q", tc.image, tc.env, got, tc.want)
		}
	}
}
