//go:build linux && (amd64 || arm64 || riscv64 || arm || loong64 || ppc64 || ppc64le || s390x)

package actions

import "golang.org/x/sys/unix"

// kexecFileLoad is Config.KexecLoad's default.
func kexecFileLoad(kernelFd, initrdFd int, cmdline string, flags int) error {
	return unix.KexecFileLoad(kernelFd, initrdFd, cmdline, flags)
}
