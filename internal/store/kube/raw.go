package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// The agent path's requests — status writes, the watch that follows them
// and the confirming reads — go through a REST client that hands back the
// API server's bytes, not client-go's unstructured maps: a Workflow
// written once is then decoded once per replica (from its watch event,
// straight into Anvil's types), where the dynamic client decoded it into
// a map, encoded the map and decoded that again, for the write's response
// and again for the event. Measured on the fleet benchmark that was most
// of a replica's CPU (docs/kubernetes.md, "Figures").

// newRawClient returns a REST client for raw requests with rc's
// credentials, rate limits and timeout.
func newRawClient(rc *rest.Config) (*rest.RESTClient, error) {
	return rest.UnversionedRESTClientFor(dynamic.ConfigFor(rc))
}

// path returns the API path of a kind's collection in namespace ns (all
// namespaces if empty), or of the object name in it, or of its
// subresource.
func (r resource) path(ns, name string, sub ...string) []string {
	p := []string{"/apis", r.gvr.Group, r.gvr.Version}
	if r.gvr.Group == "" {
		p = []string{"/api", r.gvr.Version}
	}
	if ns != "" {
		p = append(p, "namespaces", ns)
	}
	p = append(p, r.gvr.Resource)
	if name != "" {
		p = append(p, name)
	}
	return append(p, sub...)
}

// written is what the API server answered to a write: the object as
// stored, in its JSON, and the two fields every writer needs from it.
type written struct {
	body []byte
	rv   string
	uid  types.UID
}

// parseWritten reads an answer's resourceVersion and UID without
// decoding the rest of it.
func parseWritten(body []byte) (written, error) {
	var head struct {
		Metadata struct {
			ResourceVersion string    `json:"resourceVersion"`
			UID             types.UID `json:"uid"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &head); err != nil {
		return written{}, fmt.Errorf("the API server's answer: %w", err)
	}
	if head.Metadata.ResourceVersion == "" {
		return written{}, errors.New("the API server's answer has no resourceVersion")
	}
	return written{body: body, rv: head.Metadata.ResourceVersion, uid: head.Metadata.UID}, nil
}

// send makes one write (POST, PUT or PATCH) and returns the answer.
func (s *Store) send(ctx context.Context, req *rest.Request, kind, ns, name string) (written, error) {
	body, err := s.do(ctx, req)
	if err != nil {
		return written{}, apiError(kind, ns, name, err)
	}
	w, err := parseWritten(body)
	if err != nil {
		return written{}, fmt.Errorf("%s %s/%s: %w", kind, ns, name, err)
	}
	return w, nil
}

// do makes one request in its turn (see Store.turn) and returns the
// answer's body.
func (s *Store) do(ctx context.Context, req *rest.Request) ([]byte, error) {
	done, err := s.turn(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	return req.Do(ctx).Raw()
}

// postRaw creates an object from its JSON body.
func (s *Store) postRaw(ctx context.Context, kc *kindCache, ns, name string, body []byte) (written, error) {
	return s.send(ctx, s.raw.Post().AbsPath(kc.res.path(ns, "")...).Body(body), kc.kind, ns, name)
}

// patch sends a JSON merge patch to an object (or to its subresource).
func (s *Store) patch(ctx context.Context, kc *kindCache, ns, name string, patch map[string]any, sub ...string) (written, error) {
	b, err := json.Marshal(patch)
	if err != nil {
		return written{}, fmt.Errorf("%s %s/%s: %w", kc.kind, ns, name, err)
	}
	req := s.raw.Patch(types.MergePatchType).AbsPath(kc.res.path(ns, name, sub...)...).Body(b)
	return s.send(ctx, req, kc.kind, ns, name)
}

// storedVersion reads an object's resourceVersion from the API server
// (a quorum read), without decoding the rest of it.
func (s *Store) storedVersion(ctx context.Context, kc *kindCache, ns, name string) (string, error) {
	w, err := s.send(ctx, s.raw.Get().AbsPath(kc.res.path(ns, name)...), kc.kind, ns, name)
	return w.rv, err
}

// decodeRaw turns the API server's JSON of one object into Anvil's type.
func decodeRaw(kind string, b []byte) (model.Object, error) {
	obj, err := model.Decode(kind, b)
	if err != nil {
		return nil, err
	}
	if sec, ok := obj.(*model.Secret); ok {
		unsealAnnotations(sec)
	}
	return obj, nil
}

// watchEvent is one event of a watch stream as the API server sends it.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// watchFrom follows the kind's changes after revision rv until the watch
// ends: nil when the server closed it (watch again), ErrGone when rv is
// too old (list again), another error otherwise. Each event's object is
// decoded once, from the stream's bytes.
func (s *Store) watchFrom(kc *kindCache, rv uint64) error {
	stream, err := s.rawWatch.Get().AbsPath(kc.res.path(s.cfg.Namespace, "")...).
		Param("watch", "true").
		Param("resourceVersion", strconv.FormatUint(rv, 10)).
		Stream(s.ctx)
	if err != nil {
		if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
			return fmt.Errorf("%w: %v", store.ErrGone, err)
		}
		return err
	}
	defer stream.Close()
	dec := json.NewDecoder(stream)
	for {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) || s.ctx.Err() != nil {
				return nil // the server ended the watch (or the store closed)
			}
			return fmt.Errorf("watch %s: %w", kc.res.gvr.GroupResource(), err)
		}
		var typ store.EventType
		switch ev.Type {
		case "ADDED":
			typ = store.Added
		case "MODIFIED":
			typ = store.Modified
		case "DELETED":
			typ = store.Deleted
		case "ERROR":
			var st metav1.Status
			if err := json.Unmarshal(ev.Object, &st); err != nil {
				return fmt.Errorf("watch %s: unreadable error event: %w", kc.res.gvr.GroupResource(), err)
			}
			err := &apierrors.StatusError{ErrStatus: st}
			if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
				return fmt.Errorf("%w: %v", store.ErrGone, err)
			}
			return err
		default:
			continue // BOOKMARK: not asked for
		}
		obj, err := decodeRaw(kc.kind, ev.Object)
		if err != nil {
			s.log.Warn("kube store: object not readable; left out of the cache", "kind", kc.kind, "err", err)
			continue
		}
		orv, err := store.ParseResourceVersion(obj.GetObjectMeta().ResourceVersion)
		if err != nil {
			continue
		}
		kc.record(typ, obj, orv)
	}
}
