package kubernetes_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/deploy/crds"
	"github.com/anvilproj/anvil/deploy/crds/crdstest"
	"github.com/anvilproj/anvil/deploy/kubernetes"
	"github.com/anvilproj/anvil/internal/kubetest"
)

// TestObjects: the manifests declare exactly the objects of the
// deployment, the Namespace first so that `kubectl apply -f` (by file
// name) creates it before what lives in it.
func TestObjects(t *testing.T) {
	objs, err := kubernetes.Objects()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.Kind+" "+o.Namespace+"/"+o.Name)
	}
	want := []string{
		"Namespace /anvil",
		"ServiceAccount anvil/anvil",
		"ClusterRole /anvil",
		"ClusterRoleBinding /anvil",
		"Role anvil/anvil",
		"RoleBinding anvil/anvil",
		"Deployment anvil/anvil",
		"PodDisruptionBudget anvil/anvil",
		"Service anvil/anvil",
	}
	if !slices.Equal(got, want) {
		t.Errorf("objects:\n%q\nwant\n%q", got, want)
	}
}

// TestKustomizationListsEveryManifest: `kubectl apply -k` applies the
// same files as `kubectl apply -f`; a manifest added but not listed would
// be missing from one of the two.
func TestKustomizationListsEveryManifest(t *testing.T) {
	files, err := kubernetes.Files()
	if err != nil {
		t.Fatal(err)
	}
	listed, err := kubernetes.Kustomization()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(listed)
	if !slices.Equal(listed, files) {
		t.Errorf("%s lists %q; the directory has %q", kubernetes.KustomizationFile, listed, files)
	}
}

// TestPaths: where the API server serves an object, for each scope and
// group.
func TestPaths(t *testing.T) {
	objs, err := kubernetes.Objects()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"Namespace":           "/api/v1/namespaces/anvil",
		"ServiceAccount":      "/api/v1/namespaces/anvil/serviceaccounts/anvil",
		"ClusterRole":         "/apis/rbac.authorization.k8s.io/v1/clusterroles/anvil",
		"Deployment":          "/apis/apps/v1/namespaces/anvil/deployments/anvil",
		"PodDisruptionBudget": "/apis/policy/v1/namespaces/anvil/poddisruptionbudgets/anvil",
	}
	for _, o := range objs {
		if w, ok := want[o.Kind]; ok && o.Path() != w {
			t.Errorf("%s.Path() = %s; want %s", o.Kind, o.Path(), w)
		}
	}
}

// fieldManager is the name the test applies the manifests under.
const fieldManager = "anvil-deploy-test"

// TestApplyAndPermissions applies every manifest to a real API server,
// with Anvil's CRDs installed as the operator installs them first; each
// must be accepted as written (strict field validation: a misspelt field
// fails). Then, with a token of the anvil ServiceAccount from the
// TokenRequest API, it checks that the RBAC grants what Anvil does and
// refuses the rest: every verb on every resource through
// SelfSubjectAccessReview, and a few real requests.
func TestApplyAndPermissions(t *testing.T) {
	c := kubetest.Start(t)
	defs, err := crds.All()
	if err != nil {
		t.Fatal(err)
	}
	crdstest.Install(t, c, defs)

	objs, err := kubernetes.Objects()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		status, body := c.Apply(t, o.Path(), fieldManager, o.JSON)
		if status != http.StatusOK && status != http.StatusCreated {
			t.Fatalf("apply %s (%s %s): status %d: %s", o.File, o.Kind, o.Name, status, body)
		}
	}
	checkDeployment(t, c)

	sa := c.As(t, serviceAccountToken(t, c))
	user := sa.JSON(t, http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews",
		map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}, http.StatusCreated)
	if name := dig(user, "status", "userInfo", "username"); name != "system:serviceaccount:anvil:anvil" {
		t.Fatalf("the token is %v's, want the ServiceAccount anvil/anvil's", name)
	}

	for _, a := range expected() {
		if got := allowed(t, sa, a); got != a.allowed {
			t.Errorf("%s: allowed %v, want %v", a, got, a.allowed)
		}
	}
	for _, ns := range []string{"anvil", "default"} {
		nothingElse(t, sa, ns)
	}
	realRequests(t, sa)
}

// nothingElse lists every rule the ServiceAccount has in namespace ns
// (SelfSubjectRulesReview: its ClusterRole's and its Roles' there) and
// fails t if one grants what expected does not: an added verb or resource
// that no check above asks about cannot slip in.
func nothingElse(t *testing.T, sa *kubetest.Cluster, ns string) {
	t.Helper()
	want := map[string]bool{}
	for _, a := range expected() {
		if a.allowed && (a.namespace == ns || a.namespace == "") {
			want[a.what()] = true
		}
	}
	r := sa.JSON(t, http.MethodPost, "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", map[string]any{
		"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
		"spec": map[string]any{"namespace": ns},
	}, http.StatusCreated)
	if inc := dig(r, "status", "incomplete"); inc == true {
		t.Fatalf("rules in %s: the review is incomplete: %v", ns, dig(r, "status", "evaluationError"))
	}
	rules, _ := dig(r, "status", "resourceRules").([]any)
	for _, rule := range rules {
		var rr struct{ Verbs, APIGroups, Resources, ResourceNames []string }
		b, _ := json.Marshal(rule)
		if err := json.Unmarshal(b, &rr); err != nil {
			t.Fatal(err)
		}
		for _, g := range rr.APIGroups {
			for _, res := range rr.Resources {
				if everyoneMay[g+" "+res] {
					continue
				}
				resource, sub, _ := strings.Cut(res, "/")
				for _, v := range rr.Verbs {
					a := access{verb: v, group: g, resource: resource, subresource: sub}
					if !want[a.what()] || len(rr.ResourceNames) > 0 {
						t.Errorf("in %s the ServiceAccount may %s (names %q), which Anvil does not use", ns, a.what(), rr.ResourceNames)
					}
				}
			}
		}
	}
}

// everyoneMay are the rules Kubernetes gives every authenticated user
// (the ClusterRole system:basic-user): asking what one may do.
var everyoneMay = map[string]bool{
	"authorization.k8s.io selfsubjectaccessreviews": true,
	"authorization.k8s.io selfsubjectrulesreviews":  true,
	"authentication.k8s.io selfsubjectreviews":      true,
}

// checkDeployment reads the Deployment back as the API server stored it:
// what the manifests promise about the pods.
func checkDeployment(t *testing.T, c *kubetest.Cluster) {
	t.Helper()
	d := c.JSON(t, http.MethodGet, "/apis/apps/v1/namespaces/anvil/deployments/anvil", nil, http.StatusOK)
	if r := dig(d, "spec", "replicas"); r != 3.0 {
		t.Errorf("replicas %v, want 3", r)
	}
	pod := dig(d, "spec", "template", "spec").(map[string]any)
	if pod["hostNetwork"] != true || pod["dnsPolicy"] != "ClusterFirstWithHostNet" || pod["serviceAccountName"] != "anvil" {
		t.Errorf("pod: hostNetwork %v, dnsPolicy %v, serviceAccountName %v; want true, ClusterFirstWithHostNet, anvil",
			pod["hostNetwork"], pod["dnsPolicy"], pod["serviceAccountName"])
	}
	ctr := pod["containers"].([]any)[0].(map[string]any)
	sc := ctr["securityContext"].(map[string]any)
	caps, _ := json.Marshal(sc["capabilities"])
	if string(caps) != `{"add":["NET_BIND_SERVICE","NET_RAW"],"drop":["ALL"]}` ||
		sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false {
		t.Errorf("container securityContext %v", sc)
	}
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
		if p := dig(ctr, probe, "httpGet", "path"); p != path {
			t.Errorf("%s path %v, want %s", probe, p, path)
		}
	}
	// On the host's network a container port is a host port: two
	// replicas cannot share a node, which the rollout must allow for.
	for _, p := range ctr["ports"].([]any) {
		p := p.(map[string]any)
		if p["hostPort"] != p["containerPort"] {
			t.Errorf("port %v: hostPort %v, want the container port", p["name"], p["hostPort"])
		}
	}
	if s := dig(d, "spec", "strategy", "rollingUpdate", "maxSurge"); s != 0.0 {
		t.Errorf("maxSurge %v, want 0", s)
	}
	env := map[string]any{}
	for _, e := range ctr["env"].([]any) {
		e := e.(map[string]any)
		env[e["name"].(string)] = dig(e, "valueFrom", "fieldRef", "fieldPath")
	}
	for name, field := range map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "ANVIL_PUBLIC_IP": "status.podIP"} {
		if env[name] != field {
			t.Errorf("env %s from %v, want %s", name, env[name], field)
		}
	}
	pdb := c.JSON(t, http.MethodGet, "/apis/policy/v1/namespaces/anvil/poddisruptionbudgets/anvil", nil, http.StatusOK)
	if m := dig(pdb, "spec", "minAvailable"); m != 2.0 {
		t.Errorf("PodDisruptionBudget minAvailable %v, want 2", m)
	}
}

// serviceAccountToken asks the TokenRequest API for a token of the anvil
// ServiceAccount, as the kubelet does for its pods.
func serviceAccountToken(t *testing.T, c *kubetest.Cluster) string {
	t.Helper()
	tr := c.JSON(t, http.MethodPost, "/api/v1/namespaces/anvil/serviceaccounts/anvil/token", map[string]any{
		"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
		"spec": map[string]any{"expirationSeconds": 600},
	}, http.StatusCreated)
	token, _ := dig(tr, "status", "token").(string)
	if token == "" {
		t.Fatalf("TokenRequest answered no token: %v", tr)
	}
	return token
}

// access is one question to the authorizer: may the ServiceAccount do
// verb on group/resource[/subresource] in namespace ("" for all
// namespaces or a cluster-scoped resource)?
type access struct {
	namespace, verb, group, resource, subresource string
	allowed                                       bool
}

func (a access) String() string {
	ns := a.namespace
	if ns == "" {
		ns = "(all namespaces)"
	}
	return a.what() + " in " + ns
}

// what is a without its namespace: "verb resource.group/subresource".
func (a access) what() string {
	r := a.resource
	if a.group != "" {
		r += "." + a.group
	}
	if a.subresource != "" {
		r += "/" + a.subresource
	}
	return a.verb + " " + r
}

var (
	objectVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	statusVerbs = []string{"get", "update", "patch"}
)

// expected is what issue 17's deployment says Anvil may do, written from
// that list rather than from the manifests, and a selection of what it
// must not.
func expected() []access {
	var out []access
	kinds := map[string][]string{
		"tinkerbell.org":     {"hardware", "templates", "workflows"},
		"bmc.tinkerbell.org": {"machines", "jobs", "tasks"},
		"anvil.dev":          {"bootprofiles"},
	}
	// Anvil's objects live in any namespace (an organisation); "" asks
	// for every namespace at once, as an informer lists and watches.
	for _, ns := range []string{"", "default", "tenant-a"} {
		for group, resources := range kinds {
			for _, r := range resources {
				for _, v := range objectVerbs {
					out = append(out, access{ns, v, group, r, "", true})
				}
				for _, v := range statusVerbs {
					out = append(out, access{ns, v, group, r, "status", true})
				}
				out = append(out, access{ns, "delete", group, r, "status", false})
			}
		}
		for _, v := range objectVerbs {
			out = append(out, access{ns, v, "", "secrets", "", true})
		}
	}
	for _, v := range []string{"get", "list", "watch", "create", "update", "patch"} {
		out = append(out, access{"anvil", v, "coordination.k8s.io", "leases", "", true})
	}
	for _, v := range []string{"create", "patch"} {
		out = append(out, access{"anvil", v, "", "events", "", true})
	}
	return append(out,
		// What it could use to reach beyond Anvil.
		access{"", "list", "", "pods", "", false},
		access{"anvil", "list", "", "pods", "", false},
		access{"anvil", "create", "", "pods", "", false},
		access{"anvil", "create", "", "pods", "exec", false},
		access{"", "list", "", "nodes", "", false},
		access{"", "get", "", "nodes", "", false},
		access{"", "create", "apiextensions.k8s.io", "customresourcedefinitions", "", false},
		access{"", "update", "apiextensions.k8s.io", "customresourcedefinitions", "", false},
		access{"", "delete", "apiextensions.k8s.io", "customresourcedefinitions", "", false},
		access{"", "get", "", "configmaps", "", false},
		access{"anvil", "create", "", "serviceaccounts", "token", false},
		// Its own deployment and RBAC: it cannot widen what it may do.
		access{"anvil", "patch", "apps", "deployments", "", false},
		access{"", "create", "rbac.authorization.k8s.io", "clusterrolebindings", "", false},
		access{"anvil", "create", "rbac.authorization.k8s.io", "roles", "", false},
		access{"anvil", "escalate", "rbac.authorization.k8s.io", "roles", "", false},
		// Leases and events only in its namespace: another controller's
		// Lease (kube-system's) is not Anvil's to take, nor to delete.
		access{"kube-system", "update", "coordination.k8s.io", "leases", "", false},
		access{"default", "create", "coordination.k8s.io", "leases", "", false},
		access{"anvil", "delete", "coordination.k8s.io", "leases", "", false},
		access{"default", "create", "", "events", "", false},
		access{"anvil", "delete", "", "events", "", false},
	)
}

// allowed asks the API server whether the caller of sa may do a.
func allowed(t *testing.T, sa *kubetest.Cluster, a access) bool {
	t.Helper()
	attrs := map[string]any{"verb": a.verb, "group": a.group, "resource": a.resource}
	if a.namespace != "" {
		attrs["namespace"] = a.namespace
	}
	if a.subresource != "" {
		attrs["subresource"] = a.subresource
	}
	r := sa.JSON(t, http.MethodPost, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", map[string]any{
		"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
		"spec": map[string]any{"resourceAttributes": attrs},
	}, http.StatusCreated)
	return dig(r, "status", "allowed") == true
}

// realRequests makes, with the ServiceAccount's token, requests Anvil's
// replicas make, and some they must not be able to: the authorizer's
// answers above hold for real calls.
func realRequests(t *testing.T, sa *kubetest.Cluster) {
	t.Helper()
	for _, r := range []struct {
		name, method, path string
		body               any
		want               int
	}{
		{"list Hardware in every namespace", http.MethodGet, "/apis/tinkerbell.org/v1alpha1/hardware", nil, http.StatusOK},
		{"create a Hardware", http.MethodPost, "/apis/tinkerbell.org/v1alpha1/namespaces/default/hardware", map[string]any{
			"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware",
			"metadata": map[string]any{"name": "node07"},
			"spec":     map[string]any{"interfaces": []any{map[string]any{"dhcp": map[string]any{"mac": "3c:ec:ef:00:00:07"}}}},
		}, http.StatusCreated},
		{"write a Hardware's status", http.MethodPatch, "/apis/tinkerbell.org/v1alpha1/namespaces/default/hardware/node07/status",
			[]byte(`{"status":{"state":"provisioned"}}`), http.StatusOK},
		{"store BMC credentials", http.MethodPost, "/api/v1/namespaces/default/secrets", map[string]any{
			"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "bmc-node07"},
			"type": "kubernetes.io/basic-auth", "stringData": map[string]any{"username": "admin", "password": "change-me"},
		}, http.StatusCreated},
		{"take the leader Lease", http.MethodPost, "/apis/coordination.k8s.io/v1/namespaces/anvil/leases", map[string]any{
			"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": map[string]any{"name": "anvil-leader"},
			"spec": map[string]any{"holderIdentity": "anvil-0", "leaseDurationSeconds": 15},
		}, http.StatusCreated},
		{"record an event", http.MethodPost, "/api/v1/namespaces/anvil/events", map[string]any{
			"apiVersion": "v1", "kind": "Event", "metadata": map[string]any{"name": "anvil.1"},
			"reason": "LeaderElection", "message": "anvil-0 became leader", "type": "Normal",
			"involvedObject": map[string]any{"kind": "Lease", "namespace": "anvil", "name": "anvil-leader"},
		}, http.StatusCreated},
		{"list pods", http.MethodGet, "/api/v1/pods", nil, http.StatusForbidden},
		{"list nodes", http.MethodGet, "/api/v1/nodes", nil, http.StatusForbidden},
		{"create a CRD", http.MethodPost, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": "things.example.org"},
		}, http.StatusForbidden},
		{"delete the leader Lease", http.MethodDelete, "/apis/coordination.k8s.io/v1/namespaces/anvil/leases/anvil-leader", nil, http.StatusForbidden},
		{"scale itself", http.MethodPatch, "/apis/apps/v1/namespaces/anvil/deployments/anvil",
			[]byte(`{"spec":{"replicas":1}}`), http.StatusForbidden},
	} {
		var status int
		var body []byte
		if r.method == http.MethodPatch {
			status, body = sa.MergePatch(t, r.path, r.body)
		} else {
			status, body = sa.Do(t, r.method, r.path, r.body, "application/json")
		}
		if status != r.want {
			t.Errorf("%s (%s %s): status %d, want %d: %s", r.name, r.method, r.path, status, r.want, trim(body))
		}
	}
}

// dig returns the value at keys in nested JSON objects, nil if absent.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func trim(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return fmt.Sprintf("%q", s)
}
