package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// conflictRetries bounds how often an unconditional write is tried again
// from a fresh read when it met a conflict anyway (the API server gave up
// its own retries of a patch, or a create met a concurrent one).
const conflictRetries = 8

// prepare checks obj and returns its kind's cache and a private copy with
// the store-owned metadata cleared (the resourceVersion is kept: it is
// the caller's precondition).
func (s *Store) prepare(obj model.Object) (*kindCache, model.Object, error) {
	if obj == nil {
		return nil, nil, fmt.Errorf("nil object: %w", store.ErrInvalid)
	}
	kind := model.KindOf(obj)
	if kind == "" {
		return nil, nil, fmt.Errorf("%T is not a stored kind: %w", obj, store.ErrInvalid)
	}
	if tk := obj.GetTypeMeta().Kind; tk != "" && tk != kind {
		return nil, nil, fmt.Errorf("%T says kind %q: %w", obj, tk, store.ErrInvalid)
	}
	if s.isClosed() {
		return nil, nil, store.ErrClosed
	}
	priv := model.DeepCopy(obj)
	*priv.GetTypeMeta() = model.TypeMeta{APIVersion: model.APIVersionOf(kind), Kind: kind}
	m := priv.GetObjectMeta()
	if m.Namespace == "" {
		m.Namespace = model.DefaultNamespace
	}
	if err := store.CheckKey(kind, m.Namespace, m.Name); err != nil {
		return nil, nil, err
	}
	if s.cfg.Namespace != "" && m.Namespace != s.cfg.Namespace {
		return nil, nil, fmt.Errorf("%s %s: this store is limited to namespace %s: %w", kind, m.Key(), s.cfg.Namespace, store.ErrInvalid)
	}
	if m.ResourceVersion != "" {
		if _, err := store.ParseResourceVersion(m.ResourceVersion); err != nil {
			return nil, nil, fmt.Errorf("%s %s: %w", kind, m.Key(), err)
		}
	}
	m.UID, m.Generation, m.CreationTimestamp = "", 0, nil
	return s.kinds[kind], priv, nil
}

// Create implements store.Writer.
func (s *Store) Create(ctx context.Context, obj model.Object) (model.Object, error) {
	kc, priv, err := s.prepare(obj)
	if err != nil {
		return nil, err
	}
	if m := priv.GetObjectMeta(); m.ResourceVersion != "" {
		return nil, fmt.Errorf("%s %s: resourceVersion must be empty on create: %w", kc.kind, m.Key(), store.ErrInvalid)
	}
	out, err := s.create(ctx, kc, priv)
	if err != nil {
		return nil, err
	}
	return model.DeepCopy(out), nil
}

// create writes a new object, then its status, and waits for the cache.
func (s *Store) create(ctx context.Context, kc *kindCache, obj model.Object) (model.Object, error) {
	m := obj.GetObjectMeta()
	body, err := encode(kc.kind, obj)
	if err != nil {
		return nil, err
	}
	status, _ := body["status"].(map[string]any)
	if kc.res.status {
		delete(body, "status") // the main resource ignores it
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", kc.kind, m.Key(), err)
	}
	w, err := s.postRaw(ctx, kc, m.Namespace, m.Name, b)
	if errors.Is(err, store.ErrNotFound) && s.namespaceMissing(ctx, m.Namespace) {
		if nerr := s.ensureNamespace(ctx, m.Namespace); nerr != nil {
			return nil, fmt.Errorf("%s %s: %w", kc.kind, m.Key(), nerr)
		}
		w, err = s.postRaw(ctx, kc, m.Namespace, m.Name, b)
	}
	if err != nil {
		return nil, err
	}
	if kc.res.status && len(status) > 0 {
		patch := map[string]any{"status": status}
		setPrecondition(patch, w.rv)
		sw, err := s.patch(ctx, kc, m.Namespace, m.Name, patch, "status")
		if err != nil {
			// Do not leave half an object behind.
			uid := w.uid
			_ = s.writer(kc, m.Namespace).Delete(context.WithoutCancel(ctx), m.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			return nil, err
		}
		w = sw
	}
	return s.settle(ctx, kc, m.Namespace+"/"+m.Name, w)
}

// namespaceMissing reports whether namespace ns does not exist (a create
// in it was refused as not found: the namespace, or the kind's CRD).
func (s *Store) namespaceMissing(ctx context.Context, ns string) bool {
	_, err := s.wdyn.Resource(namespacesGVR).Get(ctx, ns, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// settle waits until this replica's cache has seen the write w to the
// object key, so the caller reads its own write, and returns the object
// as written: the cache's, which the watch decoded anyway, unless the
// cache has moved past it or did not see it in time (then w's own bytes).
func (s *Store) settle(ctx context.Context, kc *kindCache, key string, w written) (model.Object, error) {
	rv, err := store.ParseResourceVersion(w.rv)
	if err != nil {
		return nil, err
	}
	if !kc.waitFor(ctx, s.cfg.SyncTimeout, func() bool { return kc.rv >= rv }) && ctx.Err() == nil {
		s.log.Warn("kube store: write not yet seen by this replica's watch", "kind", kc.kind,
			"object", key, "resourceVersion", rv, "waited", s.cfg.SyncTimeout)
	}
	kc.mu.Lock()
	e := kc.objs[key]
	kc.mu.Unlock()
	if e != nil && e.rv == rv {
		return e.obj, nil
	}
	obj, err := decodeRaw(kc.kind, w.body)
	if err != nil {
		return nil, fmt.Errorf("%s %s as stored: %w", kc.kind, key, err)
	}
	return obj, nil
}

// Update implements store.Writer. With a resourceVersion the update is
// conditional on it: another writer's change in between is an
// ErrConflict, never overwritten. Without, the caller's changes — what
// differs between obj and the object as this replica has it — are sent
// as merge patches without a precondition, which the API server applies
// to the newest version: another writer's change survives unless it is
// to a field the caller changed too (the caller's wins), and a busy
// object costs no re-read-and-retry rounds.
func (s *Store) Update(ctx context.Context, obj model.Object) (model.Object, error) {
	kc, priv, err := s.prepare(obj)
	if err != nil {
		return nil, err
	}
	m := priv.GetObjectMeta()
	want := m.ResourceVersion
	for attempt := 0; ; attempt++ {
		cur, err := s.current(ctx, kc, m.Namespace, m.Name, want, attempt > 0)
		if err != nil {
			return nil, err
		}
		out, err := s.update(ctx, kc, cur, priv, want != "")
		if err != nil && want == "" && errors.Is(err, store.ErrConflict) && attempt < conflictRetries {
			continue
		}
		if err != nil {
			return nil, err
		}
		return model.DeepCopy(out), nil
	}
}

// StoredVersion implements store.LiveReader: it reads the object's
// resourceVersion from the API server, not from this replica's cache,
// which may not have seen a write another replica acknowledged yet.
func (s *Store) StoredVersion(ctx context.Context, kind, namespace, name string) (string, error) {
	kc, err := s.kind(kind)
	if err != nil {
		return "", err
	}
	return s.storedVersion(ctx, kc, namespace, name)
}

// cached reports whether this replica's cache holds the object key.
func (s *Store) cached(kc *kindCache, key string) bool {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	return kc.objs[key] != nil
}

// current returns the stored object to update from: the cached one when it
// is the version wanted (or any version is, and fresh is false), else the
// API server's.
func (s *Store) current(ctx context.Context, kc *kindCache, ns, name, want string, fresh bool) (model.Object, error) {
	if !fresh {
		kc.mu.Lock()
		e := kc.objs[ns+"/"+name]
		kc.mu.Unlock()
		if e != nil && (want == "" || e.obj.GetObjectMeta().ResourceVersion == want) {
			return e.obj, nil
		}
	}
	b, err := s.do(ctx, s.raw.Get().AbsPath(kc.res.path(ns, name)...))
	if err != nil {
		return nil, apiError(kc.kind, ns, name, err)
	}
	cur, err := decodeRaw(kc.kind, b)
	if err != nil {
		return nil, err
	}
	if have := cur.GetObjectMeta().ResourceVersion; want != "" && have != want {
		return nil, fmt.Errorf("%s %s/%s: resourceVersion %s, stored %s: %w", kc.kind, ns, name, want, have, store.ErrConflict)
	}
	return cur, nil
}

// update writes what differs between cur (as stored, or as this replica
// last saw it) and next: metadata and spec on the resource, then status
// on its subresource, each a merge patch — with conditional, conditional
// on the version it starts from (cur's, then the first patch's). Fields
// neither knows (another tool's) are left as they are.
func (s *Store) update(ctx context.Context, kc *kindCache, cur, next model.Object, conditional bool) (model.Object, error) {
	m := cur.GetObjectMeta()
	if conditional && onlyStatusDiffers(cur, next) {
		return s.putStatus(ctx, kc, cur, next)
	}
	from, err := encode(kc.kind, cur)
	if err != nil {
		return nil, err
	}
	to, err := encode(kc.kind, next)
	if err != nil {
		return nil, err
	}
	for _, o := range []map[string]any{from, to} {
		if meta, ok := o["metadata"].(map[string]any); ok {
			for _, f := range []string{"resourceVersion", "uid", "generation", "creationTimestamp"} {
				delete(meta, f)
			}
		}
	}
	var fromStatus, toStatus any
	if kc.res.status {
		fromStatus, toStatus = from["status"], to["status"]
		delete(from, "status")
		delete(to, "status")
	}
	rv := m.ResourceVersion
	var w written
	if p := mergePatch(from, to); p != nil {
		switch {
		case hasList(p):
			// A merge patch replaces a list whole, and Anvil's elements
			// lack what it does not model: take the stored elements,
			// with what the caller changed in them, from the object
			// as the API server has it. The patch is then right for
			// that version only. (Only for metadata and spec, which
			// change seldom: the extra read would double the requests
			// of status writes, whose lists are Anvil's own.)
			raw, err := s.writer(kc, m.Namespace).Get(ctx, m.Name, metav1.GetOptions{})
			if err != nil {
				return nil, apiError(kc.kind, m.Namespace, m.Name, err)
			}
			if conditional && raw.GetResourceVersion() != rv {
				return nil, fmt.Errorf("%s %s/%s: resourceVersion %s, stored %s: %w", kc.kind, m.Namespace, m.Name, rv, raw.GetResourceVersion(), store.ErrConflict)
			}
			keepForeign(p, from, to, raw.Object)
			setPrecondition(p, raw.GetResourceVersion())
		case conditional:
			setPrecondition(p, rv)
		}
		if w, err = s.patch(ctx, kc, m.Namespace, m.Name, p); err != nil {
			return nil, err
		}
		rv = w.rv
	}
	if p := mergePatch(map[string]any{"status": fromStatus}, map[string]any{"status": toStatus}); kc.res.status && p != nil {
		if conditional {
			setPrecondition(p, rv)
		}
		sw, err := s.patch(ctx, kc, m.Namespace, m.Name, p, "status")
		if err != nil {
			if w.rv != "" {
				return nil, fmt.Errorf("%w (the metadata and spec were written, at resourceVersion %s)", err, rv)
			}
			return nil, err
		}
		w = sw
	}
	if w.rv == "" {
		return cur, nil // nothing changed: the API server would not write either
	}
	return s.settle(ctx, kc, m.Namespace+"/"+m.Name, w)
}

// onlyStatusDiffers reports whether next is a Workflow that differs from
// cur in its status alone (the store-owned metadata aside): an agent's
// report, which putStatus writes without encoding to maps or a diff. Only
// Workflows: Anvil is the one writer of a Workflow's status, so a
// conditional status write replaces it whole (a PUT, which costs the API
// server about two thirds of a merge patch: no patch to apply to the
// stored object). Fields of it Anvil does not model are dropped: by the
// Kubernetes convention the status belongs to the object's controller,
// and for a Workflow that is Anvil. Other kinds' status is merged.
func onlyStatusDiffers(cur, next model.Object) bool {
	c, ok1 := cur.(*model.Workflow)
	n, ok2 := next.(*model.Workflow)
	if !ok1 || !ok2 {
		return false
	}
	cm, nm := c.ObjectMeta, n.ObjectMeta
	for _, m := range []*model.ObjectMeta{&cm, &nm} {
		m.ResourceVersion, m.UID, m.Generation, m.CreationTimestamp = "", "", 0, nil
	}
	return reflect.DeepEqual(cm, nm) && reflect.DeepEqual(c.Spec, n.Spec)
}

// statusPut is the body of a status PUT: the API server takes the status
// from it, and the rest from the stored object whose resourceVersion it
// names (or refuses it as a conflict).
type statusPut struct {
	model.TypeMeta
	Metadata struct {
		Name            string `json:"name"`
		Namespace       string `json:"namespace"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Status *model.WorkflowStatus `json:"status"`
}

// putStatus replaces the status of cur, conditional on its version, with
// next's (see onlyStatusDiffers).
func (s *Store) putStatus(ctx context.Context, kc *kindCache, cur, next model.Object) (model.Object, error) {
	c, n := cur.(*model.Workflow), next.(*model.Workflow)
	if reflect.DeepEqual(c.Status, n.Status) {
		return cur, nil // nothing changed: the API server would not write either
	}
	m := cur.GetObjectMeta()
	var body statusPut
	body.TypeMeta = model.TypeMeta{APIVersion: model.APIVersionOf(kc.kind), Kind: kc.kind}
	body.Metadata.Name, body.Metadata.Namespace, body.Metadata.ResourceVersion = m.Name, m.Namespace, m.ResourceVersion
	body.Status = &n.Status
	b, err := json.Marshal(&body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", kc.kind, m.Key(), err)
	}
	w, err := s.send(ctx, s.raw.Put().AbsPath(kc.res.path(m.Namespace, m.Name, "status")...).Body(b), kc.kind, m.Namespace, m.Name)
	if err != nil {
		return nil, err
	}
	return s.settle(ctx, kc, m.Key(), w)
}

// hasList reports whether merge patch p sets a list anywhere.
func hasList(p map[string]any) bool {
	for _, v := range p {
		switch v := v.(type) {
		case []any:
			return true
		case map[string]any:
			if hasList(v) {
				return true
			}
		}
	}
	return false
}

// keepForeign rewrites every list in merge patch p (made from from to to)
// as the stored list raw with the changes from from to to made in it, so
// that fields of its elements that from and to lack (another tool's) are
// kept.
func keepForeign(p, from, to, raw map[string]any) {
	for k, pv := range p {
		switch pv.(type) {
		case map[string]any:
			fm, _ := from[k].(map[string]any)
			tm, _ := to[k].(map[string]any)
			rm, _ := raw[k].(map[string]any)
			if fm != nil && tm != nil && rm != nil {
				keepForeign(pv.(map[string]any), fm, tm, rm)
			}
		case []any:
			p[k] = overlay(raw[k], from[k], to[k])
		}
	}
}

// overlay returns stored value raw with the change from from to to made
// in it: where the caller changed nothing, raw as it is; in maps, key by
// key; in lists of one length, element by element; else to.
func overlay(raw, from, to any) any {
	if raw == nil {
		return to
	}
	if reflect.DeepEqual(from, to) {
		return raw
	}
	switch t := to.(type) {
	case map[string]any:
		f, fok := from.(map[string]any)
		r, rok := raw.(map[string]any)
		if !fok || !rok {
			return to
		}
		out := make(map[string]any, len(r))
		for k, v := range r {
			out[k] = v
		}
		for k := range f {
			if _, ok := t[k]; !ok {
				delete(out, k)
			}
		}
		for k, tv := range t {
			out[k] = overlay(r[k], f[k], tv)
		}
		return out
	case []any:
		f, fok := from.([]any)
		r, rok := raw.([]any)
		if !fok || !rok || len(f) != len(t) || len(r) != len(t) {
			return to
		}
		out := make([]any, len(t))
		for i := range t {
			out[i] = overlay(r[i], f[i], t[i])
		}
		return out
	}
	return to
}

// setPrecondition makes a merge patch conditional on resourceVersion rv.
func setPrecondition(p map[string]any, rv string) {
	meta, _ := p["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		p["metadata"] = meta
	}
	meta["resourceVersion"] = rv
}

// mergePatch returns the JSON merge patch (RFC 7386) that turns from into
// to, or nil if they are equal. Lists are replaced whole, as RFC 7386 says.
func mergePatch(from, to map[string]any) map[string]any {
	p := map[string]any{}
	for k := range from {
		if _, ok := to[k]; !ok {
			p[k] = nil
		}
	}
	for k, tv := range to {
		fv, ok := from[k]
		if !ok || fv == nil {
			if tv != nil {
				p[k] = tv
			}
			continue
		}
		fm, fok := fv.(map[string]any)
		tm, tok := tv.(map[string]any)
		if fok && tok {
			if sub := mergePatch(fm, tm); sub != nil {
				p[k] = sub
			}
			continue
		}
		if !reflect.DeepEqual(fv, tv) {
			p[k] = tv
		}
	}
	if len(p) == 0 {
		return nil
	}
	return p
}

// Delete implements store.Writer; a non-empty resourceVersion is a
// precondition.
func (s *Store) Delete(ctx context.Context, kind, namespace, name, resourceVersion string) error {
	kc, err := s.kind(kind)
	if err != nil {
		return err
	}
	if namespace == "" {
		namespace = model.DefaultNamespace
	}
	if err := store.CheckKey(kind, namespace, name); err != nil {
		return err
	}
	var opts metav1.DeleteOptions
	if resourceVersion != "" {
		if _, err := store.ParseResourceVersion(resourceVersion); err != nil {
			return fmt.Errorf("%s %s/%s: %w", kind, namespace, name, err)
		}
		opts.Preconditions = &metav1.Preconditions{ResourceVersion: &resourceVersion}
	}
	key := namespace + "/" + name
	kc.mu.Lock()
	var uid string
	if e := kc.objs[key]; e != nil {
		uid = e.obj.GetObjectMeta().UID
	}
	kc.mu.Unlock()
	if err := s.writer(kc, namespace).Delete(ctx, name, opts); err != nil {
		return apiError(kind, namespace, name, err)
	}
	gone := func() bool { e := kc.objs[key]; return e == nil || e.obj.GetObjectMeta().UID != uid }
	if !kc.waitFor(ctx, s.cfg.SyncTimeout, gone) && ctx.Err() == nil {
		s.log.Warn("kube store: deletion not yet seen by this replica's watch", "kind", kind, "object", key)
	}
	return nil
}

// Apply implements store.Writer. Every object is checked before any is
// written; the writes are then made in order, and undone in reverse order
// if one fails (see the package comment: Kubernetes has no transaction
// across objects).
func (s *Store) Apply(ctx context.Context, objs []model.Object) ([]model.Object, error) {
	kcs := make([]*kindCache, len(objs))
	privs := make([]model.Object, len(objs))
	for i, obj := range objs {
		kc, priv, err := s.prepare(obj)
		if err != nil {
			return nil, fmt.Errorf("apply object %d: %w", i, err)
		}
		priv.GetObjectMeta().ResourceVersion = "" // Apply is unconditional
		kcs[i], privs[i] = kc, priv
	}
	if s.isClosed() {
		return nil, store.ErrClosed
	}
	var undo []func(context.Context) error
	out := make([]model.Object, len(objs))
	for i, priv := range privs {
		res, u, err := s.applyOne(ctx, kcs[i], priv)
		if err != nil {
			uctx := context.WithoutCancel(ctx)
			for j := len(undo) - 1; j >= 0; j-- {
				if uerr := undo[j](uctx); uerr != nil {
					s.log.Error("kube store: undoing a failed apply", "err", uerr)
				}
			}
			return nil, fmt.Errorf("apply object %d: %w", i, err)
		}
		out[i] = model.DeepCopy(res)
		undo = append(undo, u)
	}
	return out, nil
}

// applyOne creates or updates obj unconditionally (keeping the stored
// status when obj's is empty) and returns how to undo that.
func (s *Store) applyOne(ctx context.Context, kc *kindCache, obj model.Object) (model.Object, func(context.Context) error, error) {
	m := obj.GetObjectMeta()
	for attempt := 0; ; attempt++ {
		// An object this replica has never seen is created without
		// asking first (a fleet's first apply is all creates); the API
		// server refuses the create if another writer made it meanwhile,
		// and the next attempt reads it.
		var cur model.Object
		err := store.ErrNotFound
		if attempt > 0 || s.cached(kc, m.Namespace+"/"+m.Name) {
			cur, err = s.current(ctx, kc, m.Namespace, m.Name, "", true)
		}
		if errors.Is(err, store.ErrNotFound) {
			res, err := s.create(ctx, kc, obj)
			if errors.Is(err, store.ErrAlreadyExists) && attempt < conflictRetries {
				continue
			}
			if err != nil {
				return nil, nil, err
			}
			rm := res.GetObjectMeta()
			return res, func(ctx context.Context) error {
				return s.Delete(ctx, kc.kind, rm.Namespace, rm.Name, "")
			}, nil
		}
		if err != nil {
			return nil, nil, err
		}
		next := model.DeepCopy(obj)
		if store.StatusIsZero(next) {
			store.CopyStatus(next, cur)
		}
		res, err := s.update(ctx, kc, cur, next, false)
		if errors.Is(err, store.ErrConflict) && attempt < conflictRetries {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		prev := model.DeepCopy(cur)
		prev.GetObjectMeta().ResourceVersion = ""
		return res, func(ctx context.Context) error {
			_, err := s.Update(ctx, prev)
			return err
		}, nil
	}
}
