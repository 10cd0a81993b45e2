package api

import (
	"github.com/anvilproj/anvil/internal/model"
)

// FromWire converts a Hardware, Template or Workflow message to its model
// object. Clients (the CLI) use it to read server responses with the same
// rules the server uses to read requests.
func FromWire(kind string, m WireMessage) (model.Object, error) {
	return fromWire(kind, m)
}
