package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// MaxManifestBytes caps one manifest file. A file this large is a mistake
// (or an attack), not an inventory.
const MaxManifestBytes = 8 << 20

// MaxDocuments caps the documents in one manifest file.
const MaxDocuments = 10000

// Document is one object parsed from a manifest file, with where it came from.
type Document struct {
	// Source names the file (or "-" for standard input).
	Source string
	// Index is the document's position in the file, from 1.
	Index int
	// Line is the line the document starts on, from 1.
	Line int
	// Object is the decoded object, its namespace defaulted.
	Object Object
	// lines maps a field path ("spec.interfaces[0].dhcp.mac") to its line.
	lines map[string]int
}

// FieldLine returns the line of the field at path, or of its nearest parent
// that has one, or the document's line.
func (d *Document) FieldLine(path string) int {
	for p := path; p != ""; p = parentPath(p) {
		if l, ok := d.lines[p]; ok {
			return l
		}
	}
	return d.Line
}

// parentPath drops the last element of a field path.
func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i <= 0 {
		return ""
	}
	return p[:i]
}

// Describe is how errors name a document: "document 2 (Hardware default/node1)".
func (d *Document) Describe() string {
	s := fmt.Sprintf("document %d", d.Index)
	if d.Object != nil {
		m := d.Object.GetObjectMeta()
		s += fmt.Sprintf(" (%s %s/%s)", KindOf(d.Object), m.Namespace, m.Name)
	}
	return s
}

// FieldError is one problem with one field of a manifest.
type FieldError struct {
	Source string // file name; empty for objects that came from the API
	Line   int    // 0 when unknown
	Doc    string // "document 2 (Hardware default/node1)"; may be empty
	Path   string // "spec.interfaces[0].dhcp.mac"; may be empty
	Msg    string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Doc != "" {
		b.WriteString(e.Doc)
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrorList is every problem found in a manifest or an object. Its Error lists
// them one per line.
type ErrorList []*FieldError

func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// errOrNil returns l as an error, or nil when it is empty (never a typed nil).
func (l ErrorList) errOrNil() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

// ParseResult is what ParseManifests found.
type ParseResult struct {
	Docs []Document
	// Warnings name ignored input, e.g. fields Anvil does not know.
	Warnings []string
}

// ParseManifests decodes every YAML (or JSON) document in data. It returns
// all the documents, or an ErrorList naming every problem by file, line,
// document and field path; it never returns some documents and an error.
func ParseManifests(source string, data []byte) (*ParseResult, error) {
	if len(data) > MaxManifestBytes {
		return nil, ErrorList{{Source: source, Msg: fmt.Sprintf("file is %d bytes; the limit is %d", len(data), MaxManifestBytes)}}
	}
	res := &ParseResult{}
	var errs ErrorList
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for index := 1; ; index++ {
		var root yaml.Node
		err := dec.Decode(&root)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// A YAML syntax error ends the stream: the decoder cannot resync.
			errs = append(errs, &FieldError{Source: source, Doc: fmt.Sprintf("document %d", index), Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")})
			break
		}
		if index > MaxDocuments {
			errs = append(errs, &FieldError{Source: source, Msg: fmt.Sprintf("more than %d documents", MaxDocuments)})
			break
		}
		if len(root.Content) == 0 || root.Content[0].Kind == yaml.ScalarNode && root.Content[0].Tag == "!!null" {
			continue // an empty document, e.g. a trailing "---"
		}
		doc, warns, derrs := decodeDocument(source, index, root.Content[0])
		res.Warnings = append(res.Warnings, warns...)
		if len(derrs) > 0 {
			errs = append(errs, derrs...)
			continue
		}
		res.Docs = append(res.Docs, *doc)
	}
	errs = append(errs, duplicateObjects(res.Docs)...)
	if len(errs) > 0 {
		return nil, errs
	}
	return res, nil
}

// duplicateObjects reports objects defined twice in one file: which one
// should win would be a guess.
func duplicateObjects(docs []Document) ErrorList {
	var errs ErrorList
	seen := map[string]int{}
	for i := range docs {
		d := &docs[i]
		m := d.Object.GetObjectMeta()
		key := KindOf(d.Object) + " " + m.Key()
		if first, ok := seen[key]; ok {
			errs = append(errs, &FieldError{Source: d.Source, Line: d.Line, Doc: d.Describe(), Path: "metadata.name",
				Msg: fmt.Sprintf("defined again (first in document %d)", first)})
			continue
		}
		seen[key] = d.Index
	}
	return errs
}

// decodeDocument turns one YAML node into a validated object.
func decodeDocument(source string, index int, n *yaml.Node) (*Document, []string, ErrorList) {
	doc := &Document{Source: source, Index: index, Line: n.Line, lines: map[string]int{}}
	fail := func(path, msg string) (*Document, []string, ErrorList) {
		return nil, nil, ErrorList{{Source: source, Line: doc.FieldLine(path), Doc: doc.Describe(), Path: path, Msg: msg}}
	}
	if n.Kind != yaml.MappingNode {
		return fail("", "a manifest document must be a mapping with apiVersion, kind, metadata and spec")
	}
	conv := &nodeConverter{lines: doc.lines, budget: maxNodes}
	value, err := conv.value(n, "")
	if err != nil {
		return fail("", err.Error())
	}
	m := value.(map[string]any)
	kind, _ := m["kind"].(string)
	if kind == "" {
		return fail("kind", "missing kind (want Hardware, Template, Workflow or BootProfile)")
	}
	obj, err := New(kind)
	if err != nil {
		return fail("kind", err.Error())
	}
	if av, _ := m["apiVersion"].(string); av != APIVersionOf(kind) {
		return fail("apiVersion", fmt.Sprintf("apiVersion %q is not %q (the group of %s)", av, APIVersionOf(kind), kind))
	}
	raw, err := json.Marshal(value)
	if err != nil {
		return fail("", err.Error())
	}
	if err := json.Unmarshal(raw, obj); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			path := te.Field
			return fail(doc.findPath(path), fmt.Sprintf("cannot use %s as %s", te.Value, te.Type))
		}
		return fail("", err.Error())
	}
	meta := obj.GetObjectMeta()
	if meta.Namespace == "" {
		meta.Namespace = DefaultNamespace
	}
	// Server-set fields in a manifest (say, from `get -o yaml`) are ignored.
	meta.UID, meta.ResourceVersion, meta.Generation, meta.CreationTimestamp = "", "", 0, nil
	doc.Object = obj

	var warns []string
	for _, p := range unknownFields(reflect.TypeOf(obj).Elem(), value, "") {
		warns = append(warns, (&FieldError{Source: source, Line: doc.FieldLine(p), Doc: doc.Describe(), Path: p,
			Msg: "unknown field, ignored"}).Error())
	}
	var errs ErrorList
	for _, fe := range validate(obj) {
		fe.Source, fe.Line, fe.Doc = source, doc.FieldLine(fe.Path), doc.Describe()
		errs = append(errs, fe)
	}
	if len(errs) > 0 {
		return nil, warns, errs
	}
	return doc, warns, nil
}

// findPath maps encoding/json's dotted field path (no list indexes) to the
// first recorded path that matches it, so its line can be found.
func (d *Document) findPath(jsonPath string) string {
	want := strings.Split(jsonPath, ".")
	var best []string
	for p := range d.lines {
		if matchesIgnoringIndexes(p, want) {
			best = append(best, p)
		}
	}
	if len(best) == 0 {
		return jsonPath
	}
	sort.Slice(best, func(i, j int) bool { return d.lines[best[i]] < d.lines[best[j]] })
	return best[0]
}

func matchesIgnoringIndexes(path string, want []string) bool {
	var parts []string
	for _, p := range strings.Split(path, ".") {
		if i := strings.IndexByte(p, '['); i >= 0 {
			p = p[:i]
		}
		parts = append(parts, p)
	}
	return slicesEqual(parts, want)
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// maxNodes bounds the nodes one document may expand to, counting every use
// of an alias, so "billion laughs" documents fail fast instead of eating
// memory.
const maxNodes = 1 << 18

// nodeConverter converts YAML nodes to the values encoding/json would
// produce for the same JSON, recording the line of every path it passes.
type nodeConverter struct {
	lines  map[string]int
	budget int
	active map[*yaml.Node]bool // aliases being expanded, to catch cycles
}

func (c *nodeConverter) value(n *yaml.Node, path string) (any, error) {
	if c.budget--; c.budget < 0 {
		return nil, fmt.Errorf("line %d: document expands to more than %d nodes (aliases?)", n.Line, maxNodes)
	}
	lines := c.lines
	if path != "" {
		lines[path] = n.Line
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return c.value(n.Content[0], path)
	case yaml.AliasNode:
		if c.active[n.Alias] {
			return nil, fmt.Errorf("line %d: alias *%s refers to itself", n.Line, n.Value)
		}
		if c.active == nil {
			c.active = map[*yaml.Node]bool{}
		}
		c.active[n.Alias] = true
		defer delete(c.active, n.Alias)
		return c.value(n.Alias, path)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
				return nil, fmt.Errorf("line %d: YAML merge keys (<<) are not supported", k.Line)
			}
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: mapping keys must be strings", k.Line)
			}
			child := k.Value
			if path != "" {
				child = path + "." + k.Value
			}
			if _, dup := m[k.Value]; dup {
				return nil, fmt.Errorf("line %d: %s: key defined twice", k.Line, child)
			}
			cv, err := c.value(v, child)
			if err != nil {
				return nil, err
			}
			m[k.Value] = cv
			lines[child] = k.Line
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for i, e := range n.Content {
			cv, err := c.value(e, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			s = append(s, cv)
		}
		return s, nil
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				return nil, fmt.Errorf("line %d: %v", n.Line, err)
			}
			return b, nil
		case "!!int":
			i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
			if err != nil {
				var f float64
				if derr := n.Decode(&f); derr != nil {
					return nil, fmt.Errorf("line %d: %v", n.Line, err)
				}
				return f, nil
			}
			return i, nil
		case "!!float":
			var f float64
			if err := n.Decode(&f); err != nil {
				return nil, fmt.Errorf("line %d: %v", n.Line, err)
			}
			return f, nil
		case "!!timestamp":
			return n.Value, nil // keep the text; the typed decode parses it
		default:
			return n.Value, nil
		}
	}
	return nil, fmt.Errorf("line %d: unsupported YAML node", n.Line)
}

// unknownFields lists the paths in v (decoded JSON) that type t has no field
// for. Free-form maps (map[string]any) accept anything.
func unknownFields(t reflect.Type, v any, path string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	switch t.Kind() {
	case reflect.Struct:
		if t == timeType {
			return nil
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		fields := jsonFields(t)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			child := k
			if path != "" {
				child = path + "." + k
			}
			ft, ok := fields[k]
			if !ok {
				out = append(out, child)
				continue
			}
			out = append(out, unknownFields(ft, m[k], child)...)
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		for k, mv := range m {
			out = append(out, unknownFields(t.Elem(), mv, path+"."+k)...)
		}
	case reflect.Slice:
		s, ok := v.([]any)
		if !ok {
			return nil
		}
		for i, sv := range s {
			out = append(out, unknownFields(t.Elem(), sv, fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	return out
}

// jsonFields maps the JSON names of a struct's fields (embedded untagged
// structs promoted, as encoding/json does) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// CheckReferences checks that every Workflow's templateRef and hardwareRef
// name an object that exists, either among docs or according to exists (the
// store). Errors name the Workflow's document, field and line.
func CheckReferences(docs []Document, exists func(kind, namespace, name string) bool) error {
	inFile := map[string]bool{}
	for i := range docs {
		m := docs[i].Object.GetObjectMeta()
		inFile[KindOf(docs[i].Object)+" "+m.Key()] = true
	}
	found := func(kind, ns, name string) bool {
		return inFile[kind+" "+ns+"/"+name] || exists != nil && exists(kind, ns, name)
	}
	var errs ErrorList
	for i := range docs {
		d := &docs[i]
		wf, ok := d.Object.(*Workflow)
		if !ok {
			continue
		}
		ns := wf.Namespace
		if ref := wf.Spec.TemplateRef; ref != "" && !found(KindTemplate, ns, ref) {
			errs = append(errs, &FieldError{Source: d.Source, Line: d.FieldLine("spec.templateRef"), Doc: d.Describe(),
				Path: "spec.templateRef", Msg: fmt.Sprintf("Template %s/%s does not exist (apply it first, or in the same file)", ns, ref)})
		}
		if ref := wf.Spec.HardwareRef; ref != "" && !found(KindHardware, ns, ref) {
			errs = append(errs, &FieldError{Source: d.Source, Line: d.FieldLine("spec.hardwareRef"), Doc: d.Describe(),
				Path: "spec.hardwareRef", Msg: fmt.Sprintf("Hardware %s/%s does not exist (apply it first, or in the same file)", ns, ref)})
		}
	}
	return errs.errOrNil()
}
