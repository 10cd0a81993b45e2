// Package kubernetes holds the manifests that run Anvil in a Kubernetes
// cluster: the YAML files beside this file, embedded, applied as they are
// by `kubectl apply -k deploy/kubernetes` (the file Kustomization lists
// them) or `kubectl apply -f deploy/kubernetes/` (the numbered names put
// the Namespace first). They declare the namespace anvil, the
// ServiceAccount and the RBAC Anvil needs and no more, the Deployment of
// three `anvil serve --store kubernetes` replicas on the hosts' network,
// its PodDisruptionBudget and the API's Service.
//
// The package owns what those manifests declare and reading them, and
// where the API server serves each object (Object.Path); applying them is
// kubectl's, or the tests' in this directory, which apply them to a real
// API server and prove, with the ServiceAccount's own token, what it may
// and may not do. The CRDs are deploy/crds', installed before these.
package kubernetes

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
	sigsyaml "sigs.k8s.io/yaml"
)

//go:embed *.yaml Kustomization
var manifests embed.FS

// KustomizationFile is the name of the kustomization in this directory.
const KustomizationFile = "Kustomization"

// Object is one object of a manifest.
type Object struct {
	// File is the manifest's file name in deploy/kubernetes.
	File string
	// APIVersion, Kind, Namespace ("" for a cluster-scoped object) and
	// Name identify it.
	APIVersion, Kind, Namespace, Name string
	// JSON is the object as JSON, as the API server takes it.
	JSON []byte

	resource resource
}

// resource is where the API server serves a kind.
type resource struct {
	plural     string
	namespaced bool
}

// resources are the kinds the manifests use. An object of another kind is
// refused by Objects, so a manifest added with a new kind must say here
// where it is served.
var resources = map[string]resource{
	"v1/Namespace":      {"namespaces", false},
	"v1/ServiceAccount": {"serviceaccounts", true},
	"v1/Service":        {"services", true},
	"rbac.authorization.k8s.io/v1/ClusterRole":        {"clusterroles", false},
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": {"clusterrolebindings", false},
	"rbac.authorization.k8s.io/v1/Role":               {"roles", true},
	"rbac.authorization.k8s.io/v1/RoleBinding":        {"rolebindings", true},
	"apps/v1/Deployment":                              {"deployments", true},
	"policy/v1/PodDisruptionBudget":                   {"poddisruptionbudgets", true},
}

// Files returns the manifests' file names, in the order kubectl applies
// them with -f (by name).
func Files() ([]string, error) {
	names, err := fs.Glob(manifests, "*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

// Objects returns every object of every manifest, in file order and, within
// a file, in the order written.
func Objects() ([]Object, error) {
	files, err := Files()
	if err != nil {
		return nil, err
	}
	var out []Object
	for _, f := range files {
		b, err := manifests.ReadFile(f)
		if err != nil {
			return nil, err
		}
		objs, err := parse(f, b)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// Kustomization returns the resources the kustomization lists.
func Kustomization() ([]string, error) {
	b, err := manifests.ReadFile(KustomizationFile)
	if err != nil {
		return nil, err
	}
	var k struct {
		Resources []string `yaml:"resources"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		return nil, fmt.Errorf("%s: %w", KustomizationFile, err)
	}
	return k.Resources, nil
}

// parse reads the objects of one manifest, a YAML stream.
func parse(file string, b []byte) ([]Object, error) {
	var out []Object
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for i := 1; ; i++ {
		var doc yaml.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		y, err := yaml.Marshal(&doc)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		js, err := sigsyaml.YAMLToJSON(y)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := sigsyaml.Unmarshal(js, &meta); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		o := Object{File: file, APIVersion: meta.APIVersion, Kind: meta.Kind,
			Namespace: meta.Metadata.Namespace, Name: meta.Metadata.Name, JSON: js}
		where := fmt.Sprintf("%s: document %d (%s %s)", file, i, o.Kind, o.Name)
		r, ok := resources[o.APIVersion+"/"+o.Kind]
		switch {
		case o.Kind == "" || o.APIVersion == "" || o.Name == "":
			return nil, fmt.Errorf("%s: want apiVersion, kind and metadata.name", where)
		case !ok:
			return nil, fmt.Errorf("%s: apiVersion %s kind %s is not one this package knows the path of", where, o.APIVersion, o.Kind)
		case r.namespaced && o.Namespace == "":
			return nil, fmt.Errorf("%s: namespaced, but has no metadata.namespace", where)
		case !r.namespaced && o.Namespace != "":
			return nil, fmt.Errorf("%s: cluster-scoped, but has metadata.namespace %s", where, o.Namespace)
		}
		o.resource = r
		out = append(out, o)
	}
}

// Path returns the API path of the object:
// /api/v1/namespaces/NS/PLURAL/NAME, or /apis/GROUP/VERSION/… for a kind
// in a group, without the namespace for a cluster-scoped kind.
func (o Object) Path() string {
	p := "/apis/" + o.APIVersion
	if !strings.Contains(o.APIVersion, "/") { // the core group
		p = "/api/" + o.APIVersion
	}
	if o.resource.namespaced {
		p += "/namespaces/" + o.Namespace
	}
	return p + "/" + o.resource.plural + "/" + o.Name
}
