package render

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	butane "github.com/coreos/butane/config"
	butanecommon "github.com/coreos/butane/config/common"
	ignition "github.com/coreos/ignition/v2/config"
	"github.com/coreos/vcontext/report"
	yaml "gopkg.in/yaml.v3"
)

// butaneToIgnition translates a rendered Butane document to Ignition JSON
// with the translator its variant and version name, strictly (a warning is
// an error), then validates the result with Ignition's parser. Local file references are refused (no
// files directory is given): a template cannot read the server's files.
func butaneToIgnition(cfg Config, doc []byte) ([]byte, []Problem, error) {
	out, rpt, err := butane.TranslateBytes(doc, butanecommon.TranslateBytesOptions{Pretty: true})
	if err != nil || rpt.IsFatal() {
		if err == nil {
			err = errors.New("butane reported errors")
		}
		ps := reportProblems(rpt, doc, true)
		if len(ps) == 0 {
			ps = []Problem{butaneErrorProblem(err, doc)}
		}
		return nil, nil, newError(cfg, "butane", err, ps...)
	}
	// Strict, like `butane --strict`: Butane's warnings (an unused key, a
	// decimal file mode) are almost always a typo that would silently
	// change what the machine gets.
	if ws := reportProblems(rpt, doc, false); len(ws) > 0 {
		return nil, nil, newError(cfg, "butane", errors.New("butane reported warnings (strict mode)"), ws...)
	}
	iw, err := validateIgnition(cfg, out)
	if err != nil {
		return nil, nil, err
	}
	return append(out, '\n'), iw, nil
}

// butaneErrorProblem places an error Butane returned without a report: a
// YAML error at its line, a version or variant error at that key.
func butaneErrorProblem(err error, doc []byte) Problem {
	var um butanecommon.ErrUnmarshal
	if errors.As(err, &um) {
		ps := yamlProblems(errors.New(um.Detail), doc)
		if len(ps) > 0 {
			return ps[0]
		}
	}
	var uv butanecommon.ErrUnknownVersion
	switch {
	case errors.As(err, &uv), errors.Is(err, butanecommon.ErrInvalidVersion):
		return keyProblem(doc, "version", err.Error())
	case errors.Is(err, butanecommon.ErrNoVariant), errors.Is(err, butanecommon.ErrRhcosVariantUnsupported):
		return keyProblem(doc, "variant", err.Error())
	}
	return Problem{Message: err.Error()}
}

// keyProblem is a Problem at the top-level key of a YAML document, or
// without a place when the key is absent.
func keyProblem(doc []byte, key, msg string) Problem {
	var root yaml.Node
	if yaml.Unmarshal(doc, &root) == nil && root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		m := root.Content[0]
		for i := 0; m.Kind == yaml.MappingNode && i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == key {
				v := m.Content[i+1]
				return Problem{Line: v.Line, Column: v.Column, Path: "$." + key, Message: msg, Source: sourceLine(doc, v.Line)}
			}
		}
	}
	return Problem{Path: "$." + key, Message: msg}
}

// validateIgnition parses an Ignition config (spec 3.x) with Ignition's own
// parser and validator, returning its warnings, or an *Error with its errors.
func validateIgnition(cfg Config, doc []byte) ([]Problem, error) {
	_, rpt, err := ignition.Parse(doc)
	if err != nil || rpt.IsFatal() {
		if err == nil {
			err = errors.New("ignition reported errors")
		}
		ps := reportProblems(rpt, doc, true)
		if len(ps) == 0 {
			ps = []Problem{{Message: err.Error()}}
			if strings.Contains(err.Error(), "version") {
				ps[0] = jsonVersionProblem(doc, err.Error())
			}
		}
		return nil, newError(cfg, "ignition", err, ps...)
	}
	return reportProblems(rpt, doc, false), nil
}

// jsonVersionProblem points a version error at the "version" key of an
// Ignition document, when it can be found.
func jsonVersionProblem(doc []byte, msg string) Problem {
	i := bytes.Index(doc, []byte(`"version"`))
	if i < 0 {
		return Problem{Path: "$.ignition.version", Message: msg}
	}
	line := bytes.Count(doc[:i], []byte("\n")) + 1
	col := i - bytes.LastIndexByte(doc[:i], '\n')
	return Problem{Line: line, Column: col, Path: "$.ignition.version", Message: msg, Source: sourceLine(doc, line)}
}

// reportProblems converts the fatal (or, with fatal false, the non-fatal)
// entries of a Butane or Ignition report.
func reportProblems(rpt report.Report, doc []byte, fatal bool) []Problem {
	var ps []Problem
	for _, e := range rpt.Entries {
		if e.Kind == nil || e.Kind.IsFatal() != fatal || e.Kind == report.Info {
			continue
		}
		p := Problem{Message: e.Message}
		if !fatal {
			p.Message = e.Kind.String() + ": " + e.Message
		}
		if e.Context.Len() > 0 {
			p.Path = e.Context.String()
		}
		if e.Marker.StartP != nil {
			l, c := e.Marker.Start()
			p.Line, p.Column = int(l), int(c)
			p.Source = sourceLine(doc, p.Line)
		}
		ps = append(ps, p)
	}
	return ps
}

// cloudConfigHeader is the first line cloud-init requires of cloud-config
// user-data.
const cloudConfigHeader = "#cloud-config"

// validateCloudConfig checks the header line and that the rest is a YAML
// mapping (empty is allowed).
func validateCloudConfig(cfg Config, doc []byte) error {
	first, _, _ := bytes.Cut(doc, []byte("\n"))
	if strings.TrimRight(string(first), " \t\r") != cloudConfigHeader {
		return newError(cfg, "cloud-config", errors.New("missing #cloud-config header"), Problem{
			Line:    1,
			Message: fmt.Sprintf("the first line must be %q (cloud-init ignores user-data without it)", cloudConfigHeader),
			Source:  sourceLine(doc, 1),
		})
	}
	return validateYAMLMapping(cfg, "cloud-config", doc)
}

// validateYAMLMapping checks that doc is a YAML mapping with unique keys, or
// empty.
func validateYAMLMapping(cfg Config, stage string, doc []byte) error {
	var m map[string]any
	if err := yaml.Unmarshal(doc, &m); err != nil {
		ps := yamlProblems(err, doc)
		if len(ps) == 0 {
			ps = []Problem{{Message: err.Error()}}
		}
		return newError(cfg, stage, err, ps...)
	}
	return nil
}

// yamlLineRE finds "line N" (and yaml.v3's ", column M") in a YAML error.
var yamlLineRE = regexp.MustCompile(`line (\d+)(?:, column (\d+))?: (.*)`)

// yamlProblems turns a yaml.v3 error into Problems at their lines.
func yamlProblems(err error, doc []byte) []Problem {
	msgs := []string{err.Error()}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	var ps []Problem
	for _, msg := range msgs {
		m := yamlLineRE.FindStringSubmatch(msg)
		if m == nil {
			ps = append(ps, Problem{Message: strings.TrimPrefix(msg, "yaml: ")})
			continue
		}
		line, _ := strconv.Atoi(m[1])
		col, _ := strconv.Atoi(m[2])
		ps = append(ps, Problem{Line: line, Column: col, Message: m[3], Source: sourceLine(doc, line)})
	}
	return ps
}

// sourceLine returns line n (from 1) of doc, trimmed and cut to 120 bytes,
// or "".
func sourceLine(doc []byte, n int) string {
	if n < 1 {
		return ""
	}
	for i := 1; i < n; i++ {
		j := bytes.IndexByte(doc, '\n')
		if j < 0 {
			return ""
		}
		doc = doc[j+1:]
	}
	line, _, _ := bytes.Cut(doc, []byte("\n"))
	s := strings.TrimSpace(string(line))
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}
