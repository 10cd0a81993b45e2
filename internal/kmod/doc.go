// Package kmod finds and loads Linux kernel modules the way modprobe and
// udev's coldplug do, without either: it reads a module directory's index
// files (modules.dep, modules.alias, modules.softdep, modules.builtin,
// modules.builtin.modinfo), matches device modaliases against alias
// patterns with fnmatch(3) rules, orders a module's dependencies, and
// loads modules with finit_module(2) (init_module(2) for compressed ones).
//
// It also writes those index files from the modules' own .modinfo sections
// (GenerateIndex), as depmod does: a Debian linux-image package ships no
// modules.dep or modules.alias (its postinst runs depmod), and the boot
// environment's initramfs needs both for its subset of modules.
//
// The boot environment's agent, running as PID 1, uses Prober.Coldplug to
// load the drivers for the machine's devices; internal/bootenv uses the
// parsers and GenerateIndex at build time. The package owns module
// metadata and module loading only: it mounts nothing, creates no device
// nodes, and never unloads a module.
package kmod
