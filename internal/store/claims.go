package store

import (
	"context"
	"fmt"

	"github.com/anvilproj/anvil/internal/model"
)

// ClaimIndexes are the Hardware indexes whose values name one machine:
// DHCP knows a machine by its MAC and reserved IP, the metadata service by
// its IP, the agent protocol by its agent ID, and none of them can tell
// namespaces apart. A value of one of these indexes belongs to one
// Hardware across every namespace; Conflicts finds a write that breaks
// that. (It is checked above the Store, through its indexes, so that
// every implementation keeps it; internal/api refuses the write.)
var ClaimIndexes = []string{IndexMAC, IndexIP, IndexAgentID}

// Claim is one value a Hardware holds in a claim index, with the field it
// comes from ("spec.interfaces[0].dhcp.mac").
type Claim struct {
	Index, Value, Path string
}

// Claims returns what hw holds in ClaimIndexes, in the form the indexes
// hold it (IndexValues), each with its field.
func Claims(hw *model.Hardware) []Claim {
	var out []Claim
	firstMAC := "" // its field: the first MAC is an agent ID too
	for i, ifc := range hw.Spec.Interfaces {
		if ifc.DHCP == nil {
			continue
		}
		p := fmt.Sprintf("spec.interfaces[%d].dhcp", i)
		if mac := ifc.MAC(); mac.IsValid() {
			out = append(out, Claim{IndexMAC, mac.String(), p + ".mac"})
			if firstMAC == "" {
				firstMAC = p + ".mac"
			}
		}
		if ifc.DHCP.IP != nil && ifc.DHCP.IP.Address != "" {
			out = append(out, Claim{IndexIP, ifc.DHCP.IP.Address, p + ".ip.address"})
		}
	}
	for _, id := range hw.AgentIDs() {
		p := "spec.agentID"
		if id != hw.Spec.AgentID {
			p = firstMAC
		}
		out = append(out, Claim{IndexAgentID, id, p})
	}
	return out
}

// Conflict is another Hardware that holds a value hw claims.
type Conflict struct {
	Claim
	Other *model.Hardware
}

// Conflicts returns the Hardware other than hw (by namespace and name)
// that idx finds holding one of hw's claims, each once per value. Give it
// a store.Overlay of the write hw is part of, so that the write's other
// objects count as they will be.
func Conflicts(ctx context.Context, idx Indexer, hw *model.Hardware) ([]Conflict, error) {
	var out []Conflict
	seen := map[[2]string]bool{} // value, other key: a MAC is also the default agent ID
	for _, c := range Claims(hw) {
		others, err := idx.ByIndex(ctx, model.KindHardware, c.Index, c.Value)
		if err != nil {
			return nil, fmt.Errorf("find hardware by %s %s: %w", c.Index, c.Value, err)
		}
		for _, o := range others {
			other, ok := o.(*model.Hardware)
			if !ok || other.Namespace == hw.Namespace && other.Name == hw.Name || seen[[2]string{c.Value, other.Key()}] {
				continue
			}
			seen[[2]string{c.Value, other.Key()}] = true
			out = append(out, Conflict{Claim: c, Other: other})
		}
	}
	return out, nil
}
