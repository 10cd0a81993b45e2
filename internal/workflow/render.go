package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"text/template"

	yamlv3 "gopkg.in/yaml.v3"
	k8syaml "sigs.k8s.io/yaml"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/tmplbudget"
	"github.com/anvilproj/anvil/internal/tmplstatic"
)

// MaxRenderedSize caps the output of a template rendering (256 KiB): the
// output budget of Budget.
const MaxRenderedSize = 256 << 10

// Budget bounds one rendering of a workflow Template (see internal/tmplbudget):
// the default time, steps and depth, and MaxRenderedSize of output.
var Budget = tmplbudget.Budget{Output: MaxRenderedSize}

// LegacyHardware is the template data Tinkerbell exposes as `.Hardware`:
// disks as plain device paths, plus the interfaces, user data and metadata.
// Status is Anvil's addition: `.Hardware.Status.Attributes` is the agent's
// inventory with Go field names, e.g. `.Hardware.Status.Attributes.CPU.TotalCores`.
type LegacyHardware struct {
	Disks      []string
	Interfaces []model.Interface
	UserData   string
	Metadata   model.HardwareMetadata
	VendorData string
	Status     model.HardwareStatus
}

// funcs are the functions templates may call besides Sprig's hermetic set
// (bounded by internal/tmplbudget): formatPartition, netmaskToPrefixLength,
// toYaml and fromYaml.
func funcs() template.FuncMap {
	return template.FuncMap{
		"formatPartition":       formatPartition,
		"netmaskToPrefixLength": netmaskToPrefixLength,
		"toYaml":                toYaml,
		"fromYaml":              fromYaml,
	}
}

// Parsed templates are kept for the next render of the same text: parsing,
// above all handing text/template the ~200 functions (it reflects over
// each), is most of a render's cost, and a fleet's workflows share a few
// templates, each rendered twice (admission checks its workers, the engine
// renders it). A tmplbudget.Template binds its functions per execution on
// a clone, so renders share one parse.
const (
	maxParsedTemplates  = 64        // past it the cache is emptied, never grows
	maxParsedTemplateSz = 256 << 10 // larger texts are parsed each time
)

type parsedKey struct {
	name, text string
	budget     tmplbudget.Budget
}

var parsedTemplates = struct {
	sync.Mutex
	m map[parsedKey]*tmplbudget.Template
}{m: map[parsedKey]*tmplbudget.Template{}}

// parseTemplate parses a Template's data with the workflow functions,
// instrumented for b, from the cache when it was parsed before.
func parseTemplate(name, data string, b tmplbudget.Budget) (*tmplbudget.Template, error) {
	key := parsedKey{name, data, b}
	parsedTemplates.Lock()
	t := parsedTemplates.m[key]
	parsedTemplates.Unlock()
	if t != nil {
		return t, nil
	}
	t, err := tmplbudget.Parse(name, data, tmplbudget.Options{Budget: b, Sprig: true, Funcs: funcs()})
	if err != nil || len(data) > maxParsedTemplateSz {
		return t, err
	}
	parsedTemplates.Lock()
	if len(parsedTemplates.m) >= maxParsedTemplates {
		clear(parsedTemplates.m)
	}
	parsedTemplates.m[key] = t
	parsedTemplates.Unlock()
	return t, nil
}

// formatPartition returns the device path of partition n of dev: "/dev/sda",1
// → "/dev/sda1"; a device whose name ends in a digit gets a "p" separator
// ("/dev/nvme0n1",1 → "/dev/nvme0n1p1"; "/dev/mmcblk0",2 → "/dev/mmcblk0p2").
func formatPartition(dev string, n any) (string, error) {
	var num int64
	switch v := n.(type) {
	case int:
		num = int64(v)
	case int64:
		num = v
	case int32:
		num = int64(v)
	case uint:
		num = int64(v)
	case uint64:
		num = int64(v)
	case float64:
		num = int64(v)
		if float64(num) != v {
			return "", fmt.Errorf("formatPartition: partition number %v is not an integer", v)
		}
	case string:
		i, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return "", fmt.Errorf("formatPartition: partition number %q is not an integer", v)
		}
		num = i
	default:
		return "", fmt.Errorf("formatPartition: partition number of type %T", n)
	}
	if num < 1 {
		return "", fmt.Errorf("formatPartition: partition number %d must be at least 1", num)
	}
	if dev == "" {
		return "", errors.New("formatPartition: empty device")
	}
	if last := dev[len(dev)-1]; last >= '0' && last <= '9' {
		return dev + "p" + strconv.FormatInt(num, 10), nil
	}
	return dev + strconv.FormatInt(num, 10), nil
}

// netmaskToPrefixLength converts a dotted IPv4 netmask to its prefix length
// ("255.255.255.0" → 24). A non-contiguous mask is an error.
func netmaskToPrefixLength(mask string) (int, error) {
	ip := net.ParseIP(strings.TrimSpace(mask))
	if ip == nil || ip.To4() == nil {
		return 0, fmt.Errorf("netmaskToPrefixLength: %q is not an IPv4 netmask", mask)
	}
	ones, bits := net.IPMask(ip.To4()).Size()
	if bits == 0 {
		return 0, fmt.Errorf("netmaskToPrefixLength: %q is not a contiguous netmask", mask)
	}
	return ones, nil
}

// toYaml renders v as YAML (through its JSON encoding, so JSON field names
// apply), without the trailing newline.
func toYaml(v any) (string, error) {
	b, err := k8syaml.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("toYaml: %w", err)
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// fromYaml parses a YAML mapping.
func fromYaml(s string) (map[string]any, error) {
	m := map[string]any{}
	if err := k8syaml.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("fromYaml: %w", err)
	}
	return m, nil
}

// TemplateData builds the data a template is executed with: every key of the
// workflow's hardwareMap at the top level, `.Hardware` (LegacyHardware) and
// `.hardware` (hardwareData). hw may be nil.
func TemplateData(wf *model.Workflow, hw *model.Hardware) (map[string]any, error) {
	data := map[string]any{}
	if wf != nil {
		for k, v := range wf.Spec.HardwareMap {
			if k == "hardware" || k == "Hardware" {
				return nil, fmt.Errorf("hardwareMap key %q is reserved (it would hide the Hardware data)", k)
			}
			data[k] = v
		}
	}
	legacy := LegacyHardware{}
	generic := map[string]any{}
	if hw != nil {
		for _, d := range hw.Spec.Disks {
			legacy.Disks = append(legacy.Disks, d.Device)
		}
		legacy.Interfaces = hw.Spec.Interfaces
		if hw.Spec.UserData != nil {
			legacy.UserData = *hw.Spec.UserData
		}
		if hw.Spec.VendorData != nil {
			legacy.VendorData = *hw.Spec.VendorData
		}
		if hw.Spec.Metadata != nil {
			legacy.Metadata = *hw.Spec.Metadata
		}
		legacy.Status = hw.Status
		var err error
		if generic, err = hardwareData(hw); err != nil {
			return nil, err
		}
	}
	data["Hardware"] = legacy
	data["hardware"] = generic
	return data, nil
}

// hardwareData is `.hardware`: the whole Hardware with its JSON names, as
// Tinkerbell renders it (`.hardware.spec.metadata.instance.hostname`,
// `.hardware.status.attributes.cpu.totalCores`), and, for templates
// written against Anvil before it had the whole object, the spec's fields
// at the top level too (`.hardware.disks`, `.hardware.metadata.instance`).
// The two meet only at "metadata", where the object's metadata (name,
// labels, …) and the spec's (instance, facility, …) have no key in common:
// both are merged there, the spec's winning should one ever appear in both.
func hardwareData(hw *model.Hardware) (map[string]any, error) {
	whole, err := jsonMap(hw)
	if err != nil {
		return nil, fmt.Errorf("encode hardware: %w", err)
	}
	spec, _ := whole["spec"].(map[string]any)
	for k, v := range spec {
		if k != "metadata" {
			whole[k] = v
			continue
		}
		merged, _ := whole["metadata"].(map[string]any)
		if merged == nil {
			merged = map[string]any{}
		}
		specMeta, _ := v.(map[string]any)
		merged = maps.Clone(merged)
		maps.Copy(merged, specMeta)
		whole["metadata"] = merged
	}
	return whole, nil
}

// jsonMap is v as a generic map with its JSON field names.
func jsonMap(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// Render executes the Template's data against the workflow's hardwareMap and
// the Hardware (nil when the workflow has none), under Budget and until ctx
// ends, parses the result as a workflow definition and validates it. Errors
// carry the template engine's own message so the workflow can show it; one
// that went over the budget matches tmplbudget.ErrExceeded, one stopped by
// ctx matches ctx's error.
func Render(ctx context.Context, tmpl *model.Template, wf *model.Workflow, hw *model.Hardware) (*model.WorkflowDefinition, error) {
	return render(ctx, Budget, tmpl, wf, hw)
}

// render is Render under budget b.
func render(ctx context.Context, b tmplbudget.Budget, tmpl *model.Template, wf *model.Workflow, hw *model.Hardware) (*model.WorkflowDefinition, error) {
	_, def, err := renderText(ctx, b, tmpl, wf, hw)
	return def, err
}

// renderText is render that also returns the template's output (the
// workflow YAML before parsing), when execution got that far: a preview
// shows it next to a parse or validation error.
func renderText(ctx context.Context, b tmplbudget.Budget, tmpl *model.Template, wf *model.Workflow, hw *model.Hardware) ([]byte, *model.WorkflowDefinition, error) {
	if tmpl == nil || tmpl.Spec.Data == nil || strings.TrimSpace(*tmpl.Spec.Data) == "" {
		return nil, nil, errors.New("template has no spec.data")
	}
	t, err := parseTemplate(templateName(tmpl), *tmpl.Spec.Data, b)
	if err != nil {
		return nil, nil, fmt.Errorf("parse template: %w", err)
	}
	data, err := TemplateData(wf, hw)
	if err != nil {
		return nil, nil, err
	}
	out, err := t.Execute(ctx, data)
	if err != nil {
		return nil, nil, fmt.Errorf("execute template: %w", err)
	}
	def, err := ParseDefinition(out)
	return out, def, err
}

// templateName is the name a Template's data is parsed under: the one
// its errors carry ("template: NAME:LINE:COL: …").
func templateName(tmpl *model.Template) string {
	if tmpl.Name == "" {
		return "template"
	}
	return tmpl.Name
}

// ErrorLine returns the line of tmpl's data that a rendering error of
// tmpl points at (a parse error, a missing key, a failing function), or 0
// when it names none (the output is not a valid workflow, the budget ran
// out).
func ErrorLine(err error, tmpl *model.Template) int {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if line, _, _, ok := tmplbudget.Position(e, templateName(tmpl)); ok {
			return line
		}
	}
	return 0
}

// ParseDefinition parses rendered template output and validates it.
func ParseDefinition(b []byte) (*model.WorkflowDefinition, error) {
	def := &model.WorkflowDefinition{}
	if err := yamlv3.Unmarshal(b, def); err != nil {
		return nil, fmt.Errorf("parse rendered template as YAML: %w", err)
	}
	if err := ValidateDefinition(def); err != nil {
		return nil, err
	}
	return def, nil
}

// ValidateDefinition checks a rendered definition: at least one task, unique
// task names, unique action names within a task, every action named and with
// an image, every task with a worker, no negative timeout or retry count, a
// known runtime.
func ValidateDefinition(def *model.WorkflowDefinition) error {
	var errs []error
	if len(def.Tasks) == 0 {
		errs = append(errs, errors.New("the workflow has no tasks"))
	}
	if def.GlobalTimeout < 0 {
		errs = append(errs, fmt.Errorf("global_timeout %d is negative", def.GlobalTimeout))
	}
	tasks := map[string]bool{}
	for i, t := range def.Tasks {
		tn := t.Name
		if tn == "" {
			errs = append(errs, fmt.Errorf("task %d has no name", i+1))
			tn = fmt.Sprintf("#%d", i+1)
		} else if tasks[tn] {
			errs = append(errs, fmt.Errorf("duplicate task name %q", tn))
		}
		tasks[tn] = true
		if strings.TrimSpace(t.Worker) == "" {
			errs = append(errs, fmt.Errorf("task %q has an empty worker", tn))
		}
		if len(t.Actions) == 0 {
			errs = append(errs, fmt.Errorf("task %q has no actions", tn))
		}
		actions := map[string]bool{}
		for j, a := range t.Actions {
			an := a.Name
			if an == "" {
				errs = append(errs, fmt.Errorf("task %q: action %d has no name", tn, j+1))
				an = fmt.Sprintf("#%d", j+1)
			} else if actions[an] {
				errs = append(errs, fmt.Errorf("task %q: duplicate action name %q", tn, an))
			}
			actions[an] = true
			if strings.TrimSpace(a.Image) == "" {
				errs = append(errs, fmt.Errorf("task %q: action %q has no image", tn, an))
			}
			if a.Timeout < 0 {
				errs = append(errs, fmt.Errorf("task %q: action %q: timeout %d is negative", tn, an, a.Timeout))
			}
			if a.Retries < 0 {
				errs = append(errs, fmt.Errorf("task %q: action %q: retries %d is negative", tn, an, a.Retries))
			}
			switch a.Runtime {
			case "", model.RuntimeContainer, model.RuntimeNative:
			default:
				errs = append(errs, fmt.Errorf("task %q: action %q: runtime %q: want %s, %s or nothing", tn, an, a.Runtime,
					model.RuntimeContainer, model.RuntimeNative))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid workflow definition: %w", errors.Join(errs...))
	}
	return nil
}

// staticName names the template CheckTemplateStatic parses; its errors
// carry only the line.
const staticName = "data"

// placeholder replaces template actions in CheckTemplateStatic.
const placeholder = tmplstatic.Placeholder

// substituted and mappingValue are tmplstatic's: the one reading of a
// Template's data as written, shared with the web UI.
var (
	substituted  = tmplstatic.Parse
	mappingValue = tmplstatic.MappingValue
)

// CheckTemplateStatic checks a Template's data at apply time, before any
// rendering. First the template must parse, with the functions rendering
// offers, and contain no range that could never finish within Budget
// (`{{ range 1000000000000 }}`); that failure is the only error returned,
// at its line. Then, best-effort, it replaces every {{...}} action with a
// placeholder, parses the result as YAML and reports duplicate task names
// and duplicate action names within a task (names that contain a template
// action are ignored). Each error names the duplicate and its line in data.
// If the substitution leaves YAML that does not parse, that part reports
// nothing: render time will catch problems.
func CheckTemplateStatic(data string) []error {
	if _, err := parseTemplate(staticName, data, Budget); err != nil {
		if line, _, msg, ok := tmplbudget.Position(err, staticName); ok {
			return []error{&StaticError{Line: line, Msg: msg}}
		}
		return []error{err}
	}
	doc, orig := substituted(data)
	if doc == nil {
		return nil
	}
	var errs []error
	tasks := mappingValue(doc, "tasks")
	if tasks == nil || tasks.Kind != yamlv3.SequenceNode {
		return nil
	}
	seenTask := map[string]int{}
	for _, t := range tasks.Content {
		tn := mappingValue(t, "name")
		taskName := ""
		if tn != nil && tn.Kind == yamlv3.ScalarNode && !strings.Contains(tn.Value, placeholder) {
			taskName = tn.Value
			if first, ok := seenTask[taskName]; ok {
				errs = append(errs, staticErrorf(orig(tn.Line), "duplicate task name %q (first used on line %d)",
					taskName, first))
			} else {
				seenTask[taskName] = orig(tn.Line)
			}
		}
		actions := mappingValue(t, "actions")
		if actions == nil || actions.Kind != yamlv3.SequenceNode {
			continue
		}
		seenAction := map[string]int{}
		for _, a := range actions.Content {
			an := mappingValue(a, "name")
			if an == nil || an.Kind != yamlv3.ScalarNode || strings.Contains(an.Value, placeholder) {
				continue
			}
			if first, ok := seenAction[an.Value]; ok {
				where := "a task"
				if taskName != "" {
					where = fmt.Sprintf("task %q", taskName)
				}
				errs = append(errs, staticErrorf(orig(an.Line), "duplicate action name %q in %s (first used on line %d)",
					an.Value, where, first))
			} else {
				seenAction[an.Value] = orig(an.Line)
			}
		}
	}
	return errs
}

// StaticAction is one action of a Template as written, before rendering.
type StaticAction struct {
	Task, Name, Image, Runtime string
	// Environment holds the action's variables whose values are written
	// out (waitdaemon's IMAGE names a second image).
	Environment map[string]string
	// Line is the line of the action's image in the Template's data.
	Line int
}

// TemplateActions lists the actions of a Template's data whose image is
// written out (not computed by a template action), in order, best-effort
// as CheckTemplateStatic reads data: what does not parse lists nothing.
// Apply checks their images before any machine needs them.
func TemplateActions(data string) []StaticAction {
	doc, orig := substituted(data)
	if doc == nil {
		return nil
	}
	scalar := func(n *yamlv3.Node, key string) (string, int) {
		v := mappingValue(n, key)
		if v == nil || v.Kind != yamlv3.ScalarNode || strings.Contains(v.Value, placeholder) {
			return "", 0
		}
		return v.Value, orig(v.Line)
	}
	var out []StaticAction
	tasks := mappingValue(doc, "tasks")
	if tasks == nil || tasks.Kind != yamlv3.SequenceNode {
		return nil
	}
	for _, t := range tasks.Content {
		task, _ := scalar(t, "name")
		actions := mappingValue(t, "actions")
		if actions == nil || actions.Kind != yamlv3.SequenceNode {
			continue
		}
		for _, a := range actions.Content {
			image, line := scalar(a, "image")
			if image == "" {
				continue
			}
			name, _ := scalar(a, "name")
			runtime, _ := scalar(a, "runtime")
			var env map[string]string
			if e := mappingValue(a, "environment"); e != nil && e.Kind == yamlv3.MappingNode {
				for i := 0; i+1 < len(e.Content); i += 2 {
					if v, _ := scalar(e, e.Content[i].Value); v != "" {
						if env == nil {
							env = map[string]string{}
						}
						env[e.Content[i].Value] = v
					}
				}
			}
			out = append(out, StaticAction{Task: task, Name: name, Image: image, Runtime: runtime, Environment: env, Line: line})
		}
	}
	return out
}

// StaticError is one problem CheckTemplateStatic found, at a line of the
// template's data (from 1).
type StaticError struct {
	Line int
	Msg  string
}

func (e *StaticError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

func staticErrorf(line int, format string, args ...any) error {
	return &StaticError{Line: line, Msg: fmt.Sprintf(format, args...)}
}
