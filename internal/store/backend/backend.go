// Package backend chooses and opens the store a command runs on: the
// embedded bbolt store in a data directory (the default) or the Kubernetes
// API (store/kube), from the same flags wherever a command opens a store
// (`anvil serve`, `anvil export`, `anvil restore`). It owns those flags
// and finding the cluster's configuration (a kubeconfig file, the
// KUBECONFIG variable and ~/.kube/config, or the pod's in-cluster
// service account); it does not know what callers store.
package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/store/bolt"
	"github.com/anvilproj/anvil/internal/store/kube"
)

// The store kinds --store takes.
const (
	Bolt       = "bolt"
	Kubernetes = "kubernetes"
)

// StoreFile is the embedded store's file inside the data directory.
const StoreFile = "anvil.db"

// Config says which store to open.
type Config struct {
	// Kind is Bolt (default) or Kubernetes.
	Kind string
	// DataDir holds the embedded store (Bolt).
	DataDir string
	// Kubeconfig is the kubeconfig file (Kubernetes). Empty: in a pod,
	// its service account; else $KUBECONFIG or ~/.kube/config.
	Kubeconfig string
	// KubeContext is the kubeconfig context to use; empty: its current.
	KubeContext string
	// Namespace limits the Kubernetes store to one namespace; empty:
	// all namespaces.
	Namespace string
	// RequestTimeout bounds each write to the API server (Kubernetes):
	// a write the API server does not answer within it fails as
	// unavailable instead of hanging. If 0, kube.DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxRequests bounds this replica's requests at the API server at
	// once (Kubernetes); if 0, kube.DefaultMaxRequests.
	MaxRequests int
	// Waiting, if set, is told why Open is still waiting for the API
	// server (Kubernetes): each failure to make a kind's first list.
	Waiting func(err error)
	// Logger receives the store's operational messages.
	Logger *slog.Logger
}

// AddFlags registers --store, --kubeconfig, --kube-context and
// --kube-namespace on fs (--data-dir is the command's own).
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Kind, "store", Bolt, "where objects are kept: bolt (embedded, in --data-dir) or kubernetes (Tinkerbell's CRDs on the cluster's API server; see docs/kubernetes.md)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file for --store kubernetes (default: the pod's service account in a cluster, else $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&c.KubeContext, "kube-context", "", "kubeconfig context for --store kubernetes (default: its current context)")
	fs.StringVar(&c.Namespace, "kube-namespace", "", "with --store kubernetes, keep to this namespace (default: all namespaces)")
	fs.IntVar(&c.MaxRequests, "kube-max-requests", kube.DefaultMaxRequests, "with --store kubernetes, how many reads and writes this replica has at the API server at once; more wait their turn here (see docs/kubernetes.md)")
	fs.DurationVar(&c.RequestTimeout, "kube-request-timeout", kube.DefaultRequestTimeout, "with --store kubernetes, how long a write may wait for the API server before it fails as unavailable (see docs/kubernetes.md, \"When the API server is away\")")
}

// Check reports a configuration that cannot work, before anything opens.
func (c *Config) Check() error {
	switch c.Kind {
	case "", Bolt:
		if c.DataDir == "" {
			return errors.New("no data directory (--data-dir)")
		}
	case Kubernetes:
		if c.MaxRequests < 0 {
			return errors.New("--kube-max-requests must not be negative")
		}
		if c.RequestTimeout < 0 {
			return errors.New("--kube-request-timeout must not be negative")
		}
	default:
		return fmt.Errorf("--store %q: want %s or %s", c.Kind, Bolt, Kubernetes)
	}
	return nil
}

// IsKubernetes reports whether the store is the Kubernetes API.
func (c *Config) IsKubernetes() bool { return c.Kind == Kubernetes }

// Open opens the store. For Kubernetes it waits (until ctx ends) for the
// API server to answer and every kind's first list to arrive, retrying
// with back-off meanwhile; the error then says what failed last.
func Open(ctx context.Context, c Config) (store.Store, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if !c.IsKubernetes() {
		if err := os.MkdirAll(c.DataDir, 0o750); err != nil {
			return nil, fmt.Errorf("data directory: %w", err)
		}
		st, err := bolt.Open(filepath.Join(c.DataDir, StoreFile), bolt.Options{Logger: c.Logger})
		if err != nil {
			return nil, err // bolt's errors name the store and its file
		}
		return st, nil
	}
	rc, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	if c.Logger != nil {
		c.Logger.Info("opening the Kubernetes store", "server", rc.Host, "namespace", c.Namespace)
	}
	st, err := kube.Open(ctx, kube.Config{REST: rc, Namespace: c.Namespace, RequestTimeout: c.RequestTimeout, MaxRequests: c.MaxRequests,
		Waiting: c.Waiting, Log: c.Logger})
	if err != nil {
		return nil, fmt.Errorf("open store on %s: %w", rc.Host, err)
	}
	return st, nil
}

// RESTConfig finds the cluster: --kubeconfig if given, the pod's service
// account when running in one, else $KUBECONFIG or ~/.kube/config.
func (c *Config) RESTConfig() (*rest.Config, error) {
	if c.Kubeconfig == "" && c.KubeContext == "" {
		if rc, err := rest.InClusterConfig(); err == nil {
			return rc, nil
		} else if !errors.Is(err, rest.ErrNotInCluster) {
			return nil, fmt.Errorf("in-cluster configuration: %w", err)
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if c.Kubeconfig != "" {
		rules.ExplicitPath = c.Kubeconfig
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: c.KubeContext}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--store kubernetes: no cluster configuration (give --kubeconfig, set KUBECONFIG, or run in a pod): %w", err)
	}
	return rc, nil
}
