// Package pkg tests the .deb the way an administrator meets it: installed
// with dpkg into a clean Debian 12 (debootstrap) booted with systemd as
// PID 1 under systemd-nspawn in the demo's network namespace, the service
// started by the package, the demo VM (QEMU) provisioned through it end to
// end, then a newer version installed over it and the service, the
// Hardware and the Workflow found again. It owns no code, only this
// test; the rootfs is cached under .cache/pkgtest keyed by its suite and
// package list, the demo's boot environment and image under
// .cache/pkgtest/demo (docs/install.md has the cold and warm costs).
package pkg
