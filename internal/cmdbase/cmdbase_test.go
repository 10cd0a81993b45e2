package cmdbase

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/spf13/cobra"
)

// execute runs root with args, its output captured, and returns the exit
// code and what it wrote.
func execute(root *cobra.Command, args ...string) (int, string) {
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	return ExitCode(root, root.Execute()), out.String()
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantCode int
		wantOut  string
	}{
		{"success", nil, 0, ""},
		{"plain error", errors.New("no such hardware"), 1, "tool: no such hardware\n"},
		{"exit error", &ExitError{Code: 3, Err: errors.New("workflow w ended FAILED")}, 3, "tool: workflow w ended FAILED\n"},
		{"wrapped exit error", fmt.Errorf("watch: %w", &ExitError{Code: 4, Err: errors.New("timed out")}), 4, "tool: watch: timed out\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := NewRoot("tool", "a test tool")
			root.AddCommand(&cobra.Command{Use: "do", RunE: func(*cobra.Command, []string) error { return tc.err }})
			code, out := execute(root, "do")
			if code != tc.wantCode || out != tc.wantOut {
				t.Errorf("exit code %d, output %q; want %d, %q", code, out, tc.wantCode, tc.wantOut)
			}
		})
	}
}

func TestLoggingFlags(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--log-format", "json", "--log-level", "debug"}, ""},
		{[]string{"--log-format", "TEXT", "--log-level", "warn"}, ""},
		{[]string{"--log-level", "loud"}, `--log-level "loud": want debug, info, warn or error`},
		{[]string{"--log-format", "xml"}, `--log-format "xml": want text or json`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			ran := false
			root := NewRoot("tool", "a test tool")
			root.AddCommand(&cobra.Command{Use: "do", Run: func(*cobra.Command, []string) { ran = true }})
			code, out := execute(root, append([]string{"do"}, tc.args...)...)
			if tc.wantErr == "" {
				if code != 0 || !ran {
					t.Errorf("exit code %d, ran %v, output %q; want 0 and the command run", code, ran, out)
				}
				return
			}
			if code != 1 || ran || !strings.Contains(out, tc.wantErr) {
				t.Errorf("exit code %d, ran %v, output %q; want 1, not run, and %q", code, ran, out, tc.wantErr)
			}
		})
	}
}

func TestVersionCmd(t *testing.T) {
	root := NewRoot("tool", "a test tool")
	root.AddCommand(NewVersionCmd())
	code, out := execute(root, "version")
	if code != 0 || !strings.HasPrefix(out, "anvil ") {
		t.Errorf("version: exit code %d, output %q; want 0 and the version line", code, out)
	}
}

// TestJournaldLogs: with standard error the journal stream systemd named
// in JOURNAL_STREAM, each line carries its priority as journald's <N>
// prefix and no time (the journal stamps it); with the variable naming
// another stream, lines are as on a terminal, with the time. SetLogLevel
// changes the level of the logger made.
func TestJournaldLogs(t *testing.T) {
	defer slog.SetDefault(slog.Default())
	for _, tc := range []struct {
		name    string
		journal bool
		format  string
		want    *regexp.Regexp
	}{
		{"journal text", true, "text", regexp.MustCompile(`^<6>level=INFO msg=hello n=1\n<4>level=WARN msg=careful\n<7>level=DEBUG msg=detail\n$`)},
		{"journal json", true, "json", regexp.MustCompile(`^<6>\{"level":"INFO","msg":"hello","n":1\}\n<4>\{"level":"WARN","msg":"careful"\}\n<7>\{"level":"DEBUG","msg":"detail"\}\n$`)},
		{"terminal", false, "text", regexp.MustCompile(`^time=\S+ level=INFO msg=hello n=1\ntime=\S+ level=WARN msg=careful\ntime=\S+ level=DEBUG msg=detail\n$`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			stderr, err := os.Create(filepath.Join(dir, "stderr"))
			if err != nil {
				t.Fatal(err)
			}
			defer stderr.Close()
			named := stderr
			if !tc.journal {
				// JOURNAL_STREAM inherited from a service whose stderr
				// this is not.
				if named, err = os.Create(filepath.Join(dir, "journal")); err != nil {
					t.Fatal(err)
				}
				defer named.Close()
			}
			fi, err := named.Stat()
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			t.Setenv("JOURNAL_STREAM", fmt.Sprintf("%d:%d", st.Dev, st.Ino))
			root := NewRoot("tool", "a test tool")
			root.AddCommand(&cobra.Command{Use: "do", RunE: func(*cobra.Command, []string) error {
				slog.Info("hello", "n", 1)
				slog.Warn("careful")
				slog.Debug("hidden") // at info
				if err := SetLogLevel("debug"); err != nil {
					return err
				}
				slog.Debug("detail")
				return SetLogLevel("loud")
			}})
			root.SetErr(stderr)
			root.SetArgs([]string{"do", "--log-format", tc.format})
			if err := root.Execute(); err == nil || !strings.Contains(err.Error(), `--log-level "loud"`) {
				t.Errorf("SetLogLevel(loud) = %v; want refused", err)
			}
			b, err := os.ReadFile(stderr.Name())
			if err != nil {
				t.Fatal(err)
			}
			if !tc.want.Match(b) {
				t.Errorf("got\n%s\nwant %s", b, tc.want)
			}
		})
	}
}
