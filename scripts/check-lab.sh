#!/usr/bin/env bash
# check-lab.sh checks, after scripts/install-deps.sh, `make kernel`, `make kube` and `make oidc`, that
# this machine can run every test: root, the kernel features the lab tests
# use (network namespaces, taps, loop devices, IPv6 on the loopback), the
# tools they run and the Debian kernel they boot. `make test` runs it.
#
# Under CI (CI set and not false, as internal/testtool.InCI reads it) a
# missing piece fails at once, before the ten-minute suite starts, and IPv6
# on the loopback is switched on if a container switched it off (the TFTP
# IPv6 test needs ::1). Elsewhere it only lists what the tests will skip.
#
# The tests stay the authority (each one fails under CI without what it
# needs, and internal/tools/testsum refuses skips); this is the early,
# readable version of the same verdict.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/sbin:/sbin

ci=false
case "${CI:-}" in
  "" | false | False | FALSE | f | F | 0) ;;
  *) ci=true ;;
esac

problems=()
problem() { problems+=("$*"); }

if [ "$(id -u)" != 0 ]; then
  problem "not root: the lab tests need network namespaces, taps, loop devices and mounts"
else
  [ -c /dev/net/tun ] || problem "no /dev/net/tun (QEMU's taps)"
  [ -e /dev/loop-control ] || problem "no /dev/loop-control (loop devices for the action tests)"
  ns=anvil-check-$$
  if ip netns add "$ns" 2>/dev/null; then
    ip netns del "$ns"
  else
    problem "cannot create a network namespace (ip netns add)"
  fi
  lo6=/proc/sys/net/ipv6/conf/lo/disable_ipv6
  if [ ! -e "$lo6" ]; then
    problem "no IPv6 in this kernel (internal/tftp TestIPv6 serves on ::1)"
  elif [ "$(cat "$lo6")" != 0 ]; then
    if $ci && echo 0 >"$lo6" 2>/dev/null; then
      echo "check-lab: IPv6 was off on the loopback; switched it on for internal/tftp TestIPv6" >&2
    else
      problem "IPv6 is off on the loopback (echo 0 > $lo6; internal/tftp TestIPv6 serves on ::1)"
    fi
  fi
fi

# The programs the tests run as peers, by the Debian package that has them
# (scripts/install-deps.sh installs each).
tools=(
  ip:iproute2 qemu-system-x86_64:qemu-system-x86 qemu-system-aarch64:qemu-system-arm qemu-img:qemu-utils qemu-io:qemu-utils
  dnsmasq:dnsmasq-base curl:curl cpio:cpio atftp:atftp tftp:tftp-hpa logger:bsdutils
  wrk:wrk nginx:nginx-light cloud-init:cloud-init perfdhcp:kea-admin kea-dhcp4:kea-dhcp4-server
  zstd:zstd lz4:lz4 gzip:gzip bzip2:bzip2 mkfs.vfat:dosfstools mkfs.ext4:e2fsprogs
  losetup:mount mtype:mtools syslinux:syslinux depmod:kmod dpkg-deb:dpkg sha256sum:coreutils
  e2fsck:e2fsprogs jq:jq dhcrelay:isc-dhcp-relay unshare:util-linux nsenter:util-linux
  ipmi_sim:openipmi etcd:etcd-server ssh:openssh-client ssh-keygen:openssh-client capsh:libcap2-bin
)
for t in "${tools[@]}"; do
  command -v "${t%%:*}" >/dev/null || problem "${t%%:*} not found (Debian package ${t##*:})"
done
[ -x /bin/busybox ] || problem "no /bin/busybox (Debian package busybox-static)"
[ -r /usr/share/OVMF/OVMF_CODE.fd ] || problem "no OVMF firmware (Debian package ovmf)"
[ -r /usr/lib/systemd/boot/efi/systemd-bootx64.efi ] || problem "no systemd-boot (Debian package systemd-boot-efi; the UEFI install image)"
[ -r /usr/share/AAVMF/AAVMF_CODE.fd ] || problem "no AAVMF firmware (Debian package qemu-efi-aarch64; the ARM64 install)"
[ -s .cache/kernel/VERSION ] || problem "no Debian kernel in .cache/kernel (make kernel)"
[ -s .cache/kernel-arm64/VERSION ] || problem "no Debian arm64 kernel in .cache/kernel-arm64 (make kernel)"
[ -x "${KUBE_APISERVER:-.cache/kube/bin/kube-apiserver}" ] || problem "no kube-apiserver in .cache/kube/bin (make kube)"
[ -x "${ANVIL_TEST_IDP:-.cache/oidc/bin/anvil-test-idp}" ] || problem "no test OpenID Provider in .cache/oidc/bin (make oidc)"

if [ ${#problems[@]} -eq 0 ]; then
  exit 0
fi
if $ci; then
  echo "check-lab: this machine cannot run every test, and CI must (run as root after scripts/install-deps.sh):" >&2
  printf '  - %s\n' "${problems[@]}" >&2
  exit 1
fi
echo "check-lab: tests that need these will be skipped (they fail under CI=true):" >&2
printf '  - %s\n' "${problems[@]}" >&2
exit 0
