package bootenv

import (
	"bytes"
	"context"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/anvilproj/anvil/internal/kmod"
)

// Module compressions (Config.ModuleCompression).
const (
	// ModuleCompressZstd stores each module as NAME.ko.zst. The kernel
	// then unpacks a third of the bytes at boot, and iPXE downloads less;
	// the agent decompresses only the modules it loads (a few dozen of
	// several hundred).
	ModuleCompressZstd = "zstd"
	// ModuleCompressNone stores modules as they are (.ko).
	ModuleCompressNone = "none"
	// DefaultModuleCompression is Config.ModuleCompression's default.
	DefaultModuleCompression = ModuleCompressZstd
)

// storedModule is a module as the initramfs holds it: its path below the
// module directory and its bytes.
type storedModule struct {
	path string
	data []byte
}

// storeModules reads the modules (decompressing what the tree has
// compressed) and compresses each as comp asks, in parallel; the result is
// in the order of mods.
func storeModules(ctx context.Context, tree *moduleTree, mods []kmod.ModuleFile, comp string) ([]storedModule, error) {
	out := make([]storedModule, len(mods))
	errs := make([]error, len(mods))
	next := make(chan int)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Level "better" (~zstd 7): modules are small, and a
			// higher level buys little here at several times the time.
			enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBetterCompression),
				zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(true))
			for i := range next {
				if err != nil {
					errs[i] = err
					continue
				}
				out[i], errs[i] = storeModule(tree, mods[i], comp, enc)
			}
		}()
	}
	for i := range mods {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func storeModule(tree *moduleTree, m kmod.ModuleFile, comp string, enc *zstd.Encoder) (storedModule, error) {
	data, err := kmod.ReadModule(filepath.Join(tree.dir, filepath.FromSlash(m.Path)))
	if err != nil {
		return storedModule{}, err
	}
	plain := kmod.UncompressedPath(m.Path)
	if comp == ModuleCompressNone {
		return storedModule{path: plain, data: data}, nil
	}
	var buf bytes.Buffer
	buf.Grow(len(data) / 2)
	zw := enc
	zw.Reset(&buf)
	if _, err := zw.Write(data); err != nil {
		return storedModule{}, err
	}
	if err := zw.Close(); err != nil {
		return storedModule{}, err
	}
	return storedModule{path: plain + ".zst", data: bytes.Clone(buf.Bytes())}, nil
}
