#!/usr/bin/env bash
# install-deps.sh installs what Anvil's build and tests need on a fresh Debian
# machine, and nothing that is already there. It is idempotent and quiet when
# everything is present. Run as root (CI and `make test` do).
#
#   scripts/install-deps.sh            # build + unit/integration test needs
#   scripts/install-deps.sh tools      # also buf, protoc plugins, staticcheck
set -euo pipefail

GO_VERSION=1.26.8              # keep in step with go.mod's toolchain line
STATICCHECK_VERSION=v0.8.2
BUF_VERSION=v1.75.0

say() { echo "install-deps: $*" >&2; }

need_root() {
  if [ "$(id -u)" != 0 ]; then
    say "need root to install $1 (run as root, or install it yourself)"
    exit 1
  fi
}

# Debian packages the tests use. Kept to what the current tests need; later
# issues (QEMU, DHCP peers, TFTP clients) add theirs here.
APT_PACKAGES=(ca-certificates curl unzip git make iproute2 procps)
# The syslog receiver's end-to-end test (internal/syslog TestLoggerEndToEnd)
# sends with util-linux logger(1), which Debian ships in bsdutils (essential
# on a full system, absent from some minimal images).
APT_PACKAGES+=(bsdutils)
# The end-to-end lab: QEMU with iPXE's option ROMs (BIOS path) and OVMF (UEFI
# path), cpio for the test initramfs, dnsmasq to send IPv6 router
# advertisements, Debian's ipxe for `make ipxe-refresh`.
APT_PACKAGES+=(qemu-system-x86 ipxe-qemu qemu-utils ovmf cpio dnsmasq-base ipxe)
# The ARM64 install (test/e2e TestInstallARM64): QEMU's aarch64 emulator
# and AAVMF, the ARM64 UEFI firmware. The arm64 kernel, systemd-boot and
# busybox come from Debian's arm64 packages, downloaded and unpacked by
# scripts/fetch-kernel.sh and make-os-image.sh (never installed), and
# anvil-agent is cross-compiled by Go itself: no cross C compiler needed.
APT_PACKAGES+=(qemu-system-arm qemu-efi-aarch64)
# The DHCP benchmark's peers and load generator (bench/dhcp): perfdhcp is in
# kea-admin, Kea's server in kea-dhcp4-server, dnsmasq in dnsmasq-base.
APT_PACKAGES+=(kea-admin kea-dhcp4-server dnsmasq-base)
# TFTP: the conformance tests' real clients (internal/tftp) and the
# benchmark's peers (bench/tftp): atftp is the client with RFC 7440
# windowsize, tftp-hpa the classic client, tftpd-hpa and dnsmasq-base the
# peer servers. Not atftpd: installing it removes tftpd-hpa; bench/tftp
# unpacks it from its .deb instead.
APT_PACKAGES+=(atftp tftp-hpa tftpd-hpa dnsmasq-base)
# Provisioning: zstd for the test disk images and the image2disk benchmark's
# peer pipeline; syslinux, mtools, dosfstools and fdisk to build the small
# bootable disk the install test writes; busybox-static for the boot
# environment's debug shell and the installed image's tools.
APT_PACKAGES+=(zstd syslinux syslinux-common mtools dosfstools fdisk busybox-static)
# The UEFI variant of that disk (make-os-image.sh --uefi, test/e2e
# TestInstallUEFI): Debian's systemd-boot as the EFI system partition's loader.
APT_PACKAGES+=(systemd-boot-efi)
# A third-party DHCP relay between two namespaces (test/e2e
# TestNetbootThroughDhcrelay): ISC's dhcrelay.
APT_PACKAGES+=(isc-dhcp-relay)
# Actions: bzip2 makes internal/actions' bzip2 test images (Go has no
# bzip2 writer); curl is half of the image2disk benchmark's peer pipeline
# (curl | zstd -dc | dd).
APT_PACKAGES+=(bzip2 curl)
# BMCs: OpenIPMI's lanserv simulator (ipmi_sim) is the real IPMI 2.0 BMC
# the out-of-band tests drive (internal/bmc, internal/cli TestPowerCommands).
# Anvil itself speaks IPMI in Go (go-ipmi) and needs no ipmitool.
APT_PACKAGES+=(openipmi)
# The power-cut test (test/powercut TestPowerCut) makes the guest's ext4
# disk with mkfs.ext4 and checks every crash image with e2fsck; mount (the
# host's kernel replays the journal of each image on a loop device).
APT_PACKAGES+=(e2fsprogs mount)
# The container path: xz unpacks the upstream Tinkerbell action programs
# the tests rebuild as images (internal/oci/ocitest); the benchmark
# (bench/ocirun) pulls from Debian's docker-registry and times runc's
# container start as the peer.
APT_PACKAGES+=(xz-utils docker-registry runc)
# Kernel modules: kmod's depmod is the reference internal/kmod's index
# generator is checked against.
APT_PACKAGES+=(kmod)
# The reference decoders the boot environment's compressed initramfs is checked
# against (internal/bootenv): what they read, the kernel reads.
APT_PACKAGES+=(lz4 zstd gzip)
# HTTP load generator: the boot path limits' load test (internal/server
# TestBootLoadWrk) hammers a real server with wrk.
APT_PACKAGES+=(wrk)
# The ingress test (test/e2e TestIngress) puts nginx in front of anvil:
# TLS, gRPC to h2c, a rewritten path prefix. bench/http serves the same
# image from it (sendfile on) as anvil's peer.
APT_PACKAGES+=(nginx-light)
# Tinkerbell's own agent against anvil serve (test/e2e TestTinkAgentWorkflow):
# tink-agent's containerd runtime, a private containerd with Debian's runc;
# the actions' image is busybox-static's busybox (above); nsenter (util-linux,
# always there) starts containerd in the machine's network namespace.
APT_PACKAGES+=(containerd runc)
# Config rendering (internal/render): rendered cloud-config user-data is
# checked with Debian's `cloud-init schema --config-file` (pulls in Python
# and ~30 small packages; the tests skip without it outside CI, and fail
# without it under CI).
APT_PACKAGES+=(cloud-init)
# The guides' own commands, run as written by test/e2e TestGuides: jq reads
# the configs they fetch (cloud-init, above, checks one); util-linux's
# unshare and nsenter give each guide its own /tmp and /var/lib.
APT_PACKAGES+=(jq util-linux)
# Kubernetes mode's tests (internal/kubetest) run a real kube-apiserver
# (built by scripts/fetch-kube.sh, `make kube`) against Debian's etcd.
APT_PACKAGES+=(etcd-server)
# Release and packaging (scripts/release.sh, test/release, test/pkg): dpkg-deb
# builds the .deb; debootstrap makes the clean Debian the package is
# installed in, booted by systemd-container's systemd-nspawn.
APT_PACKAGES+=(dpkg debootstrap systemd-container)
# The deployment's container test (deploy/kubernetes TestContainerOnImage)
# runs the image with the manifest's capabilities through capsh.
APT_PACKAGES+=(libcap2-bin)
# The serial console's tests (internal/console, test/e2e TestBMCReprovision)
# log in with OpenSSH's own client and make their keys with ssh-keygen.
APT_PACKAGES+=(openssh-client)
# The web UI's browser tests (test/browser) drive Debian's headless
# Chromium through chromedp.
APT_PACKAGES+=(chromium)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  need_root "${missing[*]}"
  say "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Go: Debian's golang is too old for go.mod, so the toolchain comes from the Go
# module proxy (the same zip `GOTOOLCHAIN=auto` would fetch).
have_go() {
  local g
  g=$(command -v go || true)
  [ -z "$g" ] && [ -x /usr/local/go/bin/go ] && g=/usr/local/go/bin/go
  [ -n "$g" ] || return 1
  # Any Go >= 1.21 fetches the go.mod toolchain itself (GOTOOLCHAIN=auto).
  "$g" version | grep -Eq 'go1\.(2[1-9]|[3-9][0-9])'
}
if ! have_go; then
  need_root "Go $GO_VERSION"
  proxy=${GOPROXY:-https://proxy.golang.org}; proxy=${proxy%%,*}
  zip="$proxy/golang.org/toolchain/@v/v0.0.1-go${GO_VERSION}.linux-amd64.zip"
  say "installing Go $GO_VERSION from $zip"
  tmp=$(mktemp -d)
  curl -fsSL -o "$tmp/go.zip" "$zip"
  unzip -q "$tmp/go.zip" -d "$tmp"
  rm -rf /usr/local/go
  mv "$tmp/golang.org/toolchain@v0.0.1-go${GO_VERSION}.linux-amd64" /usr/local/go
  chmod +x /usr/local/go/bin/* /usr/local/go/pkg/tool/*/* 2>/dev/null || true
  rm -rf "$tmp"
fi

if [ "${1:-}" = tools ]; then
  export PATH=/usr/local/go/bin:$PATH
  bin=$(go env GOPATH)/bin
  [ -x "$bin/staticcheck" ] || go install honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION
  [ -x "$bin/buf" ] || go install github.com/bufbuild/buf/cmd/buf@$BUF_VERSION
  [ -x "$bin/protoc-gen-go" ] || go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
  [ -x "$bin/protoc-gen-connect-go" ] || go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
fi
