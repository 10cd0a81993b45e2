package actions

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fileState is what a test expects of a path in the fixture filesystem.
type fileState struct {
	path     string // inside the filesystem
	dir      bool
	mode     fs.FileMode
	uid, gid int
	contents string // files only
}

func checkFile(t *testing.T, top string, want fileState) {
	t.Helper()
	p := filepath.Join(top, want.path)
	st, err := os.Lstat(p)
	if err != nil {
		t.Errorf("%s: %v", want.path, err)
		return
	}
	if st.IsDir() != want.dir {
		t.Errorf("%s: directory %v; want %v", want.path, st.IsDir(), want.dir)
	}
	if got := st.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky); got != want.mode {
		t.Errorf("%s: mode %v; want %v", want.path, got, want.mode)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if int(sys.Uid) != want.uid || int(sys.Gid) != want.gid {
		t.Errorf("%s: owner %d:%d; want %d:%d", want.path, sys.Uid, sys.Gid, want.uid, want.gid)
	}
	if !want.dir {
		b, _ := os.ReadFile(p)
		if string(b) != want.contents {
			t.Errorf("%s: contents %q; want %q", want.path, b, want.contents)
		}
	}
}

func TestWriteFile(t *testing.T) {
	needRoot(t)
	tests := []struct {
		name    string
		setup   func(t *testing.T, top string)
		env     map[string]string
		want    []fileState
		absent  []string // paths that must not exist afterwards
		wantErr string
	}{
		{
			name: "defaults: root-owned 0644 in an existing directory",
			setup: func(t *testing.T, top string) {
				os.Mkdir(filepath.Join(top, "etc"), 0o700)
			},
			env: map[string]string{"DEST_PATH": "/etc/hostname", "CONTENTS": "rack1-node07\n"},
			want: []fileState{
				{path: "etc/hostname", mode: 0o644, contents: "rack1-node07\n"},
				{path: "etc", dir: true, mode: 0o700}, // existing: untouched
			},
		},
		{
			name: "owner, mode and new parents with DIRMODE",
			env: map[string]string{"DEST_PATH": "/home/ops/.ssh/authorized_keys", "CONTENTS": "ssh-ed25519 AAAA ops\n",
				"UID": "1000", "GID": "1001", "MODE": "0600", "DIRMODE": "0700"},
			want: []fileState{
				{path: "home/ops/.ssh/authorized_keys", mode: 0o600, uid: 1000, gid: 1001, contents: "ssh-ed25519 AAAA ops\n"},
				{path: "home/ops/.ssh", dir: true, mode: 0o700, uid: 1000, gid: 1001},
				{path: "home", dir: true, mode: 0o700, uid: 1000, gid: 1001},
			},
		},
		{
			name: "DIRMODE is not cut by the umask; setuid MODE is kept",
			env:  map[string]string{"DEST_PATH": "/opt/tool/run", "CONTENTS": "#!/bin/sh\n", "MODE": "4755", "DIRMODE": "0777"},
			want: []fileState{
				{path: "opt/tool/run", mode: 0o755 | fs.ModeSetuid, contents: "#!/bin/sh\n"},
				{path: "opt/tool", dir: true, mode: 0o777},
			},
		},
		{
			name: "replaces a file and a symlink at the path, never writing through it",
			setup: func(t *testing.T, top string) {
				os.WriteFile(filepath.Join(top, "target"), []byte("keep"), 0o644)
				os.Symlink("target", filepath.Join(top, "link"))
				os.WriteFile(filepath.Join(top, "old"), []byte("old contents that are longer"), 0o600)
			},
			env: map[string]string{"DEST_PATH": "link", "CONTENTS": "new", "MODE": "640"},
			want: []fileState{
				{path: "link", mode: 0o640, contents: "new"},
				{path: "target", mode: 0o644, contents: "keep"},
			},
		},
		{
			name: "empty CONTENTS makes an empty file; .. stays inside",
			env:  map[string]string{"DEST_PATH": "/../../etc/../empty", "CONTENTS": ""},
			want: []fileState{{path: "empty", mode: 0o644, contents: ""}},
		},
		{
			name: "a parent symlink out of the filesystem is refused",
			setup: func(t *testing.T, top string) {
				os.Symlink(t.TempDir(), filepath.Join(top, "escape"))
			},
			env:     map[string]string{"DEST_PATH": "/escape/pwned", "CONTENTS": "x"},
			wantErr: "path escapes from parent",
		},
		{
			name: "DEST_PATH is a directory",
			setup: func(t *testing.T, top string) {
				os.MkdirAll(filepath.Join(top, "etc/hostname"), 0o755)
			},
			env:     map[string]string{"DEST_PATH": "/etc/hostname", "CONTENTS": "x"},
			wantErr: "writefile: /etc/hostname on ",
		},
		{
			name: "a parent is a file",
			setup: func(t *testing.T, top string) {
				os.WriteFile(filepath.Join(top, "etc"), nil, 0o644)
			},
			env:     map[string]string{"DEST_PATH": "/etc/hostname", "CONTENTS": "x"},
			wantErr: "etc is not a directory",
		},
		{name: "bad MODE", env: map[string]string{"DEST_PATH": "/x", "MODE": "rw-r--r--"}, wantErr: `MODE: "rw-r--r--" is not an octal file mode`},
		{name: "MODE too big", env: map[string]string{"DEST_PATH": "/x", "MODE": "17777"}, wantErr: `MODE: "17777" is not an octal file mode`},
		{name: "bad UID", env: map[string]string{"DEST_PATH": "/x", "UID": "root"}, wantErr: `UID: "root" is not a whole number`},
		{name: "no DEST_PATH", env: map[string]string{"CONTENTS": "x"}, wantErr: "writefile: DEST_PATH is required"},
		{name: "DEST_PATH is the top", env: map[string]string{"DEST_PATH": "/"}, wantErr: `DEST_PATH: "/" names the filesystem's top directory`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t)
			top := t.TempDir()
			if tc.setup != nil {
				tc.setup(t, top)
			}
			env := map[string]string{"DEST_DISK": top, "FS_TYPE": "ext4"}
			for k, v := range tc.env {
				env[k] = v
			}
			out := &recorder{}
			res, err := runAction(t, m.catalog(), "quay.io/tinkerbell/actions/writefile:v1.0.0", Spec{Env: env}, out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("writefile error = %v; want it to contain %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("writefile: %v", err)
			}
			if res.Then != nil {
				t.Error("writefile returned a Then")
			}
			for _, w := range tc.want {
				checkFile(t, top, w)
			}
			m.checkUnmounted()
			if len(m.mounts) > 0 && (m.mounts[0].fstype != "ext4" || m.mounts[0].source != top) {
				t.Errorf("mounted %+v; want %s as ext4", m.mounts[0], top)
			}
			if len(m.mounts) != len(m.unmounts) {
				t.Errorf("%d mounts, %d unmounts", len(m.mounts), len(m.unmounts))
			}
			// No temporary file is left next to the destination.
			filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
				if strings.Contains(d.Name(), ".anvil-") {
					t.Errorf("temporary file left: %s", p)
				}
				return nil
			})
		})
	}
}

// TestWriteFileMissingDevice: a partition that never appears is an error
// after DeviceWait on the action's clock, and nothing is mounted.
func TestWriteFileMissingDevice(t *testing.T) {
	m := newMachine(t)
	start := m.clock.Now()
	_, err := runAction(t, m.catalog(), "writefile", Spec{Env: map[string]string{
		"DEST_DISK": "/dev/anvil-test-no-such-disk1", "FS_TYPE": "ext4", "DEST_PATH": "/etc/hostname",
	}}, &recorder{})
	want := "/dev/anvil-test-no-such-disk1 does not exist (waited 10s for it to appear)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %v; want %q", err, want)
	}
	if waited := m.clock.Now().Sub(start); waited < DefaultDeviceWait {
		t.Errorf("gave up after %s on the clock; want %s", waited, DefaultDeviceWait)
	}
	if len(m.mounts) != 0 {
		t.Errorf("mounted %v", m.mounts)
	}
}

// TestWriteFileMountFails: a mount error is reported with the device and
// type, and the mount point is removed.
func TestWriteFileMountFails(t *testing.T) {
	m := newMachine(t)
	cfg := m.config()
	cfg.Mount = func(source, target, fstype string, flags uintptr, data string) error { return syscall.ENODEV }
	r, _ := New(cfg).Lookup("writefile")
	_, err := r(t.Context(), Spec{Env: map[string]string{"DEST_DISK": t.TempDir(), "FS_TYPE": "btrfs", "DEST_PATH": "/x"}}, &recorder{})
	if err == nil || !strings.Contains(err.Error(), "(btrfs) at "+m.tmp) || !strings.Contains(err.Error(), "no such device") {
		t.Fatalf("error = %v; want the mount's failure with the type", err)
	}
	m.checkUnmounted()
}
