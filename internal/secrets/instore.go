package secrets

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/labels"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// InStore keeps the generated secrets as Secret objects of an Anvil store
// instead of a file: Kubernetes mode's choice, where every replica must
// render the same kubeadm token or password for a machine, and the
// cluster keeps Secrets. Each is a core Secret labelled LabelGenerated,
// named from the secret's name, holding the value under "value"; the
// first replica to create one wins and the others read its value. It
// implements the same calls as Store.
type InStore struct {
	Store store.Store
	// Clock stamps a secret's creation. If nil, clock.Real.
	Clock clock.Clock
	// Rand is the source of randomness. If nil, crypto/rand.Reader.
	Rand io.Reader
}

// Labels and annotations of a generated secret's object.
const (
	LabelGenerated = "anvil.dev/generated-secret"
	annName        = "anvil.dev/secret-name"
	annKind        = "anvil.dev/secret-kind"
	annCreated     = "anvil.dev/secret-created"
	valueKey       = "value"
)

// inStoreBound bounds one call to the store: a template renders while a
// machine waits for its config.
const inStoreBound = 30 * time.Second

// objectName is the Secret's name for a generated secret's name: a valid
// Kubernetes name, the same for the same name on every replica.
func objectName(name string) string {
	sum := sha256.Sum256([]byte(name))
	var b strings.Builder
	for _, c := range strings.ToLower(name) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
		} else if b.Len() > 0 && !strings.HasSuffix(b.String(), "-") {
			b.WriteByte('-')
		}
		if b.Len() >= 40 {
			break
		}
	}
	return strings.Trim("anvil-gen-"+b.String(), "-") + "-" + hex.EncodeToString(sum[:4])
}

// Secret returns the value of the secret name of kind in namespace,
// creating it first if no replica has; the same name with another kind is
// an error.
func (s *InStore) Secret(namespace, name, kind string) (string, error) {
	if name == "" {
		return "", errors.New("secret: empty name")
	}
	ctx, cancel := context.WithTimeout(context.Background(), inStoreBound)
	defer cancel()
	obj, err := s.Store.Get(ctx, model.KindSecret, namespace, objectName(name))
	if errors.Is(err, store.ErrNotFound) {
		var v string
		if v, err = generate(s.rand(), kind); err != nil {
			return "", fmt.Errorf("secret %q: %w", name, err)
		}
		sec := GeneratedObject(Generated{Info: Info{Namespace: namespace, Name: name, Kind: kind,
			Created: clock.Or(s.Clock).Now()}, Value: v})
		if _, err = s.Store.Create(ctx, sec); err == nil {
			return v, nil
		}
		if !errors.Is(err, store.ErrAlreadyExists) {
			return "", fmt.Errorf("secret %q: %w", name, err)
		}
		// Another replica made it first: its value is the one.
		obj, err = s.Store.Get(ctx, model.KindSecret, namespace, objectName(name))
	}
	if err != nil {
		return "", fmt.Errorf("secret %q: %w", name, err)
	}
	v, info, err := ReadGenerated(obj.(*model.Secret))
	if err != nil {
		return "", err
	}
	if info.Kind != kind {
		return "", fmt.Errorf("secret %q is of kind %s, not %s", name, info.Kind, kind)
	}
	return v, nil
}

// Get returns the value and description of an existing secret, or an
// error wrapping ErrNotFound.
func (s *InStore) Get(namespace, name string) (string, Info, error) {
	ctx, cancel := context.WithTimeout(context.Background(), inStoreBound)
	defer cancel()
	obj, err := s.Store.Get(ctx, model.KindSecret, namespace, objectName(name))
	if errors.Is(err, store.ErrNotFound) {
		return "", Info{}, fmt.Errorf("secret %s/%s: %w", namespace, name, ErrNotFound)
	}
	if err != nil {
		return "", Info{}, err
	}
	return ReadGenerated(obj.(*model.Secret))
}

// List describes every generated secret, sorted by namespace and name,
// without values.
func (s *InStore) List() []Info {
	ctx, cancel := context.WithTimeout(context.Background(), inStoreBound)
	defer cancel()
	objs, _, err := s.Store.List(ctx, model.KindSecret, store.ListOptions{
		Labels: labels.FromMap(map[string]string{LabelGenerated: "true"})})
	if err != nil {
		return nil
	}
	out := make([]Info, 0, len(objs))
	for _, o := range objs {
		if _, info, err := ReadGenerated(o.(*model.Secret)); err == nil {
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(a, b Info) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// GeneratedObject is the Secret object that holds g in a store: InStore's
// form, which `anvil restore` writes into a cluster.
func GeneratedObject(g Generated) *model.Secret {
	return &model.Secret{
		TypeMeta: model.TypeMeta{APIVersion: model.CoreAPIVersion, Kind: model.KindSecret},
		ObjectMeta: model.ObjectMeta{Namespace: g.Namespace, Name: objectName(g.Name),
			Labels: map[string]string{LabelGenerated: "true"},
			Annotations: map[string]string{annName: g.Name, annKind: g.Kind,
				annCreated: g.Created.UTC().Format(time.RFC3339)}},
		Type: "Opaque",
		Data: map[string]string{valueKey: base64.StdEncoding.EncodeToString([]byte(g.Value))},
	}
}

// IsGenerated reports whether sec is labelled as a generated secret's
// object (ReadGenerated reads it).
func IsGenerated(sec *model.Secret) bool { return sec.Labels[LabelGenerated] == "true" }

// ReadGenerated reads a generated secret's value and description from its
// object.
func ReadGenerated(sec *model.Secret) (string, Info, error) {
	info := Info{Namespace: sec.Namespace, Name: sec.Annotations[annName], Kind: sec.Annotations[annKind]}
	info.Created, _ = time.Parse(time.RFC3339, sec.Annotations[annCreated])
	plain, err := sec.Plain()
	v, ok := plain[valueKey]
	if err != nil || !ok || info.Name == "" {
		return "", info, fmt.Errorf("Secret %s/%s is not a generated secret Anvil can read", sec.Namespace, sec.Name)
	}
	return string(v), info, nil
}

func (s *InStore) rand() io.Reader {
	if s.Rand != nil {
		return s.Rand
	}
	return rand.Reader
}
