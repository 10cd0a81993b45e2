package agent

import (
	"fmt"
	"syscall"

	"github.com/anvilproj/anvil/internal/actions"
	"github.com/anvilproj/anvil/internal/container"
	"github.com/anvilproj/anvil/internal/oci"
	"github.com/anvilproj/anvil/internal/version"
)

// CatalogConfig configures NewCatalog.
type CatalogConfig struct {
	// ImageCacheDir holds the pulled images. If "", DefaultImageCacheDir.
	ImageCacheDir string
	// ImageCacheSize bounds the cache in bytes. If 0, a quarter of the
	// machine's RAM (at least 256 MiB).
	ImageCacheSize int64
	// ScratchDir is where containers mount their writable layer, in their
	// own mount namespace. If "", DefaultContainerScratch.
	ScratchDir string
}

// minImageCache is the least the default cache size is: one action image
// is tens of MiB.
const minImageCache = 256 << 20

// NewCatalog returns the actions the agent runs: the native ones, and the
// container path when it can be set up (a cgroup v2 hierarchy, the cache
// directory). note says, for the console and the log, how big the cache
// is, or why the container path is off (then only native actions run).
func NewCatalog(cfg CatalogConfig) (cat *actions.Catalog, note string) {
	if cfg.ImageCacheDir == "" {
		cfg.ImageCacheDir = DefaultImageCacheDir
	}
	if cfg.ScratchDir == "" {
		cfg.ScratchDir = DefaultContainerScratch
	}
	if cfg.ImageCacheSize <= 0 {
		cfg.ImageCacheSize = minImageCache
		var si syscall.Sysinfo_t
		if syscall.Sysinfo(&si) == nil {
			cfg.ImageCacheSize = max(int64(si.Totalram)*int64(si.Unit)/4, minImageCache)
		}
	}
	images, err := oci.New(oci.Config{Dir: cfg.ImageCacheDir, Limit: cfg.ImageCacheSize, UserAgent: "anvil-agent/" + version.Get().Version})
	if err != nil {
		return actions.New(actions.Config{}), fmt.Sprintf("no container path, only native actions run: %v", err)
	}
	rt, err := container.New(container.Config{ScratchDir: cfg.ScratchDir})
	if err != nil {
		return actions.New(actions.Config{}), fmt.Sprintf("no container path, only native actions run: %v", err)
	}
	return actions.New(actions.Config{Images: images, Containers: rt}),
		fmt.Sprintf("container images are cached in %s, up to %s (anvil.image_cache=)", cfg.ImageCacheDir, oci.FormatSize(cfg.ImageCacheSize))
}
