// Package keyring keeps the key material that every replica of Anvil in
// Kubernetes mode must hold the same — the agent token key, the local
// token issuer's signing key, the generated TLS CA and the Secret seal
// key — in one core v1 Secret, so that an agent's token, an operator's
// token and the CA a machine trusts work against any replica.
//
// It owns that Secret and copying it to and from files in the data
// directory. It does not make keys: the caller's generate function does
// (the same load-or-create functions a single server uses), and keyring
// only decides whose keys win: the first replica to create the Secret.
package keyring

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/anvilproj/anvil/internal/atomicfile"
)

// File is one shared file: Key in the Secret's data, Path on disk.
type File struct {
	Key  string
	Path string
}

// Config says where the shared keys live.
type Config struct {
	REST      *rest.Config
	Namespace string
	// Name is the Secret's name. If empty, DefaultName.
	Name  string
	Files []File
	// Generate makes every missing file (and leaves existing ones as
	// they are). It is called only when the Secret does not exist yet.
	Generate func() error
	Log      *slog.Logger
}

// DefaultName is the Secret's name when Config.Name is empty.
const DefaultName = "anvil-keys"

var secrets = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// Sync makes the files on disk the cluster's: if the Secret exists its
// files are written (replacing local ones); if not, Generate makes them
// here and they are stored as the Secret — unless another replica stored
// its own first, whose files then win.
func Sync(ctx context.Context, cfg Config) error {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dyn, err := dynamic.NewForConfig(cfg.REST)
	if err != nil {
		return err
	}
	c := dyn.Resource(secrets).Namespace(cfg.Namespace)
	where := cfg.Namespace + "/" + cfg.Name
	u, err := c.Get(ctx, cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if err := cfg.Generate(); err != nil {
			return fmt.Errorf("keys for Secret %s: %w", where, err)
		}
		data := map[string]any{}
		for _, f := range cfg.Files {
			b, err := os.ReadFile(f.Path)
			if err != nil {
				return fmt.Errorf("keys for Secret %s: %w", where, err)
			}
			data[f.Key] = base64.StdEncoding.EncodeToString(b)
		}
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
			"metadata": map[string]any{"name": cfg.Name, "namespace": cfg.Namespace,
				"labels": map[string]any{"app.kubernetes.io/name": "anvil", "app.kubernetes.io/component": "keys"}},
			"data": data,
		}}
		_, err = c.Create(ctx, obj, metav1.CreateOptions{})
		if err == nil {
			log.Info("keys: this replica's keys are now the cluster's", "secret", where, "files", len(cfg.Files))
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("store keys as Secret %s: %w", where, err)
		}
		// Another replica stored its keys first: take those.
		u, err = c.Get(ctx, cfg.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("read keys from Secret %s: %w", where, err)
	}
	data, _, _ := unstructured.NestedStringMap(u.Object, "data")
	var missing []File
	for _, f := range cfg.Files {
		v, ok := data[f.Key]
		if !ok {
			missing = append(missing, f)
			continue
		}
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return fmt.Errorf("secret %s: %s is not base64", where, f.Key)
		}
		if err := os.MkdirAll(filepath.Dir(f.Path), 0o700); err != nil {
			return err
		}
		if err := atomicfile.Write(f.Path, b, 0o600); err != nil {
			return err
		}
	}
	if len(missing) > 0 {
		// A key the first replica did not make (TLS switched on since,
		// say): made here and added, unless another replica adds it
		// first (the update is conditional on what was read).
		if err := cfg.Generate(); err != nil {
			return fmt.Errorf("keys for Secret %s: %w", where, err)
		}
		for _, f := range missing {
			b, err := os.ReadFile(f.Path)
			if err != nil {
				return fmt.Errorf("keys for Secret %s: %w", where, err)
			}
			if err := unstructured.SetNestedField(u.Object, base64.StdEncoding.EncodeToString(b), "data", f.Key); err != nil {
				return err
			}
		}
		if _, err := c.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsConflict(err) {
				return Sync(ctx, cfg) // read what the other replica stored
			}
			return fmt.Errorf("add keys to Secret %s: %w", where, err)
		}
		log.Info("keys: added this replica's to the cluster's", "secret", where, "files", len(missing))
	}
	log.Info("keys: taken from the cluster", "secret", where, "files", len(cfg.Files))
	return nil
}
