// Package wsman is a small DMTF WS-Management client (DSP0226) over HTTP
// with Digest authentication (RFC 7616): the SOAP 1.2 envelopes of
// WS-Transfer Get and Put, WS-Enumeration Enumerate and Pull, and
// custom-method invocation, as Intel AMT speaks them; and the parsing of
// their responses and SOAP Faults. It knows nothing of AMT's classes: the
// Intel AMT provider (internal/bmc) builds the bodies.
//
// It is Anvil's own: the WS-Management Go libraries do not resolve through
// the module proxy's checksum database.
package wsman

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Namespaces of the envelope.
const (
	NSSOAP        = "http://www.w3.org/2003/05/soap-envelope"
	NSAddressing  = "http://schemas.xmlsoap.org/ws/2004/08/addressing"
	NSWSMan       = "http://schemas.dmtf.org/wbem/wsman/1/wsman.xsd"
	NSEnumeration = "http://schemas.xmlsoap.org/ws/2004/09/enumeration"
	NSTransfer    = "http://schemas.xmlsoap.org/ws/2004/09/transfer"
	// AnonymousAddress is WS-Addressing's "reply on this connection".
	AnonymousAddress = NSAddressing + "/role/anonymous"
)

// Actions of WS-Transfer and WS-Enumeration.
const (
	ActionGet       = NSTransfer + "/Get"
	ActionPut       = NSTransfer + "/Put"
	ActionEnumerate = NSEnumeration + "/Enumerate"
	ActionPull      = NSEnumeration + "/Pull"
)

// Element is an XML element: a name (namespace URI and local name),
// attributes, and either text or child elements. Requests are built of
// Elements and responses parsed into them.
type Element struct {
	Name     xml.Name
	Attrs    []xml.Attr
	Text     string
	Children []*Element
}

// E makes an element of namespace ns with children.
func E(ns, local string, children ...*Element) *Element {
	return &Element{Name: xml.Name{Space: ns, Local: local}, Children: children}
}

// T makes an element of namespace ns holding text.
func T(ns, local, text string) *Element {
	return &Element{Name: xml.Name{Space: ns, Local: local}, Text: text}
}

// Child returns the first child named local (any namespace), or nil.
func (e *Element) Child(local string) *Element {
	if e == nil {
		return nil
	}
	for _, c := range e.Children {
		if c.Name.Local == local {
			return c
		}
	}
	return nil
}

// Path follows Child through locals; nil if a step is missing.
func (e *Element) Path(locals ...string) *Element {
	for _, l := range locals {
		e = e.Child(l)
	}
	return e
}

// Values returns the trimmed text of every child named local.
func (e *Element) Values(local string) []string {
	var out []string
	if e == nil {
		return nil
	}
	for _, c := range e.Children {
		if c.Name.Local == local {
			out = append(out, strings.TrimSpace(c.Text))
		}
	}
	return out
}

// Value returns the trimmed text of the first child named local, and
// whether there is one.
func (e *Element) Value(local string) (string, bool) {
	c := e.Child(local)
	if c == nil {
		return "", false
	}
	return strings.TrimSpace(c.Text), true
}

// Attr returns the attribute named local (any namespace).
func (e *Element) Attr(local string) string {
	for _, a := range e.Attrs {
		if a.Name.Local == local {
			return a.Value
		}
	}
	return ""
}

// Selector is one key of a WS-Management SelectorSet.
type Selector struct{ Name, Value string }

// SelectorSet makes a wsman:SelectorSet element.
func SelectorSet(sel []Selector) *Element {
	set := E(NSWSMan, "SelectorSet")
	for _, s := range sel {
		c := T(NSWSMan, "Selector", s.Value)
		c.Attrs = []xml.Attr{{Name: xml.Name{Local: "Name"}, Value: s.Name}}
		set.Children = append(set.Children, c)
	}
	return set
}

// EPR makes an endpoint reference to the instance of resourceURI with
// the selectors, as a method parameter named local in namespace ns.
func EPR(ns, local, resourceURI string, sel []Selector) *Element {
	return E(ns, local,
		T(NSAddressing, "Address", AnonymousAddress),
		E(NSAddressing, "ReferenceParameters",
			T(NSWSMan, "ResourceURI", resourceURI),
			SelectorSet(sel)))
}

// Request is one WS-Management message to send.
type Request struct {
	// To is the endpoint's URL ("http://host:16992/wsman").
	To          string
	Action      string
	ResourceURI string
	Selectors   []Selector
	// Body is the body's one element, or nil for an empty body.
	Body *Element
	// MessageID is "uuid:…"; OperationTimeout an xs:duration ("PT60S").
	MessageID, OperationTimeout string
}

// Envelope builds the request's SOAP envelope.
func (r *Request) Envelope() *Element {
	header := E(NSSOAP, "Header",
		T(NSAddressing, "Action", r.Action),
		T(NSAddressing, "To", r.To),
		T(NSWSMan, "ResourceURI", r.ResourceURI),
		T(NSAddressing, "MessageID", r.MessageID),
		E(NSAddressing, "ReplyTo", T(NSAddressing, "Address", AnonymousAddress)))
	if r.OperationTimeout != "" {
		header.Children = append(header.Children, T(NSWSMan, "OperationTimeout", r.OperationTimeout))
	}
	if len(r.Selectors) > 0 {
		header.Children = append(header.Children, SelectorSet(r.Selectors))
	}
	for _, c := range header.Children[:3] {
		c.Attrs = append(c.Attrs, xml.Attr{Name: xml.Name{Space: NSSOAP, Local: "mustUnderstand"}, Value: "true"})
	}
	body := E(NSSOAP, "Body")
	if r.Body != nil {
		body.Children = []*Element{r.Body}
	}
	return E(NSSOAP, "Envelope", header, body)
}

// wellKnown are the prefixes of the envelope's namespaces; others get
// n1, n2, … in the order they appear.
var wellKnown = map[string]string{
	NSSOAP: "s", NSAddressing: "a", NSWSMan: "w", NSEnumeration: "e", NSTransfer: "t",
}

// Marshal writes e as an XML document, every namespace declared once on
// the root with a short prefix.
func Marshal(e *Element) []byte {
	prefixes := map[string]string{}
	var order []string
	var collect func(*Element)
	add := func(ns string) {
		if ns == "" || prefixes[ns] != "" {
			return
		}
		p := wellKnown[ns]
		if p == "" {
			p = fmt.Sprintf("n%d", len(order)+1)
		}
		prefixes[ns] = p
		order = append(order, ns)
	}
	collect = func(e *Element) {
		add(e.Name.Space)
		for _, a := range e.Attrs {
			add(a.Name.Space)
		}
		for _, c := range e.Children {
			collect(c)
		}
	}
	collect(e)
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>`)
	var write func(*Element, bool)
	name := func(n xml.Name) string {
		if n.Space == "" {
			return n.Local
		}
		return prefixes[n.Space] + ":" + n.Local
	}
	write = func(e *Element, root bool) {
		b.WriteString("<" + name(e.Name))
		if root {
			for _, ns := range order {
				fmt.Fprintf(&b, ` xmlns:%s="`, prefixes[ns])
				_ = xml.EscapeText(&b, []byte(ns))
				b.WriteByte('"')
			}
		}
		for _, a := range e.Attrs {
			fmt.Fprintf(&b, ` %s="`, name(a.Name))
			_ = xml.EscapeText(&b, []byte(a.Value))
			b.WriteByte('"')
		}
		if e.Text == "" && len(e.Children) == 0 {
			b.WriteString("/>")
			return
		}
		b.WriteByte('>')
		_ = xml.EscapeText(&b, []byte(e.Text))
		for _, c := range e.Children {
			write(c, false)
		}
		b.WriteString("</" + name(e.Name) + ">")
	}
	write(e, true)
	return b.Bytes()
}

// maxDepth bounds the nesting Parse accepts: WS-Management bodies are a
// few levels deep, and a hostile answer must not exhaust the stack.
const maxDepth = 64

// Parse reads an XML document into its root Element. Text between child
// elements (indentation) is dropped; namespace declarations are not kept
// as attributes.
func Parse(data []byte) (*Element, error) {
	d := xml.NewDecoder(bytes.NewReader(data))
	var stack []*Element
	var root *Element
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("XML: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if root != nil && len(stack) == 0 {
				return nil, errors.New("XML: more than one root element")
			}
			if len(stack) >= maxDepth {
				return nil, fmt.Errorf("XML: nested deeper than %d elements", maxDepth)
			}
			e := &Element{Name: t.Name}
			for _, a := range t.Attr {
				if a.Name.Space == "xmlns" || a.Name.Local == "xmlns" && a.Name.Space == "" {
					continue
				}
				e.Attrs = append(e.Attrs, a)
			}
			if len(stack) > 0 {
				p := stack[len(stack)-1]
				p.Children = append(p.Children, e)
			} else {
				root = e
			}
			stack = append(stack, e)
		case xml.EndElement:
			e := stack[len(stack)-1]
			if len(e.Children) > 0 {
				e.Text = "" // indentation between children
			}
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				e := stack[len(stack)-1]
				if len(e.Children) == 0 {
					e.Text += string(t)
				}
			}
		}
	}
	if root == nil {
		return nil, errors.New("XML: no element")
	}
	return root, nil
}

// Fault is a SOAP 1.2 Fault (DSP0226 section 14): its code, subcode
// (the WS-Management fault, e.g. "wsman:AccessDenied" as its local
// name), reason and detail.
type Fault struct {
	Code, Subcode, Reason, Detail string
}

func (f *Fault) Error() string {
	var b strings.Builder
	b.WriteString("SOAP Fault ")
	if f.Subcode != "" {
		b.WriteString(f.Subcode)
	} else {
		b.WriteString(f.Code)
	}
	if f.Reason != "" {
		b.WriteString(": " + f.Reason)
	}
	if f.Detail != "" {
		b.WriteString(" (" + f.Detail + ")")
	}
	return b.String()
}

// localOf strips a QName's prefix: "wsman:AccessDenied" → "AccessDenied".
func localOf(q string) string {
	q = strings.TrimSpace(q)
	if i := strings.LastIndexByte(q, ':'); i >= 0 {
		return q[i+1:]
	}
	return q
}

// Response is a parsed WS-Management answer.
type Response struct {
	Header, Body *Element
}

// ParseResponse reads a SOAP envelope. A Fault in its body is returned as
// a *Fault error; an envelope without a body is an error.
func ParseResponse(data []byte) (*Response, error) {
	root, err := Parse(data)
	if err != nil {
		return nil, err
	}
	if root.Name.Local != "Envelope" || root.Name.Space != NSSOAP {
		return nil, fmt.Errorf("not a SOAP 1.2 envelope: the root is {%s}%s", root.Name.Space, root.Name.Local)
	}
	r := &Response{Header: root.Child("Header"), Body: root.Child("Body")}
	if r.Body == nil {
		return nil, errors.New("the SOAP envelope has no Body")
	}
	if f := r.Body.Child("Fault"); f != nil {
		return r, parseFault(f)
	}
	return r, nil
}

func parseFault(f *Element) *Fault {
	out := &Fault{}
	if v, ok := f.Path("Code").Value("Value"); ok {
		out.Code = localOf(v)
	}
	if v, ok := f.Path("Code", "Subcode").Value("Value"); ok {
		out.Subcode = localOf(v)
	}
	out.Reason = strings.Join(strings.Fields(strings.Join(f.Path("Reason").Values("Text"), " ")), " ")
	if d := f.Child("Detail"); d != nil {
		var parts []string
		var walk func(*Element)
		walk = func(e *Element) {
			if t := strings.TrimSpace(e.Text); t != "" {
				parts = append(parts, t)
			}
			for _, c := range e.Children {
				walk(c)
			}
		}
		walk(d)
		out.Detail = strings.Join(slices.Compact(parts), "; ")
	}
	return out
}
