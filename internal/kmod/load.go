package kmod

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Loader loads one module file into the kernel. Load must return nil when
// the module is already loaded.
type Loader interface {
	Load(path string) error
}

// LoaderFunc adapts a function to Loader.
type LoaderFunc func(path string) error

// Load calls f(path).
func (f LoaderFunc) Load(path string) error { return f(path) }

// Defaults for the zero values of ProberConfig.
const (
	DefaultSysDir    = "/sys"
	DefaultSettle    = 100 * time.Millisecond
	DefaultMaxRounds = 10
)

// modaliasFile is the sysfs attribute naming what driver a device wants.
const modaliasFile = "modalias"

// ProberConfig configures NewProber.
type ProberConfig struct {
	// Index is the module directory's index. Required.
	Index *Index
	// Loader loads a module file. If nil, uses SyscallLoader (Linux).
	Loader Loader
	// SysDir is where sysfs is mounted. If empty, uses DefaultSysDir.
	SysDir string
	// Settle is how long Coldplug waits after a round that loaded a
	// module before it looks for new devices (USB enumeration and some
	// drivers' probes finish after finit_module returns). If 0, uses
	// DefaultSettle; if negative, it does not wait.
	Settle time.Duration
	// MaxRounds bounds Coldplug's rounds. If 0, uses DefaultMaxRounds.
	MaxRounds int
}

// Prober loads modules with their dependencies, as modprobe does, and
// remembers what it loaded or failed to load, so that each module is
// tried once. It is safe for concurrent use.
type Prober struct {
	idx       *Index
	loader    Loader
	sysDir    string
	settle    time.Duration
	maxRounds int

	mu     sync.Mutex
	tried  map[string]error // nil: loaded (or already loaded)
	active map[string]bool  // being probed (breaks soft dependency cycles)
	loaded []string         // in load order
}

// NewProber returns a Prober for cfg.
func NewProber(cfg ProberConfig) *Prober {
	p := &Prober{
		idx: cfg.Index, loader: cfg.Loader, sysDir: cfg.SysDir, settle: cfg.Settle, maxRounds: cfg.MaxRounds,
		tried: map[string]error{}, active: map[string]bool{},
	}
	if p.loader == nil {
		p.loader = SyscallLoader{}
	}
	if p.sysDir == "" {
		p.sysDir = DefaultSysDir
	}
	if p.settle == 0 {
		p.settle = DefaultSettle
	}
	if p.maxRounds <= 0 {
		p.maxRounds = DefaultMaxRounds
	}
	return p
}

// ModuleError is the failure to load one module.
type ModuleError struct {
	Module string
	Err    error
}

func (e *ModuleError) Error() string { return "module " + e.Module + ": " + e.Err.Error() }
func (e *ModuleError) Unwrap() error { return e.Err }

// Probe loads the module or alias name (modprobe's argument: "virtio_net",
// "crc32c-intel", "fs-ext4", "pci:v…") with everything it needs: the
// modules.dep dependencies in order, soft dependencies (pre before, post
// after; their failures are not the module's). An alias loads every
// module it matches. It returns the modules this call loaded, and an
// error if the module, or any module the alias matched, failed or does
// not exist; a built-in module is success with nothing loaded.
func (p *Prober) Probe(name string) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	before := len(p.loaded)
	err := p.probeAny(name)
	if len(p.loaded) == before {
		return nil, err
	}
	return slices.Clone(p.loaded[before:]), err
}

// Loaded returns every module the Prober loaded so far, in order.
func (p *Prober) Loaded() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.loaded)
}

// probeAny resolves a module name or an alias and probes what it names.
func (p *Prober) probeAny(name string) error {
	mod := ModuleName(name)
	if p.idx.Has(mod) {
		return p.probeModule(mod)
	}
	if p.idx.IsBuiltin(mod) {
		return nil
	}
	mods, builtin := p.idx.Lookup(name)
	if len(mods) == 0 {
		if builtin {
			return nil
		}
		return &ModuleError{Module: name, Err: ErrNotFound}
	}
	var errs []error
	for _, m := range mods {
		if err := p.probeModule(m); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// probeModule loads a module of the index after its dependencies. Each
// module is tried once; later calls return the first outcome.
func (p *Prober) probeModule(name string) error {
	if err, done := p.tried[name]; done {
		return err
	}
	if p.active[name] {
		return nil // a soft dependency cycle: the outer call loads it
	}
	p.active[name] = true
	defer delete(p.active, name)

	soft := p.idx.Softdep(name)
	for _, pre := range soft.Pre {
		_ = p.probeAny(pre) // soft: a missing or failing one is not ours
	}
	order, err := p.idx.LoadOrder(name)
	if err != nil {
		p.tried[name] = err
		return err
	}
	for _, dep := range order[:len(order)-1] {
		if err := p.probeModule(dep); err != nil {
			err = &ModuleError{Module: name, Err: fmt.Errorf("needs %s: %w", dep, err)}
			p.tried[name] = err
			return err
		}
	}
	if err := p.loader.Load(p.idx.Path(name)); err != nil {
		err = &ModuleError{Module: name, Err: err}
		p.tried[name] = err
		return err
	}
	p.tried[name] = nil
	p.loaded = append(p.loaded, name)
	for _, post := range soft.Post {
		_ = p.probeAny(post)
	}
	return nil
}

// ColdplugResult is what Coldplug did.
type ColdplugResult struct {
	// Loaded are the modules loaded, dependencies included, in load order.
	Loaded []string
	// Errors are the modules that failed, each once, in the order tried.
	Errors []*ModuleError
	// Unmatched are the modaliases of the last round that no module and
	// no built-in module matched, sorted: devices without a driver here.
	Unmatched []string
	// Rounds is how many times sysfs was scanned.
	Rounds int
}

// Coldplug loads the drivers of the devices present, as udev does at
// boot: it reads every SYSDIR/devices/**/modalias, probes each module an
// alias matches, and scans again while a round loaded something (a bus
// driver such as virtio_pci makes new devices appear), up to MaxRounds.
// A module that fails is recorded and the rest go on. It returns early,
// with what was done so far, when ctx ends.
func (p *Prober) Coldplug(ctx context.Context) (ColdplugResult, error) {
	return p.ColdplugWith(ctx, ColdplugOptions{})
}

// ColdplugOptions narrow a coldplug.
type ColdplugOptions struct {
	// Keep, if set, selects the devices whose drivers load, by modalias.
	Keep func(modalias string) bool
	// Until, if set, is asked after each round that loaded something:
	// true ends the coldplug there (e.g. once a network interface exists).
	Until func() bool
	// Settle overrides ProberConfig.Settle for this coldplug when not 0
	// (negative: no wait).
	Settle time.Duration
}

// ColdplugWith is Coldplug narrowed by o. The boot environment loads the
// network drivers first this way (Keep: IsNetworkDevice, Until: a network
// interface exists), to bring up the network while the rest load.
func (p *Prober) ColdplugWith(ctx context.Context, o ColdplugOptions) (ColdplugResult, error) {
	keep := o.Keep
	var res ColdplugResult
	failed := map[string]bool{}
	for res.Rounds < p.maxRounds {
		res.Rounds++
		aliases, err := p.modaliases(ctx)
		if keep != nil {
			aliases = slices.DeleteFunc(aliases, func(a string) bool { return !keep(a) })
		}
		// Paravirtual devices first: their drivers probe in an instant,
		// while a physical controller's may take a second (an IDE
		// channel's reset, a USB hub's), and the machine's disk is
		// usable as soon as its driver is in.
		slices.SortStableFunc(aliases, func(a, b string) int {
			return cmpBool(strings.HasPrefix(b, virtioPrefix), strings.HasPrefix(a, virtioPrefix))
		})
		if err != nil {
			return res, err
		}
		res.Unmatched = res.Unmatched[:0]
		loadedBefore := len(res.Loaded)
		for _, alias := range aliases {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			mods, builtin := p.idx.Lookup(alias)
			if len(mods) == 0 && !builtin {
				res.Unmatched = append(res.Unmatched, alias)
			}
			for _, m := range mods {
				loaded, err := p.Probe(m)
				res.Loaded = append(res.Loaded, loaded...)
				var me *ModuleError
				if errors.As(err, &me) && !failed[me.Module] {
					failed[me.Module] = true
					res.Errors = append(res.Errors, me)
				} else if err != nil && me == nil && !failed[m] {
					failed[m] = true
					res.Errors = append(res.Errors, &ModuleError{Module: m, Err: err})
				}
			}
		}
		slices.Sort(res.Unmatched)
		res.Unmatched = slices.Compact(res.Unmatched)
		if len(res.Loaded) == loadedBefore || (o.Until != nil && o.Until()) {
			break
		}
		settle := p.settle
		if o.Settle != 0 {
			settle = o.Settle
		}
		if settle > 0 {
			t := time.NewTimer(settle)
			select {
			case <-ctx.Done():
				t.Stop()
				return res, ctx.Err()
			case <-t.C:
			}
		}
	}
	return res, nil
}

// modaliases returns the distinct modaliases under SYSDIR/devices, in the
// order found (sysfs walks in name order).

// modaliases returns the distinct modaliases of the devices present, in
// the order found: SYSDIR/bus/*/devices/*/modalias (every device on a bus,
// a few dozen files) and the CPU's, which is on none. Walking
// SYSDIR/devices finds the same but reads thousands of directories, which
// under emulation costs a tenth of a second a round; it is the fallback
// when SYSDIR has no bus directory.
func (p *Prober) modaliases(ctx context.Context) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(p.sysDir, "bus", "*", "devices", "*", modaliasFile))
	if err != nil || len(files) == 0 {
		return p.walkModaliases(ctx)
	}
	files = append(files, filepath.Join(p.sysDir, "devices", "system", "cpu", modaliasFile))
	seen := map[string]bool{}
	var out []string
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		data, err := os.ReadFile(f)
		if err != nil {
			continue // a device that went away, or no CPU modalias
		}
		if alias := strings.TrimSpace(string(data)); alias != "" && !seen[alias] {
			seen[alias] = true
			out = append(out, alias)
		}
	}
	return out, nil
}

// walkModaliases reads every SYSDIR/devices/**/modalias.
func (p *Prober) walkModaliases(ctx context.Context) ([]string, error) {
	root := filepath.Join(p.sysDir, "devices")
	seen := map[string]bool{}
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root {
				return err
			}
			return nil // a device that went away, or an unreadable directory
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		// WalkDir does not follow symbolic links, so sysfs's links back up
		// the tree (subsystem, driver, …) are not loops here.
		if d.IsDir() || d.Name() != modaliasFile || !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		alias := strings.TrimSpace(string(data))
		if alias != "" && !seen[alias] {
			seen[alias] = true
			out = append(out, alias)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", root, err)
	}
	return out, nil
}

// IsNetworkDevice reports whether a modalias is a network controller's: a
// PCI device of class 02 (network), a virtio network device (ID 1), or a
// USB communications interface (class 02: CDC Ethernet, NCM, RNDIS-like).
// The boot environment loads these drivers first.
func IsNetworkDevice(modalias string) bool {
	switch {
	case strings.HasPrefix(modalias, "pci:"):
		return strings.Contains(modalias, "bc02sc")
	case strings.HasPrefix(modalias, "virtio:"):
		return strings.HasPrefix(modalias, virtioPrefix+"d00000001v")
	case strings.HasPrefix(modalias, "usb:"):
		return strings.Contains(modalias, "ic02isc")
	}
	return false
}

// virtioPrefix starts the modalias of a device on the virtio bus.
const virtioPrefix = "virtio:"

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
