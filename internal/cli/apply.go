package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
)

func newApplyCmd() *cobra.Command {
	var files []string
	var recursive, dryRun, strict bool
	cmd := &cobra.Command{
		Use:   "apply -f FILE|DIR|-",
		Short: "Create or update Hardware, Templates, Workflows and BootProfiles from YAML manifests",
		Long: `Apply sends each manifest file to the server, which validates every document
and stores all of them or none (apply is all-or-nothing per file). A directory
applies its *.yaml, *.yml and *.json files in name order; "-" reads standard input.

A file holds YAML (or JSON) documents separated by "---": objects, kubectl's
"kind: List" exports, or top-level lists of objects (Tinkerbell's file
backend). Hardware and Workflow may be tinkerbell.org/v1alpha1 or v1alpha2.

What applies but can only fail later is printed as "warning: ..." on standard
error: an action image that is neither native nor resolvable under the
server's registry settings, a boot mode that needs a BMC the Hardware lacks, a
field Anvil ignores. --strict refuses such a file instead, storing none of it.`,
		Example: `  anvil apply -f examples/
  anvil apply -f hardware.yaml -f workflow.yaml
  cat node.yaml | anvil apply -f -
  kubectl get hardware,templates,workflows -o yaml | anvil apply --strict -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return errors.New("apply needs -f FILE, -f DIR or -f -")
			}
			var paths []string
			for _, f := range files {
				p, err := expandManifestPaths(f, recursive)
				if err != nil {
					return err
				}
				paths = append(paths, p...)
			}
			c, err := newClients(cmd)
			if err != nil {
				return err
			}
			failed := 0
			for _, p := range paths {
				if err := applyFile(cmd, c, p, dryRun, strict); err != nil {
					var unreachable bool
					err, unreachable = c.explain(err), isNetError(err)
					fmt.Fprintf(cmd.ErrOrStderr(), "%s\n", err)
					if unreachable {
						return &ExitError{Code: 1, Err: errors.New("nothing applied")}
					}
					failed++
				}
			}
			if failed > 0 {
				return &ExitError{Code: 1, Err: fmt.Errorf("%d of %d files not applied", failed, len(paths))}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "manifest file, directory, or - for standard input (repeatable)")
	cmd.Flags().BoolVarP(&recursive, "recursive", "R", false, "descend into subdirectories")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "validate and show what would change; store nothing")
	cmd.Flags().BoolVar(&strict, "strict", false, "refuse a file that has any warning (unreachable image, missing BMC, ignored field), storing none of it")
	return cmd
}

// expandManifestPaths turns a -f argument into the files it names.
func expandManifestPaths(arg string, recursive bool) ([]string, error) {
	if arg == "-" {
		return []string{"-"}, nil
	}
	st, err := os.Stat(arg)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{arg}, nil
	}
	var out []string
	err = filepath.WalkDir(arg, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != arg && !recursive {
				return filepath.SkipDir
			}
			return nil
		}
		switch strings.ToLower(filepath.Ext(p)) {
		case ".yaml", ".yml", ".json":
			out = append(out, p)
		}
		return nil
	})
	sort.Strings(out)
	if err == nil && len(out) == 0 {
		err = fmt.Errorf("%s: no *.yaml, *.yml or *.json files", arg)
	}
	return out, err
}

// readInput reads the file at path, or standard input for "-" (up to one
// byte over limit, so the parser can say the input is too large; all of
// it when limit is negative).
func readInput(cmd *cobra.Command, path string, limit int64) ([]byte, error) {
	if path == "-" {
		if limit < 0 {
			return io.ReadAll(cmd.InOrStdin())
		}
		return io.ReadAll(io.LimitReader(cmd.InOrStdin(), limit+1))
	}
	return os.ReadFile(path)
}

func applyFile(cmd *cobra.Command, c *clients, path string, dryRun, strict bool) error {
	// No limit of the CLI's own: the server's request cap (--max-request-mib)
	// is the one limit on a manifest, and its refusal says so.
	data, err := readInput(cmd, path, -1)
	if err != nil {
		return err
	}
	resp, err := c.manifests.Apply(ctx(cmd), connect.NewRequest(&v1.ApplyRequest{
		Source: path, Content: string(data), DryRun: dryRun, Strict: strict,
	}))
	if err != nil {
		return err
	}
	for _, w := range resp.Msg.GetWarnings() {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
	}
	suffix := ""
	if dryRun {
		suffix = " (dry run)"
	}
	for _, o := range resp.Msg.GetObjects() {
		fmt.Fprintf(cmd.OutOrStdout(), "%s/%s %s%s\n", strings.ToLower(o.GetKind()), o.GetName(), o.GetAction(), suffix)
	}
	return nil
}
