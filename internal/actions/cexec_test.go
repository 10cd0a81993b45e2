package actions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// busyboxRoot makes a filesystem for cexec: a static busybox at /busybox
// (as the install test's image has it) and /bin/busybox linking to it,
// plus the named empty directories.
func busyboxRoot(t *testing.T, dirs ...string) string {
	t.Helper()
	needRoot(t)
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		testtool.Need(t, "a static busybox at /bin/busybox (%v; Debian package busybox-static)", err)
	}
	top := t.TempDir()
	if err := os.WriteFile(filepath.Join(top, "busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(top, "bin"), 0o755)
	if err := os.Symlink("/busybox", filepath.Join(top, "bin", "busybox")); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if err := os.Mkdir(filepath.Join(top, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return top
}

func TestCexec(t *testing.T) {
	meta := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metadata" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, `{"instance":{"hostname":"rack1-node07"}}`)
	}))
	defer meta.Close()
	tests := []struct {
		name       string
		dirs       []string // made in the filesystem; default dev, proc, sys
		setup      func(t *testing.T, top string)
		env        map[string]string
		command    []string
		wantStdout []string
		wantStderr []string
		wantLine   string // in the action lines
		wantErr    string
		wantExit   *ExitError // Code, Signal and Last (sorted) compared
		wantFile   string     // a file the command made, inside the filesystem
	}{
		{
			name: "the install test's metadata fetch",
			env: map[string]string{"CHROOT": "y", "DEFAULT_INTERPRETER": "/busybox sh -c",
				"CMD_LINE": fmt.Sprintf("/busybox wget -q -O /metadata.json %s/metadata && /busybox cat /metadata.json", meta.URL)},
			wantStdout: []string{`{"instance":{"hostname":"rack1-node07"}}`},
			wantFile:   "metadata.json",
		},
		{
			name:       "stdout and stderr lines, exit status",
			env:        map[string]string{"CHROOT": "y", "DEFAULT_INTERPRETER": "/busybox sh -c", "CMD_LINE": "echo one; echo two >&2; echo three; exit 3"},
			wantStdout: []string{"one", "three"},
			wantStderr: []string{"two"},
			wantExit:   &ExitError{Code: 3, Last: []string{"one", "three", "two"}},
			wantErr:    "cexec: command exited with status 3; its last lines:",
		},
		{
			name:       "it is a chroot, with /dev, /proc and /sys bound",
			env:        map[string]string{"CHROOT": "y", "DEFAULT_INTERPRETER": "/busybox sh -c", "CMD_LINE": "ls /; test -e /proc/self/status && test -c /dev/null && test -d /sys/class && echo binds-ok"},
			wantStdout: []string{"bin", "busybox", "dev", "proc", "sys", "binds-ok"},
		},
		{
			name:       "missing /dev, /proc and /sys are made",
			dirs:       []string{"proc"},
			env:        map[string]string{"CHROOT": "y", "DEFAULT_INTERPRETER": "/busybox sh -c", "CMD_LINE": "test -c /dev/null && echo ok"},
			wantStdout: []string{"ok"},
			wantLine:   "made /sys in the chroot",
		},
		{
			name:       "the action's command when CMD_LINE is empty",
			env:        map[string]string{"CHROOT": "y"},
			command:    []string{"/busybox", "echo", "from the", "command"},
			wantStdout: []string{"from the command"},
		},
		{
			name:       "without an interpreter CMD_LINE is split on spaces",
			env:        map[string]string{"CHROOT": "y", "CMD_LINE": "/busybox  echo split   words"},
			wantStdout: []string{"split words"},
		},
		{
			name:       "a bare name is looked up in the chroot's PATH",
			env:        map[string]string{"CHROOT": "y", "CMD_LINE": "busybox echo via-path"},
			wantStdout: []string{"via-path"},
		},
		{
			name:    "not in the chroot",
			env:     map[string]string{"CHROOT": "y", "CMD_LINE": "grub-install /dev/sda"},
			wantErr: "grub-install: not found in the chroot's /usr/local/sbin:",
		},
		{
			name:       "the action's environment",
			env:        map[string]string{"CHROOT": "y", "DEFAULT_INTERPRETER": "/busybox sh -c", "CMD_LINE": `echo "$GREETING $PATH"`, "GREETING": "hello"},
			wantStdout: []string{"hello " + cexecPath},
		},
		{
			name:     "killed by a signal",
			env:      map[string]string{"CHROOT": "y", "DEFAULT_INTERPRETER": "/busybox sh -c", "CMD_LINE": "echo dying; kill -9 $$"},
			wantExit: &ExitError{Code: -1, Signal: syscall.SIGKILL, Last: []string{"dying"}},
			wantErr:  "command killed by signal 9 (killed)",
		},
		{
			name:       "long lines are split",
			env:        map[string]string{"CHROOT": "y", "DEFAULT_INTERPRETER": "/busybox sh -c", "CMD_LINE": `head -c 40000 /dev/zero | tr '\0' a; echo; echo end`},
			wantStdout: []string{strings.Repeat("a", maxLine), strings.Repeat("a", maxLine), strings.Repeat("a", 40000-2*maxLine), "end"},
		},
		{
			name:       "on the host, in the mounted filesystem",
			env:        map[string]string{"DEFAULT_INTERPRETER": "/bin/sh -c", "CMD_LINE": "ls; test -x ./busybox && echo host-ok"},
			wantStdout: []string{"bin", "busybox", "dev", "proc", "sys", "host-ok"},
			wantLine:   "on the host in ",
		},
		{
			name:       "what the command leaves running goes with it, so the filesystem unmounts",
			env:        map[string]string{"CHROOT": "y", "DEFAULT_INTERPRETER": "/busybox sh -c", "CMD_LINE": "/busybox sleep 1000 & echo bye"},
			wantStdout: []string{"bye"},
		},
		{
			name: "a /dev that is a symlink is not mounted over",
			dirs: []string{"proc", "sys"},
			setup: func(t *testing.T, top string) {
				os.Symlink(t.TempDir(), filepath.Join(top, "dev"))
			},
			env:     map[string]string{"CHROOT": "y", "CMD_LINE": "/busybox true"},
			wantErr: "/dev in the filesystem is a symbolic link, not a directory: refusing to bind /dev over it",
		},
		{name: "no command at all", env: map[string]string{"CHROOT": "y"}, wantErr: "CMD_LINE is empty and the action has no command"},
		{name: "CHROOT not a flag", env: map[string]string{"CHROOT": "maybe", "CMD_LINE": "x"}, wantErr: `CHROOT: "maybe" is not a boolean`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dirs := tc.dirs
			if dirs == nil {
				dirs = []string{"dev", "proc", "sys"}
			}
			top := busyboxRoot(t, dirs...)
			if tc.setup != nil {
				tc.setup(t, top)
			}
			m := newMachine(t)
			env := map[string]string{"BLOCK_DEVICE": top, "FS_TYPE": "vfat"}
			for k, v := range tc.env {
				env[k] = v
			}
			out := &recorder{}
			_, err := runAction(t, m.catalog(), "quay.io/tinkerbell/actions/cexec:v1.0.0", Spec{Env: env, Command: tc.command}, out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("cexec error = %v; want it to contain %q\n%s", err, tc.wantErr, out.text(""))
				}
			} else if err != nil {
				t.Fatalf("cexec: %v\n%s", err, out.text(""))
			}
			if tc.wantExit != nil {
				var ee *ExitError
				if !errors.As(err, &ee) {
					t.Fatalf("error %v is not an ExitError", err)
				}
				last := slices.Sorted(slices.Values(ee.Last))
				if ee.Code != tc.wantExit.Code || ee.Signal != tc.wantExit.Signal || !slices.Equal(last, tc.wantExit.Last) {
					t.Errorf("ExitError = %+v; want %+v", ee, tc.wantExit)
				}
			}
			if got := lines(out.text(StreamStdout)); tc.wantStdout != nil && !slices.Equal(got, tc.wantStdout) {
				t.Errorf("stdout lines = %q; want %q", got, tc.wantStdout)
			}
			if got := lines(out.text(StreamStderr)); tc.wantStderr != nil && !slices.Equal(got, tc.wantStderr) {
				t.Errorf("stderr lines = %q; want %q", got, tc.wantStderr)
			}
			if tc.wantLine != "" && !strings.Contains(out.text(StreamAction), tc.wantLine) {
				t.Errorf("action lines lack %q:\n%s", tc.wantLine, out.text(StreamAction))
			}
			if tc.wantFile != "" {
				if _, err := os.Stat(filepath.Join(top, tc.wantFile)); err != nil {
					t.Errorf("the command's file: %v", err)
				}
			}
			m.checkUnmounted()
		})
	}
}

func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// TestCexecCancel: the action's context ends the command (and its
// children: the process group), and everything is unmounted.
func TestCexecCancel(t *testing.T) {
	top := busyboxRoot(t, "dev", "proc", "sys")
	m := newMachine(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	out := &recorder{onLine: func(l outLine) {
		if l.stream == StreamStdout && l.text == "started" {
			cancel(errors.New("action timeout (30s)"))
		}
	}}
	r, _ := m.catalog().Lookup("cexec")
	_, err := r(ctx, Spec{Env: map[string]string{"BLOCK_DEVICE": top, "FS_TYPE": "ext4", "CHROOT": "y",
		"DEFAULT_INTERPRETER": "/busybox sh -c", "CMD_LINE": "/busybox sleep 1000 & echo started; wait"}}, out)
	if err == nil || !strings.Contains(err.Error(), "stopped: action timeout (30s)") {
		t.Fatalf("error = %v; want the context's cause", err)
	}
	m.checkUnmounted()
}
