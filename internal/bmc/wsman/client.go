package wsman

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// maxResponse bounds a response body: AMT's answers are a few kilobytes.
const maxResponse = 4 << 20

// Client sends WS-Management requests to one endpoint.
type Client struct {
	// Endpoint is the service's URL, e.g. "http://10.0.0.9:16992/wsman".
	Endpoint string
	// HTTP sends the requests; its transport does the authentication
	// (DigestTransport). Required.
	HTTP *http.Client
}

// HTTPError is an answer that is neither a WS-Management response nor a
// Fault: a status other than 200 with no SOAP envelope.
type HTTPError struct {
	Status int
	Body   string
}

func (e *HTTPError) Error() string {
	msg := fmt.Sprintf("HTTP %d %s", e.Status, http.StatusText(e.Status))
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// Do sends r and returns the response's body element (nil for an empty
// body). A Fault is a *Fault error, a refused login an error wrapping
// ErrUnauthorized.
func (c *Client) Do(ctx context.Context, r Request) (*Element, error) {
	r.To = c.Endpoint
	if r.MessageID == "" {
		r.MessageID = newMessageID()
	}
	if r.OperationTimeout == "" {
		r.OperationTimeout = "PT60S"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Endpoint, bytes.NewReader(Marshal(r.Envelope())))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/soap+xml;charset=UTF-8")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return nil, fmt.Errorf("read the answer: %w", err)
	}
	if len(data) > maxResponse {
		return nil, fmt.Errorf("the answer is larger than %d bytes", maxResponse)
	}
	if resp.StatusCode == http.StatusUnauthorized {
		return nil, fmt.Errorf("HTTP 401: %w", ErrUnauthorized)
	}
	parsed, perr := ParseResponse(data)
	var fault *Fault
	switch {
	case errors.As(perr, &fault):
		return nil, fault
	case perr != nil && resp.StatusCode != http.StatusOK:
		return nil, &HTTPError{Status: resp.StatusCode, Body: snippet(data)}
	case perr != nil:
		return nil, fmt.Errorf("the answer is not a WS-Management response: %w", perr)
	case resp.StatusCode != http.StatusOK:
		return nil, &HTTPError{Status: resp.StatusCode}
	}
	if len(parsed.Body.Children) == 0 {
		return nil, nil
	}
	return parsed.Body.Children[0], nil
}

// snippet is the start of a non-SOAP answer, on one line, for an error.
func snippet(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func newMessageID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("uuid:%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:])
}

// Get reads the instance of resourceURI the selectors name (WS-Transfer
// Get) and returns it.
func (c *Client) Get(ctx context.Context, resourceURI string, sel []Selector) (*Element, error) {
	e, err := c.Do(ctx, Request{Action: ActionGet, ResourceURI: resourceURI, Selectors: sel})
	if err == nil && e == nil {
		err = errors.New("the Get response has an empty body")
	}
	return e, err
}

// Put replaces the instance with instance (WS-Transfer Put).
func (c *Client) Put(ctx context.Context, resourceURI string, sel []Selector, instance *Element) (*Element, error) {
	return c.Do(ctx, Request{Action: ActionPut, ResourceURI: resourceURI, Selectors: sel, Body: instance})
}

// maxPulls bounds an enumeration: the classes Anvil reads have one or a
// few instances, and a service that never ends a sequence must not keep
// a task busy until its deadline.
const maxPulls = 32

// EnumerateAll lists every instance of resourceURI (WS-Enumeration
// Enumerate, then Pull until EndOfSequence).
func (c *Client) EnumerateAll(ctx context.Context, resourceURI string) ([]*Element, error) {
	resp, err := c.Do(ctx, Request{Action: ActionEnumerate, ResourceURI: resourceURI, Body: E(NSEnumeration, "Enumerate")})
	if err != nil {
		return nil, fmt.Errorf("enumerate: %w", err)
	}
	ctxt, ok := resp.Value("EnumerationContext")
	if !ok || ctxt == "" {
		return nil, errors.New("enumerate: the response has no EnumerationContext")
	}
	var items []*Element
	for range maxPulls {
		body := E(NSEnumeration, "Pull",
			T(NSEnumeration, "EnumerationContext", ctxt),
			T(NSEnumeration, "MaxElements", "999"),
			T(NSEnumeration, "MaxCharacters", "99999"))
		resp, err := c.Do(ctx, Request{Action: ActionPull, ResourceURI: resourceURI, Body: body})
		if err != nil {
			return nil, fmt.Errorf("pull: %w", err)
		}
		if resp == nil || resp.Name.Local != "PullResponse" {
			return nil, errors.New("pull: the response has no PullResponse")
		}
		items = append(items, resp.Child("Items").Children...)
		if resp.Child("EndOfSequence") != nil {
			return items, nil
		}
		if next, ok := resp.Value("EnumerationContext"); ok && next != "" {
			ctxt = next
		}
	}
	return nil, fmt.Errorf("pull: no EndOfSequence after %d pulls", maxPulls)
}

// Invoke calls method of the instance of resourceURI with the input's
// parameters (children of <method>_INPUT in the class's namespace) and
// returns the <method>_OUTPUT element.
func (c *Client) Invoke(ctx context.Context, resourceURI, method string, sel []Selector, params ...*Element) (*Element, error) {
	in := E(resourceURI, method+"_INPUT", params...)
	out, err := c.Do(ctx, Request{Action: resourceURI + "/" + method, ResourceURI: resourceURI, Selectors: sel, Body: in})
	if err != nil {
		return nil, err
	}
	if out == nil || out.Name.Local != method+"_OUTPUT" {
		return nil, fmt.Errorf("the answer has no %s_OUTPUT", method)
	}
	return out, nil
}
