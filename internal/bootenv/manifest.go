package bootenv

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
)

// manifestFormat changes whenever the initramfs's layout or the manifest
// changes, so that an older boot environment is rebuilt.
const manifestFormat = 1

// manifestName is the manifest's file name in the output directory.
func manifestName(arch string) string { return "manifest-" + arch + ".json" }

// inputFile identifies one input by what a rebuild depends on: a file by
// size and modification time, a directory by a digest of every entry's
// path, size, mode and modification time.
type inputFile struct {
	Role  string `json:"role"`
	Path  string `json:"path"`
	Size  int64  `json:"size,omitempty"`
	MTime int64  `json:"mtime_ns,omitempty"`
	Tree  string `json:"tree_sha256,omitempty"`
}

// buildKey is everything the outputs are a function of.
type buildKey struct {
	Format            int         `json:"format"`
	Builder           string      `json:"builder"`
	Arch              string      `json:"arch"`
	Compression       string      `json:"compression"`
	ModuleCompression string      `json:"module_compression"`
	DefaultModules    []string    `json:"default_modules,omitempty"`
	Include           []string    `json:"include,omitempty"`
	Exclude           []string    `json:"exclude,omitempty"`
	Inputs            []inputFile `json:"inputs"`
	NoDefaultModules  bool        `json:"no_default_modules,omitempty"`
}

// outputFile is one file Build wrote.
type outputFile struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	MTime  int64  `json:"mtime_ns"`
	SHA256 string `json:"sha256"`
}

// manifest is written next to the outputs: the key they were built from
// and what came out.
type manifest struct {
	Key           buildKey     `json:"key"`
	Outputs       []outputFile `json:"outputs"`
	KernelRelease string       `json:"kernel_release"`
	Modules       int          `json:"modules"`
	Busybox       string       `json:"busybox,omitempty"`
	BusyboxNote   string       `json:"busybox_note,omitempty"`
	ContentBytes  int64        `json:"content_bytes"`
}

// statInput describes the file or directory at p for the build key.
func statInput(role, p string) (inputFile, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return inputFile{}, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return inputFile{}, fmt.Errorf("%s: %w", role, err)
	}
	in := inputFile{Role: role, Path: abs}
	if !fi.IsDir() {
		in.Size, in.MTime = fi.Size(), fi.ModTime().UnixNano()
		return in, nil
	}
	h := sha256.New()
	err = filepath.WalkDir(abs, func(q string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(abs, q)
		fmt.Fprintf(h, "%s\x00%d\x00%o\x00%d\n", rel, info.Size(), info.Mode(), info.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		return inputFile{}, fmt.Errorf("%s: %w", role, err)
	}
	in.Tree = hex.EncodeToString(h.Sum(nil))
	return in, nil
}

// readManifest returns the manifest in dir for arch, or nil if there is
// none or it does not parse (then the build simply runs).
func readManifest(dir, arch string) *manifest {
	data, err := os.ReadFile(filepath.Join(dir, manifestName(arch)))
	if err != nil {
		return nil
	}
	var m manifest
	if json.Unmarshal(data, &m) != nil {
		return nil
	}
	return &m
}

// upToDate reports whether m was built from key and its outputs are in
// dir as they were written.
func (m *manifest) upToDate(dir string, key buildKey) bool {
	if m == nil || !reflect.DeepEqual(m.Key, key) || len(m.Outputs) == 0 {
		return false
	}
	for _, o := range m.Outputs {
		fi, err := os.Stat(filepath.Join(dir, o.Name))
		if err != nil || fi.Size() != o.Size || fi.ModTime().UnixNano() != o.MTime {
			return false
		}
	}
	return true
}

// writeManifest writes m into dir atomically.
func writeManifest(dir, arch string, m *manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(dir, manifestName(arch), func(f *os.File) error {
		_, err := f.Write(append(data, '\n'))
		return err
	})
}

// writeAtomic writes dir/name through a temporary file in dir that is
// renamed over it once complete and synced: a server reading dir never
// sees half a file.
func writeAtomic(dir, name string, fill func(f *os.File) error) (err error) {
	f, err := os.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = fill(f); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(dir, name))
}
