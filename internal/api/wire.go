package api

import (
	"github.com/anvilproj/anvil/internal/model"
)

// FromWire converts a resource message (Hardware, Template, Workflow, …) to its model
// object. Clients (the CLI) use it to read server responses with the same
// rules the server uses to read requests.
func FromWire(kind string, m WireMessage) (model.Object, error) {
	return fromWire(kind, m)
}

// WireParts is an object in the wire's shape, for clients building a
// request: the fields every resource message has.
type WireParts = objectParts

// ToWire converts a model object to its wire parts, with the rules the
// server answers with.
func ToWire(obj model.Object) (WireParts, error) {
	return toParts(obj)
}
