// Package pkg tests the .deb the way an administrator meets it: installed
// with dpkg into a clean Debian 12 (debootstrap) booted with systemd as
// PID 1 under systemd-nspawn, the service started by the package, a
// Hardware applied through it, then a newer version installed over it and
// the service and the Hardware found again. It owns no code, only this
// test; the rootfs is cached under .cache/pkgtest keyed by its suite and
// package list (docs/install.md has the cold and warm costs).
package pkg
