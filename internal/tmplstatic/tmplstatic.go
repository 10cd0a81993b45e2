// Package tmplstatic reads a workflow Template's data as written, before
// any rendering: YAML with every {{ ... }} action replaced by a
// placeholder. The workflow engine's apply-time checks and the web UI's
// template list read templates through it, so both see the same tasks.
//
// It is best-effort by design: data whose substitution does not parse as
// YAML reads as nothing, and rendering decides.
package tmplstatic

import (
	"regexp"
	"strings"

	yamlv3 "gopkg.in/yaml.v3"
)

// templateAction matches one {{ ... }} action, across lines.
var templateAction = regexp.MustCompile(`(?s)\{\{.*?\}\}`)

// Placeholder replaces template actions in Parse's text.
const Placeholder = "ANVIL_TEMPLATE_PLACEHOLDER"

// Parse parses data as YAML with every {{...}} action replaced by
// Placeholder, and returns its root and a function from a line of the
// substituted text to the line of data it came from (an action spanning
// lines collapses them). It returns nil when the result does not parse.
func Parse(data string) (*yamlv3.Node, func(int) int) {
	// Build the substituted text and, for each of its lines, the line of
	// data it starts on (an action spanning lines collapses them).
	var sb strings.Builder
	lineOf := []int{1}
	line := 1
	last := 0
	emit := func(s string) {
		for _, r := range s {
			if r == '\n' {
				line++
				sb.WriteByte('\n')
				lineOf = append(lineOf, line)
				continue
			}
			sb.WriteRune(r)
		}
	}
	for _, m := range templateAction.FindAllStringIndex(data, -1) {
		emit(data[last:m[0]])
		sb.WriteString(Placeholder)
		line += strings.Count(data[m[0]:m[1]], "\n")
		last = m[1]
	}
	emit(data[last:])

	var root yamlv3.Node
	if err := yamlv3.Unmarshal([]byte(sb.String()), &root); err != nil {
		return nil, nil
	}
	orig := func(l int) int {
		if l >= 1 && l <= len(lineOf) {
			return lineOf[l-1]
		}
		return l
	}
	doc := &root
	if doc.Kind == yamlv3.DocumentNode && len(doc.Content) > 0 {
		doc = doc.Content[0]
	}
	return doc, orig
}

// MappingValue returns the value node of key in a mapping node, or nil.
func MappingValue(n *yamlv3.Node, key string) *yamlv3.Node {
	if n == nil || n.Kind != yamlv3.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// Count returns how many tasks the data lists and how many actions they
// hold, as written (a task or action made by a template action, such as
// a range, is not counted); ok is false when the data does not read as a
// workflow.
func Count(data string) (tasks, actions int, ok bool) {
	doc, _ := Parse(data)
	ts := MappingValue(doc, "tasks")
	if ts == nil || ts.Kind != yamlv3.SequenceNode {
		return 0, 0, false
	}
	for _, t := range ts.Content {
		tasks++
		if as := MappingValue(t, "actions"); as != nil && as.Kind == yamlv3.SequenceNode {
			actions += len(as.Content)
		}
	}
	return tasks, actions, true
}
