package agent

import (
	"github.com/anvilproj/anvil/internal/agentcmdline"
	"github.com/anvilproj/anvil/internal/oci"
)

// Where the container path keeps its state by default: /run is a tmpfs
// (in the boot environment, as everything is RAM), so the cache is memory
// and nothing survives a reboot.
const (
	DefaultImageCacheDir    = "/run/anvil/images"
	DefaultContainerScratch = "/run/anvil/containers"
)

// BootParams is what the boot script told the agent on the kernel command
// line (agentcmdline.Params, which owns its arguments), with what the agent
// makes of it.
type BootParams struct {
	agentcmdline.Params
	// ServerURLs are the base URLs of the Anvil API the agent calls, in
	// the order it tries them: the HTTP port of each replica (Connect over
	// HTTP/1.1), or, with GRPC, the one gRPC port (h2c, or TLS); see
	// agentcmdline.Params.Endpoints.
	ServerURLs []string
	GRPC       bool
	// ImageCacheSize is the size limit of the cache of container images in
	// bytes (anvil.image_cache=2G); 0: the default (a quarter of the RAM).
	ImageCacheSize int64
}

// ParseCmdline reads BootParams from a kernel command line with
// agentcmdline.Parse, which says what is an error, and reads the image
// cache's size. An error names the argument.
func ParseCmdline(cmdline string) (BootParams, error) {
	p, err := agentcmdline.Parse(cmdline)
	if err != nil {
		return BootParams{}, err
	}
	bp := BootParams{Params: p}
	bp.ServerURLs, bp.GRPC = p.Endpoints()
	if p.ImageCache != "" {
		if bp.ImageCacheSize, err = oci.ParseSize(p.ImageCache); err != nil {
			return BootParams{}, &agentcmdline.ArgError{Name: agentcmdline.ArgImageCache, Value: p.ImageCache, Err: err}
		}
	}
	return bp, nil
}
