package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/inventory"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/model"
)

func newImportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import inventory FILE",
		Short: "Create or update objects from another tool's description of the machines",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return errors.New("import needs what to import: anvil import inventory FILE")
		},
	}
	cmd.AddCommand(newImportInventoryCmd())
	return cmd
}

func newImportInventoryCmd() *cobra.Command {
	var namespace string
	var dryRun, allowPXE bool
	cmd := &cobra.Command{
		Use:   "inventory FILE|-",
		Short: "Create or update one Hardware per host of an Ansible YAML inventory",
		Long: `Import inventory reads an Ansible-style YAML inventory (all: with vars, children
and hosts) and applies one Hardware per host, named after the host, all in one
all-or-nothing apply: importing the same file again changes nothing.

Host variables mac (required), ip, netmask, gateway, hostname, domain, disk and
disks fill the Hardware's spec. Other scalar variables that make valid labels
become labels (role=worker); each group the host is in becomes the label
group.anvil.dev/<group>: "true"; every variable not in the spec is kept in the
annotation anvil.dev/inventory-vars (JSON) for templates. Host vars override
child groups' vars, which override parents' and all's, as in Ansible.

--dry-run stores nothing and shows, for each host, whether its Hardware would be
created, configured or unchanged, and the fields a configure would change.
See docs/inventory.md.`,
		Example: `  anvil import inventory hosts.yaml --dry-run
  anvil import inventory hosts.yaml -n lab
  anvil import inventory hosts.yaml --allow-pxe=false`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return importInventory(cmd, args[0], inventory.Options{Namespace: namespace, AllowPXE: allowPXE}, dryRun)
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", model.DefaultNamespace, "namespace of the Hardware")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "store nothing; show what would be created or changed, field by field")
	cmd.Flags().BoolVar(&allowPXE, "allow-pxe", true, "set every interface's netboot.allowPXE to this")
	return cmd
}

func importInventory(cmd *cobra.Command, path string, opts inventory.Options, dryRun bool) error {
	data, err := readInput(cmd, path, inventory.MaxBytes)
	if err != nil {
		return err
	}
	res, err := inventory.Convert(path, data, opts)
	if err != nil {
		return &ExitError{Code: 1, Err: err}
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
	}
	if len(res.Hardware) == 0 {
		return &ExitError{Code: 1, Err: fmt.Errorf("%s: no hosts in the inventory", path)}
	}
	manifest, err := manifestOf(res.Hardware)
	if err != nil {
		return err
	}
	c, err := newClients(cmd)
	if err != nil {
		return err
	}
	if err := checkMACsElsewhere(cmd, c, res.Hardware); err != nil {
		return err
	}
	resp, err := c.manifests.Apply(ctx(cmd), connect.NewRequest(&v1.ApplyRequest{
		Source: path, Content: manifest, DryRun: dryRun,
	}))
	if err != nil {
		return c.explain(err)
	}
	for _, w := range resp.Msg.GetWarnings() {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
	}
	byName := map[string]*model.Hardware{}
	for _, hw := range res.Hardware {
		byName[hw.Name] = hw
	}
	suffix := ""
	if dryRun {
		suffix = " (dry run)"
	}
	out := cmd.OutOrStdout()
	for _, o := range resp.Msg.GetObjects() {
		fmt.Fprintf(out, "%s/%s %s%s\n", strings.ToLower(o.GetKind()), o.GetName(), o.GetAction(), suffix)
		want := byName[o.GetName()]
		if !dryRun || o.GetAction() != "configured" || want == nil {
			continue
		}
		cur, err := c.ops(model.KindHardware).get(ctx(cmd), o.GetNamespace(), o.GetName())
		if err != nil {
			return c.explain(err)
		}
		changes, err := diffObjects(cur, want)
		if err != nil {
			return err
		}
		for _, ch := range changes {
			fmt.Fprintf(out, "  %s\n", ch)
		}
	}
	return nil
}

// manifestOf renders objects as one multi-document YAML manifest, what
// ManifestService.Apply takes.
func manifestOf(hws []*model.Hardware) (string, error) {
	var b strings.Builder
	for _, hw := range hws {
		j, err := json.Marshal(hw)
		if err != nil {
			return "", err
		}
		y, err := yaml.JSONToYAML(j)
		if err != nil {
			return "", err
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.String(), nil
}

// checkMACsElsewhere refuses an import that would give a MAC to a second
// Hardware: one already on the server under another name or namespace.
// DHCP answers a MAC with one Hardware, so which would win is a guess.
func checkMACsElsewhere(cmd *cobra.Command, c *clients, hws []*model.Hardware) error {
	owner := map[macaddr.MAC]string{} // MAC -> namespace/name importing it
	for _, hw := range hws {
		for _, m := range hw.MACs() {
			owner[m] = hw.Key()
		}
	}
	list := c.ops(model.KindHardware).list
	existing, err := list(ctx(cmd), &v1.ListRequest{}) // MACs are unique across namespaces
	if connect.CodeOf(err) == connect.CodePermissionDenied && len(hws) > 0 {
		// A token for one organisation sees its own namespace only.
		existing, err = list(ctx(cmd), &v1.ListRequest{Namespace: hws[0].Namespace})
	}
	if err != nil {
		return c.explain(err)
	}
	var msgs []string
	for _, o := range existing {
		hw, ok := o.(*model.Hardware)
		if !ok {
			continue
		}
		for _, m := range hw.MACs() {
			if key, taken := owner[m]; taken && key != hw.Key() {
				msgs = append(msgs, fmt.Sprintf("%s: mac %s is already Hardware %s's (delete or change that one first)", key, m, hw.Key()))
			}
		}
	}
	if len(msgs) > 0 {
		sort.Strings(msgs)
		return &ExitError{Code: 1, Err: errors.New(strings.Join(msgs, "\n"))}
	}
	return nil
}

// diffObjects lists the fields an apply of want would change in cur — the
// labels, annotations and spec, as apply compares them — one line each:
// "path: old → new". The inventory-vars annotation is compared variable by
// variable.
func diffObjects(cur, want model.Object) ([]string, error) {
	a, err := desiredFields(cur)
	if err != nil {
		return nil, err
	}
	b, err := desiredFields(want)
	if err != nil {
		return nil, err
	}
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var out []string
	for _, k := range sortedStrings(keys) {
		av, aok := a[k]
		bv, bok := b[k]
		if aok && bok && reflect.DeepEqual(av, bv) {
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s → %s", k, showValue(av, aok), showValue(bv, bok)))
	}
	return out, nil
}

func sortedStrings(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func showValue(v any, ok bool) string {
	if !ok {
		return "(none)"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// desiredFields flattens an object's labels, annotations and spec to
// leaf paths ("spec.interfaces[0].dhcp.ip.address") and their values.
func desiredFields(o model.Object) (map[string]any, error) {
	meta := o.GetObjectMeta()
	raw, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Spec any `json:"spec"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	out := map[string]any{}
	for k, v := range meta.Labels {
		out["metadata.labels"+mapKey(k)] = v
	}
	for k, v := range meta.Annotations {
		var vars map[string]any
		if k == inventory.VarsAnnotation && json.Unmarshal([]byte(v), &vars) == nil {
			flatten(out, "metadata.annotations"+mapKey(k), vars)
			continue
		}
		out["metadata.annotations"+mapKey(k)] = v
	}
	flatten(out, "spec", doc.Spec)
	return out, nil
}

// mapKey is how a path names a map entry: ".role", or
// `["group.anvil.dev/workers"]` for keys that are not plain words.
func mapKey(k string) string {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Sprintf("[%q]", k)
		}
	}
	return "." + k
}

// flatten adds v's leaves under path to out; empty maps and lists are
// leaves.
func flatten(out map[string]any, path string, v any) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			out[path] = x
		}
		for k, e := range x {
			flatten(out, path+mapKey(k), e)
		}
	case []any:
		if len(x) == 0 {
			out[path] = x
		}
		for i, e := range x {
			flatten(out, fmt.Sprintf("%s[%d]", path, i), e)
		}
	default:
		out[path] = v
	}
}
