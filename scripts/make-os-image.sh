#!/usr/bin/env bash
# make-os-image.sh builds the small "operating system" that the install tests
# and `make demo` write to a machine's disk: a raw disk with one FAT
# partition holding a boot loader, a kernel, an initramfs, and a static
# busybox (so cexec actions have a shell and wget to run), then compresses
# it with zstd. Two variants, one per firmware:
#
#   scripts/make-os-image.sh OUTDIR KERNEL INITRD          # BIOS: os.raw
#   scripts/make-os-image.sh --uefi OUTDIR KERNEL INITRD   # UEFI: os-uefi.raw
#   scripts/make-os-image.sh --uefi --arch arm64 OUTDIR KERNEL INITRD
#                                                          # ARM64 UEFI: os-uefi-arm64.raw
#
# BIOS: an MBR disk whose bootable partition holds SYSLINUX; its
# /syslinux.cfg boots KERNEL with INITRD.
# UEFI: a GPT disk whose only partition is an EFI system partition holding
# Debian's systemd-boot as the removable-media loader (/EFI/BOOT/BOOTX64.EFI,
# which UEFI firmware boots from a disk without any boot entry in NVRAM);
# its loader entry /loader/entries/anvil.conf boots KERNEL (an EFI-stub
# kernel, as Debian's is) with INITRD.
# ARM64 UEFI: the same with Debian's arm64 systemd-boot (/EFI/BOOT/BOOTAA64.EFI)
# and arm64 busybox, taken from the arm64 packages systemd-boot-efi and
# busybox-static (apt-get download, unpacked, never installed; kept in
# $FOREIGN_CACHE, default .cache/debs-arm64); the console is ttyAMA0.
#
# Either boot config gives the kernel the arguments
# `console=ttyS0 anvil.installed=1 anvil.hostname=unset` (ttyAMA0 on arm64): a workflow's
# writefile action replaces that file to name the machine, so the installed
# OS proves on its console what the workflow wrote. OUTDIR/NAME.raw is the
# disk, OUTDIR/NAME.raw.zst what image2disk streams. Built without loop
# devices or mounts (mtools, sfdisk), so it runs anywhere as any user.
set -euo pipefail
uefi=false
arch=amd64
while [ $# -gt 0 ]; do
  case $1 in
  --uefi) uefi=true; shift ;;
  --arch) arch=${2:-}; shift 2 ;;
  *) break ;;
  esac
done
[ $# -eq 3 ] || { echo "usage: $0 [--uefi] [--arch amd64|arm64] OUTDIR KERNEL INITRD" >&2; exit 2; }
case $arch in
amd64) ;;
arm64) $uefi || { echo "$0: --arch arm64 needs --uefi (arm64 machines boot UEFI)" >&2; exit 2; } ;;
*) echo "$0: architecture $arch: want amd64 or arm64" >&2; exit 2 ;;
esac
out=$1 kernel=$2 initrd=$3
here=$(cd "$(dirname "$0")/.." && pwd)

# foreign_file PKG PATH prints where PATH of the arm64 package PKG is,
# downloading and unpacking the package once into FOREIGN_CACHE.
foreign_file() {
  local cache=${FOREIGN_CACHE:-$here/.cache/debs-arm64} pkg=$1 path=$2
  if [ ! -e "$cache/$pkg/root/$path" ]; then
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
      dpkg --add-architecture arm64
      apt-get update -qq
    fi
    rm -rf "$cache/$pkg"
    mkdir -p "$cache/$pkg"
    (cd "$cache/$pkg" && apt-get download -qq "$pkg:arm64" 2>/dev/null) || {
      apt-get update -qq
      (cd "$cache/$pkg" && apt-get download -qq "$pkg:arm64")
    }
    dpkg-deb -x "$cache/$pkg"/*.deb "$cache/$pkg/root"
  fi
  [ -e "$cache/$pkg/root/$path" ] || { echo "$0: $pkg:arm64 has no $path" >&2; exit 1; }
  echo "$cache/$pkg/root/$path"
}
for tool in mkfs.vfat mcopy mmd sfdisk zstd; do
  command -v "$tool" >/dev/null || { echo "$0: needs $tool (scripts/install-deps.sh installs it)" >&2; exit 1; }
done
console=ttyS0
if [ "$arch" = arm64 ]; then
  name=os-uefi-arm64
  sdboot=$(foreign_file systemd-boot-efi usr/lib/systemd/boot/efi/systemd-bootaa64.efi)
  loader=BOOTAA64.EFI
  busybox=$(foreign_file busybox-static bin/busybox)
  console=ttyAMA0
elif $uefi; then
  name=os-uefi
  sdboot=/usr/lib/systemd/boot/efi/systemd-bootx64.efi
  loader=BOOTX64.EFI
  [ -r "$sdboot" ] || { echo "$0: needs $sdboot (Debian package systemd-boot-efi)" >&2; exit 1; }
else
  name=os
  command -v syslinux >/dev/null || { echo "$0: needs syslinux (scripts/install-deps.sh installs it)" >&2; exit 1; }
  mbr=/usr/lib/syslinux/mbr/mbr.bin
  [ -r "$mbr" ] || { echo "$0: needs $mbr (Debian package syslinux-common)" >&2; exit 1; }
fi
[ "$arch" = arm64 ] || busybox=$(command -v busybox || true)

mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The partition: big enough for the kernel, initramfs and busybox with room
# to spare for files the workflow writes.
ksize=$(( ($(stat -c %s "$kernel") + $(stat -c %s "$initrd") + 4*1024*1024) / 1024 ))
part_kib=$(( ksize + 8192 ))
mkfs.vfat -C -n ANVILOS "$tmp/part.img" "$part_kib" >/dev/null
args="console=$console anvil.installed=1 anvil.hostname=unset"
export MTOOLS_SKIP_CHECK=1
mmd -i "$tmp/part.img" ::/dev ::/proc ::/sys ::/tmp
mcopy -i "$tmp/part.img" "$kernel" ::/vmlinuz
mcopy -i "$tmp/part.img" "$initrd" ::/initrd
if [ -n "$busybox" ]; then
  mcopy -i "$tmp/part.img" "$busybox" ::/busybox
fi

disk="$tmp/$name.raw"
if $uefi; then
  # systemd-boot: no menu (timeout 0), straight to the one entry.
  printf 'default anvil.conf\ntimeout 0\n' >"$tmp/loader.conf"
  printf 'title Anvil test OS\nlinux /vmlinuz\ninitrd /initrd\noptions %s\n' "$args" >"$tmp/anvil.conf"
  mmd -i "$tmp/part.img" ::/EFI ::/EFI/BOOT ::/loader ::/loader/entries
  mcopy -i "$tmp/part.img" "$sdboot" "::/EFI/BOOT/$loader"
  mcopy -i "$tmp/part.img" "$tmp/loader.conf" ::/loader/loader.conf
  mcopy -i "$tmp/part.img" "$tmp/anvil.conf" ::/loader/entries/anvil.conf
  # The disk: 1 MiB for the protective MBR, the GPT and alignment, the
  # partition, and 1 MiB at the end for the backup GPT.
  truncate -s $(( 2*1024*1024 + part_kib*1024 )) "$disk"
  dd if="$tmp/part.img" of="$disk" bs=1M seek=1 conv=notrunc status=none
  printf 'label: gpt\nstart=2048, size=%d, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name="ESP"\n' \
    $(( part_kib * 2 )) | sfdisk --quiet --wipe never "$disk" 2>/dev/null
else
  printf 'SERIAL 0 115200\nDEFAULT installed\nPROMPT 0\nTIMEOUT 0\nLABEL installed\n  KERNEL /vmlinuz\n  APPEND initrd=/initrd %s\n' \
    "$args" >"$tmp/syslinux.cfg"
  mcopy -i "$tmp/part.img" "$tmp/syslinux.cfg" ::/syslinux.cfg
  syslinux --install "$tmp/part.img"
  # The disk: 1 MiB for the MBR and alignment, then the partition.
  truncate -s $(( 1024*1024 + part_kib*1024 )) "$disk"
  dd if="$tmp/part.img" of="$disk" bs=1M seek=1 conv=notrunc status=none
  echo "start=2048, type=c, bootable" | sfdisk --quiet --wipe never "$disk" 2>/dev/null
  dd if="$mbr" of="$disk" bs=440 count=1 conv=notrunc status=none
fi
zstd -q -f -3 "$disk" -o "$tmp/$name.raw.zst"
mv "$disk" "$out/$name.raw"
mv "$tmp/$name.raw.zst" "$out/$name.raw.zst"
echo "make-os-image: $out/$name.raw ($(stat -c %s "$out/$name.raw") bytes), $out/$name.raw.zst ($(stat -c %s "$out/$name.raw.zst") bytes)" >&2
