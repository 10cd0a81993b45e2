package cmdbase

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
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
