// Package render owns turning a config template plus a machine's data into
// the bytes served to that machine: Go templates executed with the Hardware,
// its labels, inventory variables and generated secrets, then translated
// (Butane → Ignition) and validated for their format (Ignition's own
// validator, cloud-config and NoCloud meta-data as YAML). A broken template or
// an invalid result is an error and never yields bytes.
//
// It does not read the store and serves no HTTP routes itself beyond Handler,
// which asks a Finder (implemented by the boot policy) for a machine's
// config and renders it.
package render

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/tmplbudget"
)

// Formats a Config may have.
const (
	// FormatButane is a Butane config (any variant, e.g. flatcar or fcos),
	// translated to Ignition JSON and validated.
	FormatButane = "butane"
	// FormatIgnition is an Ignition JSON config, validated.
	FormatIgnition = "ignition"
	// FormatCloudConfig is cloud-init user-data or vendor-data in
	// cloud-config form: "#cloud-config" on the first line, then a YAML
	// mapping.
	FormatCloudConfig = "cloud-config"
	// FormatNoCloudMetaData is NoCloud meta-data: a YAML mapping
	// (instance-id, local-hostname, …).
	FormatNoCloudMetaData = "nocloud-meta-data"
	// FormatPlain is any text, served as rendered.
	FormatPlain = "plain"
)

// Formats lists every format Render accepts.
var Formats = []string{FormatButane, FormatIgnition, FormatCloudConfig, FormatNoCloudMetaData, FormatPlain}

// Size limits.
const (
	// MaxTemplateSize is the largest template Render accepts (1 MiB).
	MaxTemplateSize = 1 << 20
	// MaxOutputSize is the largest output Render produces (4 MiB), both
	// the executed template and the translated config.
	MaxOutputSize = 4 << 20
)

// Config is one named config template of a boot profile.
type Config struct {
	// Name names the config ("ignition", "user-data"); it appears in
	// errors and in template line numbers.
	Name string
	// Format is one of Formats.
	Format string
	// Template is Go text/template source.
	Template string
}

// Data is what a template is executed with: `.Hostname`, `.Vars.sshKey`,
// `.Labels.role`, `.Hardware.Spec…`, `{{ .ConfigURL "user-data" }}`.
type Data struct {
	// Hardware is the machine's Hardware; nil when there is none.
	Hardware *model.Hardware
	// Namespace is the Hardware's namespace: secrets are looked up in it.
	Namespace string
	// Name is the Hardware's name.
	Name string
	// Labels are the Hardware's labels.
	Labels map[string]string
	// Vars are the inventory variables of the machine (host and group
	// variables merged by the caller).
	Vars map[string]any
	// MAC is the MAC address the machine asked with, lower case with
	// colons ("52:54:00:12:34:56").
	MAC string
	// IP is the machine's address, if known.
	IP string
	// Hostname is the machine's hostname, if known.
	Hostname string
	// ServerURL is the base URL machines reach Anvil at
	// ("http://10.0.0.1:7080"), without a trailing slash.
	ServerURL string
}

// ConfigURL returns the URL the machine fetches its config name from:
// ServerURL/configs/MAC/name.
func (d Data) ConfigURL(name string) string {
	return strings.TrimSuffix(d.ServerURL, "/") + "/configs/" + url.PathEscape(d.MAC) + "/" + url.PathEscape(name)
}

// SecretSource gives templates their named secrets (`{{ secret "join" "kubeadm-token" }}`).
// Secret returns the value of the secret name of kind in namespace,
// generating and keeping it on first use; the same name with another kind is
// an error. internal/secrets.Store implements it.
type SecretSource interface {
	Secret(namespace, name, kind string) (string, error)
}

// Result is a rendered config.
type Result struct {
	// Body is the bytes to serve.
	Body []byte
	// ContentType is the Content-Type to serve Body with.
	ContentType string
	// Warnings are non-fatal problems Butane or Ignition reported.
	Warnings []Problem
}

// Problem is one error or warning, at a place in a document when known.
type Problem struct {
	// Line and Column are 1-based; 0 when unknown. For template errors they
	// are in the template; for Butane, Ignition and YAML errors they are in
	// the rendered document (which differs from the template where actions
	// expand to several lines).
	Line, Column int
	// Path is the logical location ("$.storage.files.0.path") when known.
	Path string
	// Message says what is wrong.
	Message string
	// Source is the text of the offending line of the document, when known.
	Source string
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "line %d", p.Line)
		if p.Column > 0 {
			fmt.Fprintf(&b, " col %d", p.Column)
		}
	}
	if p.Path != "" {
		if b.Len() > 0 {
			b.WriteString(" ")
		}
		b.WriteString("at " + p.Path)
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	if p.Source != "" {
		fmt.Fprintf(&b, " (%q)", p.Source)
	}
	return b.String()
}

// Error is a failed rendering: the config, the stage that failed and each
// problem found.
type Error struct {
	// Config is the config's name.
	Config string
	// Stage is what failed: "template", "execute", "budget" (the template
	// went over tmplbudget's limits), "butane", "ignition", "cloud-config",
	// "meta-data", "size", "format".
	Stage string
	// Problems are what is wrong, at least one.
	Problems []Problem
	// Err is the underlying error, if any.
	Err error
}

func (e *Error) Error() string {
	ps := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		ps[i] = p.String()
	}
	return fmt.Sprintf("render config %q: %s: %s", e.Config, e.Stage, strings.Join(ps, "; "))
}

func (e *Error) Unwrap() error { return e.Err }

// ErrTooLarge is returned (wrapped in *Error) when a template exceeds
// MaxTemplateSize or the config it translates to exceeds MaxOutputSize. (The
// executed template's own output is held to Budget: an *Error of stage
// "budget" wrapping tmplbudget.ErrExceeded.)
var ErrTooLarge = errors.New("size limit exceeded")

func newError(cfg Config, stage string, err error, ps ...Problem) *Error {
	if len(ps) == 0 {
		ps = []Problem{{Message: err.Error()}}
	}
	return &Error{Config: cfg.Name, Stage: stage, Problems: ps, Err: err}
}

// Render executes cfg's template with data and produces the config for its
// format: Butane is translated to Ignition JSON and validated with Ignition's
// validator, Ignition is validated, cloud-config and meta-data are checked as
// YAML mappings. secrets may be nil when the template uses no secret. On
// failure it returns an *Error and no bytes.
//
// The template runs under Budget (internal/tmplbudget) and stops when ctx
// ends; such a failure is an *Error of stage "budget" or "execute" whose Err
// matches tmplbudget.ErrExceeded or ctx's error.
func Render(ctx context.Context, cfg Config, data Data, secrets SecretSource) (Result, error) {
	ct, ok := contentTypes[cfg.Format]
	if !ok {
		return Result{}, newError(cfg, "format", fmt.Errorf("unknown format %q (want one of %s)", cfg.Format, strings.Join(Formats, ", ")))
	}
	if len(cfg.Template) > MaxTemplateSize {
		return Result{}, newError(cfg, "size", fmt.Errorf("template is %d bytes, more than the %d MiB limit: %w",
			len(cfg.Template), MaxTemplateSize>>20, ErrTooLarge))
	}
	out, err := execute(ctx, cfg, data, secrets)
	if err != nil {
		return Result{}, err
	}
	res := Result{ContentType: ct}
	switch cfg.Format {
	case FormatButane:
		res.Body, res.Warnings, err = butaneToIgnition(cfg, out)
	case FormatIgnition:
		res.Warnings, err = validateIgnition(cfg, out)
		res.Body = out
	case FormatCloudConfig:
		err = validateCloudConfig(cfg, out)
		res.Body = out
	case FormatNoCloudMetaData:
		err = validateYAMLMapping(cfg, "meta-data", out)
		res.Body = out
	case FormatPlain:
		res.Body = out
	}
	if err != nil {
		return Result{}, err
	}
	if len(res.Body) > MaxOutputSize {
		return Result{}, newError(cfg, "size", fmt.Errorf("output is %d bytes, more than the %d MiB limit: %w",
			len(res.Body), MaxOutputSize>>20, ErrTooLarge))
	}
	return res, nil
}

// contentTypes maps each format to the Content-Type it is served with.
var contentTypes = map[string]string{
	FormatButane:          "application/json",
	FormatIgnition:        "application/json",
	FormatCloudConfig:     "text/cloud-config; charset=utf-8",
	FormatNoCloudMetaData: "application/yaml",
	FormatPlain:           "text/plain; charset=utf-8",
}

// ContentType returns the Content-Type a config of format is served with,
// or "" for an unknown format.
func ContentType(format string) string { return contentTypes[format] }

// templateProblem turns a template error into a Problem with its line.
func templateProblem(err error, name string) Problem {
	line, col, msg, ok := tmplbudget.Position(err, name)
	if !ok {
		return Problem{Message: err.Error()}
	}
	return Problem{Line: line, Column: col, Message: msg}
}

// Budget bounds the execution of a config template: the default time,
// steps and depth, and MaxOutputSize of output.
var Budget = tmplbudget.Budget{Output: MaxOutputSize}

// execute parses and runs the template under Budget.
func execute(ctx context.Context, cfg Config, data Data, secrets SecretSource) ([]byte, error) {
	name := cfg.Name
	if name == "" {
		name = "config"
	}
	t, err := tmplbudget.Parse(name, cfg.Template, tmplbudget.Options{Budget: Budget, Sprig: true, Funcs: funcMap(data, secrets)})
	if err != nil {
		return nil, newError(cfg, stageOf(err, "template"), err, templateProblem(err, name))
	}
	out, err := t.Execute(ctx, data)
	if err != nil {
		return nil, newError(cfg, stageOf(err, "execute"), err, templateProblem(err, name))
	}
	return out, nil
}

// stageOf is "budget" for an error that went over the budget, else stage.
func stageOf(err error, stage string) string {
	if errors.Is(err, tmplbudget.ErrExceeded) {
		return "budget"
	}
	return stage
}
