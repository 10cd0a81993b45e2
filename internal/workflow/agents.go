package workflow

import (
	"context"
	"fmt"

	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// Agents and workers. An agent names itself when it asks for work (Anvil's
// worker_id=, tink-agent's -id): with its Hardware's spec.agentID when the
// Hardware has one (the boot script passes it, as Tinkerbell's Smee does),
// else with a MAC. A template names the worker of each task, usually the
// MAC of {{.device_1}}. Either may be any of the machine's names: the
// workflow's author need not know whether the Hardware has an agent ID, and
// an agent booted from its second NIC names itself by that NIC's MAC. So
// both are resolved to the machine's one agent ID (AgentIDOf) wherever a
// worker meets an agent: when a workflow is rendered and when an agent asks
// for work or reports.

// AgentIDOf returns the ID tasks of hw's machine are recorded under:
// spec.agentID if set, else its first MAC in canonical form (Tinkerbell's
// default); "" for a Hardware with neither.
func AgentIDOf(hw *model.Hardware) string {
	if ids := hw.AgentIDs(); len(ids) > 0 {
		return ids[0]
	}
	return ""
}

// AgentName is the name an agent gives itself (Anvil's worker_id=,
// tink-agent's -id), read once where it arrives — an RPC, a template's
// worker — and carried as this value after: the name as sent, and the MAC
// it spells when it is one (in any spelling macaddr.Parse reads).
type AgentName struct {
	ID  string
	MAC macaddr.MAC // zero when ID is not a MAC
}

// ParseAgentName reads an agent's name.
func ParseAgentName(id string) AgentName {
	mac, _ := macaddr.Parse(id) // the zero MAC when it is none
	return AgentName{ID: id, MAC: mac}
}

// Canonical is the name's form in tasks and indexes: the MAC in canonical
// form when it is one, else the name as sent.
func (a AgentName) Canonical() string {
	if a.MAC.IsValid() {
		return a.MAC.String()
	}
	return a.ID
}

// AgentNameOf is the name hw's machine is known by (AgentIDOf) as an
// AgentName, from the Hardware's own typed MACs: nothing is parsed.
func AgentNameOf(hw *model.Hardware) AgentName {
	if hw.Spec.AgentID != "" {
		return AgentName{ID: hw.Spec.AgentID}
	}
	if macs := hw.MACs(); len(macs) > 0 {
		return AgentName{ID: macs[0].String(), MAC: macs[0]}
	}
	return AgentName{}
}

// AgentHardware returns the Hardware an agent named a runs on: those with
// its name as spec.agentID or first MAC (store.IndexAgentID) or, when it
// is a MAC in any spelling, as any interface's MAC (store.IndexMAC). Each
// appears once, in the order found.
func AgentHardware(ctx context.Context, idx store.Indexer, a AgentName) ([]*model.Hardware, error) {
	id := a.ID
	lookups := [][2]string{{store.IndexAgentID, id}}
	if a.MAC.IsValid() {
		mac := a.MAC.String()
		lookups = append(lookups, [2]string{store.IndexMAC, mac})
		if mac != id {
			lookups = append(lookups, [2]string{store.IndexAgentID, mac})
		}
	}
	var out []*model.Hardware
	seen := map[string]bool{}
	for _, l := range lookups {
		objs, err := idx.ByIndex(ctx, model.KindHardware, l[0], l[1])
		if err != nil {
			return nil, fmt.Errorf("find the hardware of agent %q: %w", id, err)
		}
		for _, o := range objs {
			hw := o.(*model.Hardware)
			if !seen[hw.Key()] {
				seen[hw.Key()] = true
				out = append(out, hw)
			}
		}
	}
	return out, nil
}

// ResolveAgent returns the agent ID (AgentIDOf) of the one Hardware that id
// names (AgentHardware), looking only in namespace ns unless ns is "". When
// no Hardware or several do, it returns id itself (as WorkerID writes it: a
// MAC in canonical form): nothing better is known, and a workflow naming a
// worker no machine answers to stays as written (and waits).
func ResolveAgent(ctx context.Context, idx store.Indexer, ns string, a AgentName) (string, error) {
	hws, err := AgentHardware(ctx, idx, a)
	if err != nil {
		return "", err
	}
	var found []*model.Hardware
	for _, hw := range hws {
		if ns == "" || hw.Namespace == ns {
			found = append(found, hw)
		}
	}
	if len(found) == 1 {
		if a := AgentIDOf(found[0]); a != "" {
			return a, nil
		}
	}
	return a.Canonical(), nil
}
