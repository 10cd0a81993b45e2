package model

import (
	"fmt"
	"net/url"
	"path"
	"sort"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/anvilproj/anvil/internal/labels"
	"github.com/anvilproj/anvil/internal/tmplbudget"
	"github.com/anvilproj/anvil/internal/tmplwalk"
)

// BootProfile (anvil.dev/v1alpha1) boots a machine straight into an
// operating system — a kernel, initrds and a templated kernel command line —
// with named per-machine config templates (Ignition, cloud-config, …) that
// the machine fetches from /configs/<mac>/<name>. A Hardware gets a profile
// by spec.bootProfileRef or by the profile's label selector, when it has no
// active workflow (see internal/bootpolicy for the precedence).
type BootProfile struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       BootProfileSpec   `json:"spec,omitempty"`
	Status     BootProfileStatus `json:"status,omitempty"`
}

// BootProfileSpec is what a profile boots and which machines it applies to.
type BootProfileSpec struct {
	// Selector is a list of label selector terms in internal/labels'
	// syntax ("role=worker,site in (a,b)"). A Hardware matches when any
	// term matches its labels (OR across terms; AND within a term). Empty:
	// the profile applies only to Hardware that names it in
	// spec.bootProfileRef.
	Selector []string `json:"selector,omitempty"`
	// Priority breaks ties when several profiles' selectors match a
	// Hardware: the highest wins; equal highest priorities are a conflict.
	Priority int64 `json:"priority,omitempty"`
	// Kernel is an http(s) URL, or a path served by Anvil ("/assets/…"),
	// made absolute with the server's public HTTP base. Required.
	Kernel string `json:"kernel,omitempty"`
	// Initrds are loaded in order after the kernel; same forms as Kernel.
	Initrds []string `json:"initrds,omitempty"`
	// KernelArgs are Go templates (text/template) rendered per machine;
	// see internal/bootpolicy.ProfileData for what they can use. Each
	// rendered argument must be one kernel argument (no whitespace).
	KernelArgs []string `json:"kernelArgs,omitempty"`
	// Configs are the named config templates served to the machine at
	// /configs/<mac>/<name>. Names are path-safe (letters, digits, '.',
	// '-', '_').
	Configs map[string]BootConfig `json:"configs,omitempty"`
}

// BootConfig is one named config template of a profile.
type BootConfig struct {
	// Format is one of the ConfigFormat constants. Required.
	Format string `json:"format,omitempty"`
	// Template is a Go text/template rendered per machine.
	Template string `json:"template,omitempty"`
}

// BootProfileStatus is empty: a profile is configuration only.
type BootProfileStatus struct{}

// Config formats of BootConfig.Format.
const (
	ConfigButane          = "butane"            // Butane YAML, translated to Ignition JSON
	ConfigIgnition        = "ignition"          // Ignition JSON as it is
	ConfigCloudConfig     = "cloud-config"      // cloud-init user-data
	ConfigNoCloudMetaData = "nocloud-meta-data" // cloud-init NoCloud meta-data
	ConfigPlain           = "plain"             // any text, rendered only
)

// ConfigFormats lists the valid BootConfig formats.
var ConfigFormats = []string{ConfigButane, ConfigIgnition, ConfigCloudConfig, ConfigNoCloudMetaData, ConfigPlain}

// SelectorTerms parses the profile's selector terms, in order. The error
// names the first term that does not parse.
func (b *BootProfile) SelectorTerms() ([]labels.Selector, error) {
	out := make([]labels.Selector, 0, len(b.Spec.Selector))
	for i, t := range b.Spec.Selector {
		s, err := parseSelectorTerm(t)
		if err != nil {
			return nil, fmt.Errorf("spec.selector[%d]: %w", i, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func parseSelectorTerm(t string) (labels.Selector, error) {
	if strings.TrimSpace(t) == "" {
		return nil, fmt.Errorf("empty selector term (it would match every Hardware; write the labels it needs, e.g. role=worker)")
	}
	s, err := labels.Parse(t)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", t, err)
	}
	return s, nil
}

func validateBootProfile(b *BootProfile, add addFunc) {
	s := &b.Spec
	for i, t := range s.Selector {
		if _, err := parseSelectorTerm(t); err != nil {
			add(fmt.Sprintf("spec.selector[%d]", i), "%v", err)
		}
	}
	if s.Kernel == "" {
		add("spec.kernel", "missing kernel (an http(s) URL, or a path served by Anvil such as /assets/flatcar/vmlinuz)")
	} else if msg := checkBootURL(s.Kernel); msg != "" {
		add("spec.kernel", "%s", msg)
	}
	for i, u := range s.Initrds {
		if msg := checkBootURL(u); msg != "" {
			add(fmt.Sprintf("spec.initrds[%d]", i), "%s", msg)
		}
	}
	for i, a := range s.KernelArgs {
		p := fmt.Sprintf("spec.kernelArgs[%d]", i)
		if strings.TrimSpace(a) == "" {
			add(p, "empty kernel argument")
			continue
		}
		t, err := template.New(p).Option("missingkey=error").Parse(a)
		if err != nil {
			add(p, "template: %v", strings.TrimPrefix(err.Error(), "template: "))
			continue
		}
		// The renderer (internal/bootpolicy) refuses the same, per
		// machine; here it is refused before anything boots.
		for _, tt := range t.Templates() {
			if err := tmplbudget.CheckRanges(tt.Tree, tmplbudget.Budget{}); err != nil {
				add(p, "%v", strings.TrimPrefix(err.Error(), "template: "))
			}
		}
		for _, name := range configURLNames(t.Tree) {
			if err := s.CheckConfigURL(name); err != nil {
				add(p, "%v", err)
			}
		}
		if !strings.Contains(a, "{{") && strings.ContainsFunc(a, isSpaceOrControl) {
			add(p, "%q contains whitespace; each entry is one kernel argument (split it)", a)
		}
	}
	for _, name := range sortedKeys(s.Configs) {
		c := s.Configs[name]
		p := "spec.configs." + name
		if !validConfigName(name) {
			add(p, "config name %q is not path-safe (letters, digits, '.', '-' and '_', not starting with '.', at most 128)", name)
		}
		switch c.Format {
		case "":
			add(p+".format", "missing format (want one of %s)", strings.Join(ConfigFormats, ", "))
		case ConfigButane, ConfigIgnition, ConfigCloudConfig, ConfigNoCloudMetaData, ConfigPlain:
		default:
			add(p+".format", "unknown format %q (want one of %s)", c.Format, strings.Join(ConfigFormats, ", "))
		}
		// Syntax, and ranges that could never finish, only: the functions
		// (sprig's, secret, toJSON, …) belong to the renderer
		// (internal/render), which checks them, and the rest, per machine
		// when the config is fetched.
		t := parse.New(name)
		t.Mode = parse.SkipFuncCheck
		trees := map[string]*parse.Tree{}
		if _, err := t.Parse(c.Template, "", "", trees); err != nil {
			add(p+".template", "template: %v", strings.TrimPrefix(err.Error(), "template: "))
			continue
		}
		for _, n := range sortedKeys(trees) {
			if err := tmplbudget.CheckRanges(trees[n], tmplbudget.Budget{}); err != nil {
				add(p+".template", "%v", strings.TrimPrefix(err.Error(), "template: "))
			}
		}
	}
}

// checkBootURL returns why s is neither an http(s) URL nor an absolute
// server path, or "".
func checkBootURL(s string) string {
	if strings.ContainsFunc(s, isSpaceOrControl) {
		return fmt.Sprintf("%q contains whitespace or a control character", s)
	}
	if strings.HasPrefix(s, "/") {
		if path.Clean(s) != s || strings.HasSuffix(s, "/") {
			return fmt.Sprintf("%q is not a clean absolute path (no '..', '.', '//' or trailing '/')", s)
		}
		return ""
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Sprintf("%q: want an http:// or https:// URL, or a path served by Anvil starting with '/'", s)
	}
	return ""
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }

// validConfigName reports whether s can be the last element of a URL path
// and a file name: letters, digits, '.', '-' and '_', not starting with '.'.
func validConfigName(s string) bool {
	if s == "" || s[0] == '.' || len(s) > 128 {
		return false
	}
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// CheckConfigURL reports whether a kernel argument may ask for the URL of
// config name: one of the profile's configs, or "" for the directory that
// holds them all (<ServerURL>/configs/<MAC>/, the prefix cloud-init's
// NoCloud datasource appends meta-data and user-data to). It is checked at
// apply time and again when the argument is rendered.
func (s *BootProfileSpec) CheckConfigURL(name string) error {
	if _, ok := s.Configs[name]; ok || name == "" {
		return nil
	}
	return fmt.Errorf("ConfigURL %q: the profile has no config of that name (have: %s)", name, strings.Join(sortedKeys(s.Configs), ", "))
}

// configURLNames returns the string literals passed to .ConfigURL in t, so
// that a kernel argument naming a config the profile lacks is refused at
// apply time instead of at boot.
func configURLNames(t *parse.Tree) []string {
	if t == nil {
		return nil
	}
	var out []string
	tmplwalk.Walk(t.Root, func(n parse.Node) bool {
		if c, ok := n.(*parse.CommandNode); ok && len(c.Args) >= 2 {
			if f, ok := c.Args[0].(*parse.FieldNode); ok && len(f.Ident) == 1 && f.Ident[0] == "ConfigURL" {
				if s, ok := c.Args[1].(*parse.StringNode); ok {
					out = append(out, s.Text)
				}
			}
		}
		return true
	})
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
