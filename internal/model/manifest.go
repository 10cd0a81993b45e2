package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// MaxDocuments caps the objects in one manifest file, counting each item
// of a list.
const MaxDocuments = 10000

// Document is one object parsed from a manifest file, with where it came from.
type Document struct {
	// Source names the file (or "-" for standard input).
	Source string
	// Index is the document's position in the file, from 1.
	Index int
	// Item is the object's position, from 1, in the list the document is
	// (kind: List, or a YAML sequence of objects); 0 when the document is
	// one object.
	Item int
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

// Describe is how errors name a document: "document 2 (Hardware
// default/node1)", or "document 1 item 3 (Hardware default/node1)" for an
// object in a list.
func (d *Document) Describe() string {
	s := position{index: d.Index, item: d.Item}.describe()
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

// ParseManifests decodes every YAML (or JSON) document in data: objects,
// lists of objects (kubectl's kind: List, typed lists such as HardwareList,
// a top-level YAML sequence), Hardware and Workflows in
// tinkerbell.org/v1alpha1 or v1alpha2. It returns all the objects, or an
// ErrorList naming every problem by file, line, document (and list item)
// and field path; it never returns some objects and an error.
//
// The size of data is its caller's to bound: the API's request cap
// (anvil serve --max-request-mib) is the one limit on a manifest. The
// parser bounds what data may expand to: MaxDocuments objects, each of at
// most maxNodes nodes (aliases counted each time they are used).
func ParseManifests(source string, data []byte) (*ParseResult, error) {
	res := &ParseResult{}
	var errs ErrorList
	objects := 0
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
		if len(root.Content) == 0 || root.Content[0].Kind == yaml.ScalarNode && root.Content[0].Tag == "!!null" {
			continue // an empty document, e.g. a trailing "---"
		}
		items, listKind, lerr := listItems(root.Content[0])
		if lerr != "" {
			errs = append(errs, &FieldError{Source: source, Line: root.Content[0].Line, Doc: fmt.Sprintf("document %d", index), Msg: lerr})
			continue
		}
		if items == nil {
			items = []*yaml.Node{root.Content[0]}
		}
		aliased := maxAliasedNodes
		for i, n := range items {
			if objects++; objects > MaxDocuments {
				errs = append(errs, &FieldError{Source: source, Msg: fmt.Sprintf("more than %d objects", MaxDocuments)})
				break
			}
			at := position{source: source, index: index, aliased: &aliased}
			if listKind != "" {
				at.item = i + 1
			}
			doc, warns, derrs := decodeItem(at, listKind, n)
			res.Warnings = append(res.Warnings, warns...)
			if len(derrs) > 0 {
				errs = append(errs, derrs...)
				continue
			}
			res.Docs = append(res.Docs, *doc)
		}
		if objects > MaxDocuments {
			break
		}
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
	seen := map[string]string{}
	for i := range docs {
		d := &docs[i]
		m := d.Object.GetObjectMeta()
		key := KindOf(d.Object) + " " + m.Key()
		if first, ok := seen[key]; ok {
			errs = append(errs, &FieldError{Source: d.Source, Line: d.Line, Doc: d.Describe(), Path: "metadata.name",
				Msg: fmt.Sprintf("defined again (first in %s)", first)})
			continue
		}
		seen[key] = position{index: d.Index, item: d.Item}.describe()
	}
	return errs
}

// position is where an object is in a manifest file.
type position struct {
	source string
	index  int // the document, from 1
	item   int // the item in the document's list, from 1; 0: not a list
	// aliased is what is left of the document's budget of nodes reached
	// through aliases (maxAliasedNodes), shared by a list's items:
	// aliases let a few bytes of list repeat a large anchored object in
	// every item.
	aliased *int
}

func (p position) describe() string {
	if p.item > 0 {
		return fmt.Sprintf("document %d item %d", p.index, p.item)
	}
	return fmt.Sprintf("document %d", p.index)
}

// listKindSequence is listItems's name for a document that is a YAML
// sequence of objects (Tinkerbell's file backend writes them).
const listKindSequence = "list"

// listItems returns the objects of a document that is a list: a YAML
// sequence (listKindSequence), kubectl's `kind: List` or a typed list
// (`kind: HardwareList`), each with `items`. For any other document it
// returns nil items and no kind. A list with no items gives an empty,
// non-nil slice. The error, if not "", says why the list is malformed.
func listItems(n *yaml.Node) (items []*yaml.Node, kind, errMsg string) {
	if n.Kind == yaml.SequenceNode {
		return append([]*yaml.Node{}, n.Content...), listKindSequence, ""
	}
	kind = listKindOf(n)
	if kind == "" {
		return nil, "", ""
	}
	v := mapValue(n, "items")
	if v != nil && v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	switch {
	case v == nil || v.Kind == yaml.ScalarNode && v.Tag == "!!null":
		return []*yaml.Node{}, kind, ""
	case v.Kind != yaml.SequenceNode:
		return nil, "", fmt.Sprintf("kind %s: items must be a list of objects", kind)
	}
	return append([]*yaml.Node{}, v.Content...), kind, ""
}

// listKindOf returns the kind of a mapping that is a list ("List",
// "HardwareList", ...), or "".
func listKindOf(n *yaml.Node) string {
	k := mapValue(n, "kind")
	if k == nil || k.Kind != yaml.ScalarNode {
		return ""
	}
	if k.Value == "List" {
		return k.Value
	}
	if base, ok := strings.CutSuffix(k.Value, "List"); ok {
		if _, err := New(base); err == nil {
			return k.Value
		}
	}
	return ""
}

// mapValue returns the value of key in a mapping node, or nil.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Kind == yaml.ScalarNode && n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// decodeItem decodes one object of a document; listKind is the kind of
// the list it is an item of ("" when the document is the object). A list
// inside a list is refused (what would its items' positions be?), and so
// is an item of a typed list (HardwareList) of another kind.
func decodeItem(at position, listKind string, n *yaml.Node) (*Document, []string, ErrorList) {
	fail := func(msg string) (*Document, []string, ErrorList) {
		return nil, nil, ErrorList{{Source: at.source, Line: n.Line, Doc: at.describe(), Msg: msg}}
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if listKind != "" {
		r := n
		if r.Kind == yaml.SequenceNode {
			return fail("a list inside a list is not applied: put its objects in the outer list")
		}
		if inner := listKindOf(r); inner != "" {
			return fail(fmt.Sprintf("a %s inside a list is not applied: put its items in the outer list", inner))
		}
	}
	doc, warns, errs := decodeDocument(at, n)
	if doc != nil && listKind != "" && listKind != "List" && listKind != listKindSequence {
		if want := strings.TrimSuffix(listKind, "List"); KindOf(doc.Object) != want {
			return nil, warns, ErrorList{{Source: at.source, Line: doc.Line, Doc: doc.Describe(), Path: "kind",
				Msg: fmt.Sprintf("a %s holds only %s objects", listKind, want)}}
		}
	}
	return doc, warns, errs
}

// decodeDocument turns one YAML node into a validated object.
func decodeDocument(at position, n *yaml.Node) (*Document, []string, ErrorList) {
	source := at.source
	doc := &Document{Source: source, Index: at.index, Item: at.item, Line: n.Line, lines: map[string]int{}}
	fail := func(path, msg string) (*Document, []string, ErrorList) {
		return nil, nil, ErrorList{{Source: source, Line: doc.FieldLine(path), Doc: doc.Describe(), Path: path, Msg: msg}}
	}
	if n.Kind != yaml.MappingNode {
		return fail("", "a manifest document must be a mapping with apiVersion, kind, metadata and spec")
	}
	conv := &nodeConverter{lines: doc.lines, budget: maxNodes, aliased: at.aliased}
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
	// Warnings are written once the object is decoded, so that they name it.
	var pending []*FieldError
	warn := func(path, msg string) {
		pending = append(pending, &FieldError{Source: source, Line: doc.FieldLine(path), Path: path, Msg: msg})
	}
	switch av, _ := m["apiVersion"].(string); {
	case av == APIVersionOf(kind):
	case av == APIVersionV1alpha2 && v2Type(kind) != nil:
		for _, p := range unknownFields(v2Type(kind), value, "") {
			if !upstreamField(exportFields, kind, p) {
				warn(p, "unknown field, ignored")
			}
		}
		converted, ignored, err := fromV1alpha2(kind, m)
		if err != nil {
			var ce *convError
			if errors.As(err, &ce) {
				return fail(ce.path, ce.msg)
			}
			return fail("", err.Error())
		}
		for _, p := range ignored {
			warn(p, fmt.Sprintf("a Tinkerbell field Anvil ignores (kept in annotation %s)", V1alpha2FieldsAnnotation))
		}
		value = converted
	default:
		want := fmt.Sprintf("%q", APIVersionOf(kind))
		if v2Type(kind) != nil {
			want += fmt.Sprintf(" or %q", APIVersionV1alpha2)
		}
		return fail("apiVersion", fmt.Sprintf("apiVersion %q is not %s (the group of %s)", av, want, kind))
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

	for _, p := range unknownFields(reflect.TypeOf(obj).Elem(), value, "") {
		switch {
		case upstreamField(exportFields, kind, p):
			continue
		case upstreamField(upstreamFields, kind, p):
			warn(p, "a Tinkerbell field Anvil ignores")
			continue
		}
		warn(p, "unknown field, ignored")
	}
	warns := make([]string, len(pending))
	for i, fe := range pending {
		fe.Doc = doc.Describe()
		warns[i] = fe.Error()
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

// maxNodes bounds the nodes one object may expand to, counting every use
// of an alias, so "billion laughs" documents fail fast instead of eating
// memory.
const maxNodes = 1 << 18

// maxAliasedNodes bounds the nodes reached through aliases in all the
// objects of one document (a list) together. Plain nodes are bounded by
// the document's size; aliases are what multiply it, and a list would let
// each of its items repeat one large anchor.
const maxAliasedNodes = maxNodes

// nodeConverter converts YAML nodes to the values encoding/json would
// produce for the same JSON, recording the line of every path it passes.
type nodeConverter struct {
	lines   map[string]int
	budget  int
	aliased *int                // shared by the objects of one document; nil: no bound
	active  map[*yaml.Node]bool // aliases being expanded, to catch cycles
}

func (c *nodeConverter) value(n *yaml.Node, path string) (any, error) {
	if c.budget--; c.budget < 0 {
		return nil, fmt.Errorf("line %d: document expands to more than %d nodes (aliases?)", n.Line, maxNodes)
	}
	if len(c.active) > 0 && c.aliased != nil {
		if *c.aliased--; *c.aliased < 0 {
			return nil, fmt.Errorf("line %d: document expands to more than %d nodes through aliases", n.Line, maxAliasedNodes)
		}
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

// upstreamFields are the fields of Tinkerbell's v1alpha1 kinds that Anvil's
// model has no place for, as path patterns ("[]": any list index). Apply
// names them as Tinkerbell's, not as unknown: the manifest is right, Anvil
// does not act on them.
var upstreamFields = map[string][]string{
	KindHardware: {
		"spec.auto",                          // auto-enrollment
		"spec.references",                    // template references to other objects
		"spec.interfaces[].isoboot",          // Smee's ISO boot
		"spec.interfaces[].netboot.pxelinux", // u-boot pxelinux.cfg
		"spec.interfaces[].netboot.rpi",      // Raspberry Pi firmware netboot
	},
}

// exportFields are fields an export from a Kubernetes cluster running
// Tinkerbell (kubectl get -o yaml) carries that Anvil has no place for:
// Kubernetes' server-set and lifecycle metadata, and the status fields of
// Tinkerbell's kinds that Anvil's status lacks. They are dropped without a
// warning: no one writes them on purpose, and a warning would make
// --strict refuse every such export.
var exportFields = map[string][]string{
	KindHardware: {"status"}, // v1alpha2 Hardware has none; kubectl shows {}
	KindWorkflow: {
		"status.agentID",
		"status.bootOptions",
		"status.templateRending", // sic: Tinkerbell's JSON name
	},
}

// exportMetadataFields are Kubernetes' ObjectMeta fields an export
// carries and Anvil does not keep: server-set ones, and those that drive
// Kubernetes' garbage collection (owners, finalizers), which Anvil does not
// have.
var exportMetadataFields = []string{
	"metadata.managedFields",
	"metadata.selfLink",
	"metadata.deletionTimestamp",
	"metadata.deletionGracePeriodSeconds",
	"metadata.ownerReferences",
	"metadata.finalizers",
}

func init() {
	for _, k := range Kinds {
		exportFields[k] = append(exportFields[k], exportMetadataFields...)
	}
}

// upstreamField reports whether path (a field of kind that the model does
// not know) is in patterns (upstreamFields or exportFields), or
// inside one.
func upstreamField(patterns map[string][]string, kind, path string) bool {
	generic := listIndex.ReplaceAllString(path, "[]")
	for _, p := range patterns[kind] {
		if generic == p || strings.HasPrefix(generic, p+".") || strings.HasPrefix(generic, p+"[") {
			return true
		}
	}
	return false
}

// listIndex matches a list index in a field path.
var listIndex = regexp.MustCompile(`\[[0-9]+\]`)
