#!/usr/bin/env bash
# make-os-image.sh builds the small "operating system" that the install test
# and `make demo` write to a machine's disk: a raw disk with an MBR, one
# bootable FAT partition holding SYSLINUX, a kernel, an initramfs, and a
# static busybox (so cexec actions have a shell and wget to run), then
# compresses it with zstd.
#
#   scripts/make-os-image.sh OUTDIR KERNEL INITRD
#
# OUTDIR/os.raw is the disk, OUTDIR/os.raw.zst what image2disk streams.
# The partition's /syslinux.cfg boots KERNEL with INITRD and the kernel
# arguments `console=ttyS0 anvil.installed=1 anvil.hostname=unset`: a
# workflow's writefile action replaces that file to name the machine, so the
# installed OS proves on its console what the workflow wrote. Built without
# loop devices or mounts (mtools), so it runs anywhere as any user.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 OUTDIR KERNEL INITRD" >&2; exit 2; }
out=$1 kernel=$2 initrd=$3
for tool in mkfs.vfat mcopy mmd syslinux sfdisk zstd; do
  command -v "$tool" >/dev/null || { echo "$0: needs $tool (scripts/install-deps.sh installs it)" >&2; exit 1; }
done
mbr=/usr/lib/syslinux/mbr/mbr.bin
[ -r "$mbr" ] || { echo "$0: needs $mbr (Debian package syslinux-common)" >&2; exit 1; }
busybox=$(command -v busybox || true)

mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The partition: big enough for the kernel, initramfs and busybox with room
# to spare for files the workflow writes.
ksize=$(( ($(stat -c %s "$kernel") + $(stat -c %s "$initrd") + 4*1024*1024) / 1024 ))
part_kib=$(( ksize + 8192 ))
mkfs.vfat -C -n ANVILOS "$tmp/part.img" "$part_kib" >/dev/null
cat >"$tmp/syslinux.cfg" <<CFG
SERIAL 0 115200
DEFAULT installed
PROMPT 0
TIMEOUT 0
LABEL installed
  KERNEL /vmlinuz
  APPEND initrd=/initrd console=ttyS0 anvil.installed=1 anvil.hostname=unset
CFG
export MTOOLS_SKIP_CHECK=1
mmd -i "$tmp/part.img" ::/dev ::/proc ::/sys ::/tmp
mcopy -i "$tmp/part.img" "$kernel" ::/vmlinuz
mcopy -i "$tmp/part.img" "$initrd" ::/initrd
mcopy -i "$tmp/part.img" "$tmp/syslinux.cfg" ::/syslinux.cfg
if [ -n "$busybox" ]; then
  mcopy -i "$tmp/part.img" "$busybox" ::/busybox
fi
syslinux --install "$tmp/part.img"

# The disk: 1 MiB for the MBR and alignment, then the partition.
disk="$tmp/os.raw"
truncate -s $(( 1024*1024 + part_kib*1024 )) "$disk"
dd if="$tmp/part.img" of="$disk" bs=1M seek=1 conv=notrunc status=none
echo "start=2048, type=c, bootable" | sfdisk --quiet --wipe never "$disk" 2>/dev/null
dd if="$mbr" of="$disk" bs=440 count=1 conv=notrunc status=none
zstd -q -f -3 "$disk" -o "$tmp/os.raw.zst"
mv "$disk" "$out/os.raw"
mv "$tmp/os.raw.zst" "$out/os.raw.zst"
echo "make-os-image: $out/os.raw ($(stat -c %s "$out/os.raw") bytes), $out/os.raw.zst ($(stat -c %s "$out/os.raw.zst") bytes)" >&2
