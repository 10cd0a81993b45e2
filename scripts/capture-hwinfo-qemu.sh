#!/usr/bin/env bash
# capture-hwinfo-qemu.sh records the tree internal/hwinfo reads from a QEMU
# VM, as the testdata/qemu-q35* machines were recorded:
#
#   scripts/capture-hwinfo-qemu.sh DEST            # SeaBIOS
#   scripts/capture-hwinfo-qemu.sh DEST uefi       # OVMF (Secure Boot off)
#
# It boots the kernel of .cache/kernel (scripts/fetch-kernel.sh) with an
# initramfs of busybox, the virtio, AHCI and CD-ROM modules and
# scripts/capture-hwinfo.sh, which runs in the VM; the tree comes back as a
# tar on the serial console. The VM is the one the docs and tests name:
# q35, 2 vCPUs, 2 GiB, -smbios type=1,serial=anvil-qemu-000N, an 8 GiB virtio
# disk with serial=anvil-disk-000N, virtio-net with MAC 52:54:00:12:34:5N.
# Needs qemu-system-x86, busybox (static), cpio and, for uefi, ovmf. TCG
# only: the lab's KVM is nested and fails late (shared/LAB-NOTES.md).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:?usage: capture-hwinfo-qemu.sh DEST [uefi]}
mode=${2:-bios}
kver=$(cat .cache/kernel/VERSION)
mods=.cache/kernel/modules/lib/modules/$kver
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/root/bin" "$tmp/root/mod" "$tmp/root/proc" "$tmp/root/sys" "$tmp/root/dev" "$tmp/root/tmp"
cp "$(command -v busybox)" "$tmp/root/bin/busybox"
cp scripts/capture-hwinfo.sh "$tmp/root/capture.sh"

# The modules in load order, each after what it depends on.
order=()
add() {
  local m=$1 f d
  for d in "${order[@]}"; do [ "$d" = "$m" ] && return 0; done
  f=$(find "$mods/kernel" -name "$m.ko" | head -1)
  [ -n "$f" ] || return 0 # built in
  for d in $(/sbin/modinfo -F depends "$f" | tr , ' '); do add "$d"; done
  order+=("$m")
  cp "$f" "$tmp/root/mod/"
}
for m in virtio_pci virtio_blk virtio_net ahci sr_mod sd_mod efivarfs; do add "$m"; done

cat >"$tmp/root/init" <<INIT
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in ${order[*]}; do insmod /mod/\$m.ko; done
[ -d /sys/firmware/efi ] && mount -t efivarfs -o ro efivarfs /sys/firmware/efi/efivars
sleep 3 # the disks and the NIC probe after their modules load
ip link set eth0 up
sleep 2
sh /capture.sh /tmp/cap
echo ===BEGIN===
tar cf - -C /tmp/cap . | gzip | base64
echo ===END===
poweroff -f
INIT
chmod +x "$tmp/root/init"
(cd "$tmp/root" && find . | cpio -o -H newc 2>/dev/null | gzip >"$tmp/initrd.gz")
truncate -s 8G "$tmp/disk.img"

n=1 uuid=5e1f2b8e-7c3a-4d59-9b1e-0a6c2d4f8e01 fw=()
if [ "$mode" = uefi ]; then
  n=2 uuid=9b0c4a6e-2f1d-4e8a-b7c3-5d6e7f8a9b02
  cp /usr/share/OVMF/OVMF_VARS_4M.fd "$tmp/vars.fd"
  fw=(-drive if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd
    -drive if=pflash,format=raw,unit=1,file="$tmp/vars.fd")
fi
timeout 600 qemu-system-x86_64 -machine q35 -accel tcg -smp 2 -m 2048 "${fw[@]}" \
  -smbios type=1,serial=anvil-qemu-000$n -uuid $uuid \
  -drive file="$tmp/disk.img",if=none,id=d0,format=raw -device virtio-blk-pci,drive=d0,serial=anvil-disk-000$n \
  -netdev user,id=n0 -device virtio-net-pci,netdev=n0,mac=52:54:00:12:34:5$((5 + n)) \
  -kernel .cache/kernel/vmlinuz -initrd "$tmp/initrd.gz" -append "console=ttyS0 panic=-1 loglevel=4" \
  -nographic -no-reboot >"$tmp/console.txt" 2>&1
mkdir -p "$dest"
sed -n '/===BEGIN===/,/===END===/p' "$tmp/console.txt" | sed '1d;$d' | tr -d '\r' | base64 -d | tar xzf - -C "$dest"
echo "recorded $mode VM in $dest"
