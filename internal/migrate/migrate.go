// Package migrate moves a site's objects from one store to another: `anvil
// export` writes every object of a store (the embedded bbolt one or the
// Kubernetes API), status included, as a multi-document YAML file in the
// shapes internal/model reads and writes (Tinkerbell's, Rufio's and core
// v1), and `anvil restore` writes such a file into a store, all of it or
// nothing. It owns the file's form and the rules of a move: what happens
// to the metadata a store owns, to Secrets, and to objects already in the
// target. It does not open stores (store/backend does) and moves no file
// of the data directory (machine records, the audit log: see
// docs/kubernetes.md, "Moving a site between stores").
//
// Store-owned metadata: uid, resourceVersion and generation mean nothing
// in another store and are dropped (a resourceVersion would also make the
// API server refuse the create). The creation time is history, but a
// store stamps its own on every create, so it moves in the annotation
// model.AnnotationCreatedAt, which a later move keeps: it says when the
// object was first created, whichever store holds it now, and the
// workflow engine orders waiting workflows by it (model.CompareActive).
// What a workflow went through — state, tasks and actions with their
// times, history — is its status, and moves as it is.
package migrate

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/secrets"
	"github.com/anvilproj/anvil/internal/store"
)

// maxListed bounds how many objects one error or warning names; the
// count says how many more there are.
const maxListed = 10

// SecretOpener returns the values of a sealed Secret (secrets.Sealer.Open).
type SecretOpener func(*model.Secret) (map[string][]byte, error)

// ExportOptions says how Export treats what it reads.
type ExportOptions struct {
	// Unseal, when set, opens sealed Secrets so that the file holds their
	// values as plain data (what a cluster and kubectl use). Nil: sealed
	// Secrets are written sealed, and only an Anvil with the key that
	// sealed them can use them.
	Unseal SecretOpener
	// AnvilSecretsOnly writes only Anvil's Secrets: those a Machine or a
	// Task names (authSecretRef) and generated ones (secrets.InStore's).
	// Set it for a cluster, whose other Secrets (service accounts', other
	// applications', Anvil's own keyring) are not the site's.
	AnvilSecretsOnly bool
	// Generated are the generated secrets a store keeps outside its
	// objects (the embedded one: DATA_DIR/secrets/secrets.json). They are
	// written as Secrets in secrets.InStore's form, which is how a
	// cluster keeps them.
	Generated []secrets.Generated
	// Source names the store in the file's header comment.
	Source string
	// Now stamps the header. If nil, time.Now.
	Now func() time.Time
}

// Result is what an Export or Restore did.
type Result struct {
	// Counts is the number of objects of each kind.
	Counts map[string]int
	// Warnings are things the user should know about the move: Secrets
	// written sealed or in the clear, workflows caught running.
	Warnings []string
}

// Total returns the number of objects.
func (r Result) Total() int {
	n := 0
	for _, c := range r.Counts {
		n += c
	}
	return n
}

// Summary is one line of counts, kinds in model.Kinds order: "2 Hardware,
// 1 Template, 3 Workflows, …".
func (r Result) Summary() string {
	var parts []string
	for _, k := range model.Kinds {
		if n := r.Counts[k]; n > 0 {
			many := k + "s"
			if k == model.KindHardware {
				many = k // Tinkerbell's plural too
			}
			parts = append(parts, count(n, k, many))
		}
	}
	if len(parts) == 0 {
		return "no objects"
	}
	return strings.Join(parts, ", ")
}

// Export writes every object of st to w, kind by kind in model.Kinds order
// (so that restoring in file order writes what an object refers to
// first), each kind ordered by namespace and name. Nothing is written to
// w if reading fails part-way (the file is built in memory first).
func Export(ctx context.Context, st store.Reader, w io.Writer, opts ExportOptions) (Result, error) {
	res := Result{Counts: map[string]int{}}
	byKind := map[string][]model.Object{}
	for _, kind := range model.Kinds {
		objs, _, err := st.List(ctx, kind, store.ListOptions{})
		if err != nil {
			return Result{}, fmt.Errorf("export: list %s: %w", kind, err)
		}
		byKind[kind] = objs
	}
	if opts.AnvilSecretsOnly {
		byKind[model.KindSecret] = anvilSecrets(byKind)
	}
	if len(opts.Generated) > 0 {
		for _, g := range opts.Generated {
			byKind[model.KindSecret] = append(byKind[model.KindSecret], secrets.GeneratedObject(g))
		}
		slices.SortFunc(byKind[model.KindSecret], func(a, b model.Object) int {
			return strings.Compare(a.GetObjectMeta().Key(), b.GetObjectMeta().Key())
		})
	}
	var out []model.Object
	var sealed, plain, running []string
	for _, kind := range model.Kinds {
		for _, o := range byKind[kind] {
			o = model.DeepCopy(o)
			m := o.GetObjectMeta()
			// CreatedAt is CreationTimestamp itself unless the annotation
			// holds a valid time from an earlier move, which is kept.
			if m.CreationTimestamp != nil && m.CreatedAt() == m.CreationTimestamp {
				if m.Annotations == nil {
					m.Annotations = map[string]string{}
				}
				m.Annotations[model.AnnotationCreatedAt] = m.CreationTimestamp.UTC().Format(time.RFC3339Nano)
			}
			m.UID, m.ResourceVersion, m.Generation, m.CreationTimestamp = "", "", 0, nil
			switch o := o.(type) {
			case *model.Secret:
				if o.Sealed != "" && opts.Unseal != nil {
					vals, err := opts.Unseal(o)
					if err != nil {
						return Result{}, fmt.Errorf("export: %w", err)
					}
					o.Data = make(map[string]string, len(vals))
					for k, v := range vals {
						o.Data[k] = base64.StdEncoding.EncodeToString(v)
					}
					o.Sealed, o.Keys = "", nil
				}
				if o.Sealed != "" {
					sealed = append(sealed, m.Key())
				} else if len(o.Data) > 0 || len(o.StringData) > 0 {
					plain = append(plain, m.Key())
				}
			case *model.Workflow:
				if o.Status.State == model.StateRunning {
					running = append(running, m.Key())
				}
			}
			out = append(out, o)
			res.Counts[kind]++
		}
	}
	if len(sealed) > 0 {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s written sealed (%s): only an Anvil with the same seal key can open sealed Secrets; export with --unseal for a cluster",
			count(len(sealed), "Secret is", "Secrets are"), listed(sealed)))
	}
	if len(plain) > 0 {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s written with plain values (%s): keep the file as safe as the credentials",
			count(len(plain), "Secret is", "Secrets are"), listed(plain)))
	}
	if len(running) > 0 {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s RUNNING (%s): an agent's token is bound to its workflow's uid, which the target store gives anew, so the agent is refused there; let them finish before moving, or reboot those machines into the boot environment afterwards",
			count(len(running), "workflow is", "workflows are"), listed(running)))
	}

	var buf bytes.Buffer
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	fmt.Fprintf(&buf, "# anvil export of %s at %s: %s\n", opts.Source, now().UTC().Format(time.RFC3339), res.Summary())
	if err := encode(&buf, out); err != nil {
		return Result{}, fmt.Errorf("export: %w", err)
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return Result{}, fmt.Errorf("export: %w", err)
	}
	return res, nil
}

// encode writes objs as YAML documents, each begun by "---".
func encode(w *bytes.Buffer, objs []model.Object) error {
	for _, o := range objs {
		m := o.GetObjectMeta()
		j, err := json.Marshal(o)
		if err != nil {
			return fmt.Errorf("%s %s: %w", model.KindOf(o), m.Key(), err)
		}
		y, err := yaml.JSONToYAML(j)
		if err != nil {
			return fmt.Errorf("%s %s: %w", model.KindOf(o), m.Key(), err)
		}
		w.WriteString("---\n")
		w.Write(y)
	}
	return nil
}

// anvilSecrets returns the Secrets of byKind that a Machine or a Task
// names, and the generated ones.
func anvilSecrets(byKind map[string][]model.Object) []model.Object {
	want := map[string]bool{}
	ref := func(ns string, r model.SecretReference) {
		if r.Name == "" {
			return
		}
		if r.Namespace != "" {
			ns = r.Namespace
		}
		want[ns+"/"+r.Name] = true
	}
	for _, o := range byKind[model.KindMachine] {
		m := o.(*model.Machine)
		ref(m.Namespace, m.Spec.Connection.AuthSecretRef)
	}
	for _, o := range byKind[model.KindTask] {
		t := o.(*model.BMCTask)
		ref(t.Namespace, t.Spec.Connection.AuthSecretRef)
	}
	var out []model.Object
	for _, o := range byKind[model.KindSecret] {
		if want[o.GetObjectMeta().Key()] || secrets.IsGenerated(o.(*model.Secret)) {
			out = append(out, o)
		}
	}
	return out
}

// listed names up to maxListed keys, and how many more there are.
func listed(keys []string) string {
	if len(keys) <= maxListed {
		return strings.Join(keys, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(keys[:maxListed], ", "), len(keys)-maxListed)
}

// count is "1 thing" or "n things".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// SecretSealer prepares Secrets for a target store that keeps them sealed
// (the embedded one): secrets.Sealer's Seal and Open.
type SecretSealer interface {
	Seal(*model.Secret) error
	Open(*model.Secret) (map[string][]byte, error)
}

// RestoreOptions says how Restore writes.
type RestoreOptions struct {
	// Overwrite replaces objects that exist in the target. Without it an
	// object that exists is an error and nothing is written.
	Overwrite bool
	// Sealer, for a target that keeps Secrets sealed (the embedded store),
	// seals plain Secrets and checks that sealed ones open with its key.
	// Nil: the target keeps Secrets as they are (a cluster); sealed ones
	// are kept sealed, with a warning.
	Sealer SecretSealer
	// Generated, for a target that keeps generated secrets outside its
	// objects (the embedded store's secrets.Store), takes the Secrets in
	// secrets.InStore's form. Nil: they are objects like any other (a
	// cluster).
	Generated GeneratedSecrets
}

// GeneratedSecrets is where an embedded store's server keeps generated
// secrets: a secrets.Store.
type GeneratedSecrets interface {
	Get(namespace, name string) (string, secrets.Info, error)
	Import(gs []secrets.Generated, replace bool) error
}

// File is a parsed export (or any manifest file of the stored kinds).
type File struct {
	// Source names the file in errors.
	Source string
	// Docs are its objects, every one valid.
	Docs []model.Document
	// Warnings name input that was ignored (fields Anvil does not know).
	Warnings []string
}

// Parse reads a file (named source in errors) and returns its objects,
// or an error naming every broken document: it never returns some
// objects and an error. Parse before opening the target, so that a
// broken file leaves nothing behind, not even a new empty store.
func Parse(source string, data []byte) (*File, error) {
	res, err := model.ParseManifests(source, data)
	if err != nil {
		return nil, fmt.Errorf("restore: nothing written:\n%w", err)
	}
	return &File{Source: source, Docs: res.Docs, Warnings: res.Warnings}, nil
}

// Restore writes f's objects into st with their status, in one Apply.
// Everything is checked before anything is written — every Secret can be
// sealed or opened, no object exists in the target unless
// opts.Overwrite — so a refused restore leaves the target as it was.
// Objects of the target that the file does not hold are left alone.
func Restore(ctx context.Context, st store.Store, f *File, opts RestoreOptions) (Result, error) {
	source, warns := f.Source, f.Warnings
	docs := slices.Clone(f.Docs)
	res := Result{Counts: map[string]int{}, Warnings: warns}
	// Apply writes in the order given; model.Kinds order puts what an
	// object refers to first, whatever order the file has.
	sort.SliceStable(docs, func(i, j int) bool {
		return kindRank(model.KindOf(docs[i].Object)) < kindRank(model.KindOf(docs[j].Object))
	})
	var errs model.ErrorList
	fail := func(d *model.Document, msg string) {
		errs = append(errs, &model.FieldError{Source: d.Source, Line: d.Line, Doc: d.Describe(), Msg: msg})
	}
	var sealed, exist []string
	var objs []model.Object
	var gens []secrets.Generated
	for i := range docs {
		d := &docs[i]
		o := model.DeepCopy(d.Object) // sealing must not change f
		kind, key := model.KindOf(o), o.GetObjectMeta().Key()
		if s, ok := o.(*model.Secret); ok && opts.Generated != nil && secrets.IsGenerated(s) {
			v, info, err := secrets.ReadGenerated(s)
			if err != nil {
				fail(d, err.Error())
				continue
			}
			switch _, _, err := opts.Generated.Get(info.Namespace, info.Name); {
			case err == nil:
				exist = append(exist, "generated secret "+info.Namespace+"/"+info.Name)
			case !errors.Is(err, secrets.ErrNotFound):
				return Result{}, fmt.Errorf("restore: read the target's generated secrets: %w", err)
			}
			gens = append(gens, secrets.Generated{Info: info, Value: v})
			res.Counts[kind]++
			continue
		}
		if s, ok := o.(*model.Secret); ok {
			switch {
			case opts.Sealer == nil && s.Sealed != "":
				sealed = append(sealed, key)
			case opts.Sealer != nil && s.Sealed != "":
				if _, err := opts.Sealer.Open(s); err != nil {
					fail(d, err.Error()+"; export it again with --unseal, or restore with --seal-key-file naming the key that sealed it")
				}
			case opts.Sealer != nil:
				if err := opts.Sealer.Seal(s); err != nil {
					fail(d, err.Error())
				}
			}
		}
		switch _, err := st.Get(ctx, kind, o.GetObjectMeta().Namespace, o.GetObjectMeta().Name); {
		case err == nil:
			exist = append(exist, kind+" "+key)
		case !errors.Is(err, store.ErrNotFound):
			return Result{}, fmt.Errorf("restore: read the target: %w", err)
		}
		objs = append(objs, o)
		res.Counts[kind]++
	}
	if len(exist) > 0 && !opts.Overwrite {
		errs = append(errs, &model.FieldError{Source: source, Msg: fmt.Sprintf(
			"%s already in the target (%s); --overwrite replaces them", count(len(exist), "object is", "objects are"), listed(exist))})
	}
	if len(errs) > 0 {
		return Result{}, fmt.Errorf("restore: nothing written:\n%w", errs)
	}
	if len(sealed) > 0 {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s kept sealed (%s): the cluster's Anvil opens sealed Secrets only with the same seal key (its --seal-key-file); export with --unseal to store values plain",
			count(len(sealed), "Secret is", "Secrets are"), listed(sealed)))
	}
	if len(exist) > 0 {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s replaced (%s)", count(len(exist), "object", "objects"), listed(exist)))
	}
	// One Apply: the embedded store writes it in one transaction, the
	// Kubernetes one undoes its writes if one fails.
	if len(objs) > 0 {
		if _, err := st.Apply(ctx, objs); err != nil {
			return Result{}, fmt.Errorf("restore: nothing written: %w", err)
		}
	}
	// Last, as the one write that cannot be undone with the others: a
	// local file, checked above, is the least likely to fail.
	if len(gens) > 0 {
		if err := opts.Generated.Import(gens, opts.Overwrite); err != nil {
			return Result{}, fmt.Errorf("restore: the objects were written, not the generated secrets: %w", err)
		}
	}
	return res, nil
}

// kindRank is kind's position in model.Kinds.
func kindRank(kind string) int {
	for i, k := range model.Kinds {
		if k == kind {
			return i
		}
	}
	return len(model.Kinds)
}
