// Package bootenv builds the boot environment: the kernel and initramfs a
// machine netboots into to run its workflow (Tinkerbell's "Hook"). The
// initramfs is a compressed newc cpio whose /init is anvil-agent (the
// agent without the server: cmd/anvil-agent, found next to the running
// anvil, else anvil itself); running as PID 1, it becomes the agent and
// loads the machine's drivers with internal/kmod from the modules inside.
//
// Build takes Debian's kernel (or any distribution's: a kernel image and
// a module tree, or a linux-image .deb), chooses the modules a machine
// needs to reach its network and disks (DefaultModules, plus or minus
// patterns), and writes OUT/vmlinuz-ARCH, OUT/initramfs-ARCH and
// OUT/manifest-ARCH.json — the manifest makes a second Build with the
// same inputs a no-op. docs/bootenv.md describes the contents, the
// module selection and the measured compression figures.
//
// The package owns the image's contents and layout. It does not serve
// the files (internal/httpboot does), decide who boots them
// (internal/bootpolicy), or run anything inside them (internal/agent).
package bootenv
