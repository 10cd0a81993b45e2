// Package crds holds the CustomResourceDefinitions of Anvil's Kubernetes
// mode: the YAML manifests beside this file, embedded, for Tinkerbell's
// Hardware, Template and Workflow (tinkerbell.org/v1alpha1) and Rufio's
// Machine, Job and Task (bmc.tinkerbell.org/v1alpha1), and Anvil's own
// BootProfile (anvil.dev/v1alpha1). It owns what those
// manifests declare (group, names, version, scope, status subresource,
// printer columns) and reading them; installing them and storing objects
// are their users' (`kubectl apply -f deploy/crds/`, the tests in this
// directory, later the Kubernetes store).
//
// The manifests are Anvil's own, compatible with Tinkerbell's so that a
// cluster's existing objects are served as they are. Their schema blocks
// are generated from internal/model's types by internal/crdgen (`go
// generate ./deploy/crds`): each field Anvil models is typed, and every
// object keeps unknown fields, so a field Anvil does not model is stored
// as written rather than pruned.
package crds

//go:generate go run ../../internal/tools/crdgen -dir . -model ../../internal/model

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"

	"sigs.k8s.io/yaml"
)

//go:embed *.yaml
var manifests embed.FS

// Definition is one CustomResourceDefinition.
type Definition struct {
	// File is the manifest's file name in deploy/crds.
	File string
	// Group, Version, Kind and Plural say where the API server serves
	// the objects: /apis/GROUP/VERSION/namespaces/NS/PLURAL.
	Group, Version, Kind, Plural string
	// JSON is the manifest as JSON, as the API server takes it.
	JSON []byte
}

// All returns every definition, ordered by file name.
func All() ([]Definition, error) {
	names, err := fs.Glob(manifests, "*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []Definition
	for _, name := range names {
		b, err := manifests.ReadFile(name)
		if err != nil {
			return nil, err
		}
		d, err := parse(name, b)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// parse reads one manifest; it must declare one served storage version.
func parse(file string, b []byte) (Definition, error) {
	js, err := yaml.YAMLToJSON(b)
	if err != nil {
		return Definition{}, fmt.Errorf("%s: %w", file, err)
	}
	var crd struct {
		Kind string `json:"kind"`
		Spec struct {
			Group string `json:"group"`
			Names struct {
				Kind   string `json:"kind"`
				Plural string `json:"plural"`
			} `json:"names"`
			Versions []struct {
				Name    string `json:"name"`
				Storage bool   `json:"storage"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		return Definition{}, fmt.Errorf("%s: %w", file, err)
	}
	d := Definition{File: file, Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind, Plural: crd.Spec.Names.Plural, JSON: js}
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			d.Version = v.Name
		}
	}
	if crd.Kind != "CustomResourceDefinition" || d.Group == "" || d.Kind == "" || d.Plural == "" || d.Version == "" {
		return Definition{}, fmt.Errorf("%s: not a CustomResourceDefinition with a group, kind, plural and storage version", file)
	}
	return d, nil
}

// Path returns the API path of the objects of d in namespace ns.
func (d Definition) Path(ns string) string {
	return "/apis/" + d.Group + "/" + d.Version + "/namespaces/" + ns + "/" + d.Plural
}
