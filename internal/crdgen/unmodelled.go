package crdgen

import (
	"fmt"
	"reflect"
	"strings"
)

// unmodelledField is a part of Tinkerbell's (or Rufio's) v1alpha1 schema
// that internal/model does not hold, declared so that the API server
// types it as Tinkerbell's does and `kubectl explain` shows it. Anvil
// neither reads nor writes these fields; an object carrying them keeps
// them as written.
type unmodelledField struct {
	kind string
	// at is the object the fields are added to: "status",
	// "spec.interfaces[]" ([] steps into a list's items).
	at string
	// fields holds the fields to add, as a struct with json tags.
	fields reflect.Type
}

// unmodelledNote begins each declared-but-unmodelled field's description.
const unmodelledNote = "Tinkerbell's; declared for compatibility, not read by Anvil."

var unmodelled = []unmodelledField{
	{"Workflow", "status", reflect.TypeOf(struct {
		AgentID     string `json:"agentID,omitempty"`
		BootOptions *struct {
			AllowNetboot *struct {
				ToggledTrue  bool `json:"toggledTrue,omitempty"`
				ToggledFalse bool `json:"toggledFalse,omitempty"`
			} `json:"allowNetboot,omitempty"`
			Jobs map[string]struct {
				ExistingJobDeleted bool   `json:"existingJobDeleted,omitempty"`
				UID                string `json:"uid,omitempty"`
				Complete           bool   `json:"complete,omitempty"`
			} `json:"jobs,omitempty"`
		} `json:"bootOptions,omitempty"`
	}{})},
	{"Workflow", "status.tasks[].actions[]", reflect.TypeOf(struct {
		Namespaces *struct {
			Network string `json:"network,omitempty"`
			PID     string `json:"pid,omitempty"`
		} `json:"namespaces,omitempty"`
	}{})},
	{"Hardware", "spec", reflect.TypeOf(struct {
		Auto *struct {
			EnrollmentEnabled bool `json:"enrollmentEnabled,omitempty"`
		} `json:"auto,omitempty"`
		References map[string]struct {
			Group     string `json:"group,omitempty"`
			Version   string `json:"version,omitempty"`
			Resource  string `json:"resource,omitempty"`
			Namespace string `json:"namespace,omitempty"`
			Name      string `json:"name,omitempty"`
		} `json:"references,omitempty"`
	}{})},
	{"Hardware", "spec.interfaces[]", reflect.TypeOf(struct {
		Isoboot *struct {
			SourceISO string `json:"sourceISO,omitempty"`
		} `json:"isoboot,omitempty"`
	}{})},
	{"Hardware", "spec.interfaces[].netboot", reflect.TypeOf(struct {
		PXELinux *struct {
			Config string `json:"config,omitempty"`
		} `json:"pxelinux,omitempty"`
		RPi *struct {
			SerialNum    string `json:"serialNum,omitempty"`
			FirmwarePath string `json:"firmwarePath,omitempty"`
			ConfigTxt    string `json:"configTxt,omitempty"`
		} `json:"rpi,omitempty"`
	}{})},
	{"Machine", "spec.connection.providerOptions", homeAssistant},
	{"Task", "spec.connection.providerOptions", homeAssistant},
}

// homeAssistant is Rufio's Home Assistant power provider, which Anvil
// does not drive.
var homeAssistant = reflect.TypeOf(struct {
	HomeAssistant *struct {
		SwitchEntityID             string `json:"switchEntityID,omitempty"`
		PowerOperationDelaySeconds int32  `json:"powerOperationDelaySeconds,omitempty"`
	} `json:"homeassistant,omitempty"`
}{})

// addTo adds u's fields to the object at u.at in root. A field the model
// already declares is an error: the model's type is the one the schema
// must hold, and this entry is then stale.
func (u unmodelledField) addTo(root *Schema, docs Docs) error {
	s := root
	for _, step := range strings.Split(u.at, ".") {
		name, list := strings.CutSuffix(step, "[]")
		next := s.Properties[name]
		if next == nil {
			return fmt.Errorf("unmodelled fields at %s: no %s", u.at, name)
		}
		if list {
			next = next.Items
		}
		if next == nil || next.Type != "object" {
			return fmt.Errorf("unmodelled fields at %s: %s is not an object", u.at, step)
		}
		s = next
	}
	add, err := FromType(u.fields, docs)
	if err != nil {
		return err
	}
	for name, f := range add.Properties {
		if _, ok := s.Properties[name]; ok {
			return fmt.Errorf("unmodelled field %s.%s is in the model now; remove it from crdgen's list", u.at, name)
		}
		f.Description = unmodelledNote
		if s.Properties == nil {
			s.Properties = map[string]*Schema{}
		}
		s.Properties[name] = f
	}
	return nil
}
