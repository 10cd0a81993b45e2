#!/usr/bin/env bash
# capture-hwinfo.sh copies the files internal/hwinfo reads from this machine
# into a directory, as a recorded tree for its tests (testdata/<machine>):
#
#   scripts/capture-hwinfo.sh DEST            # this machine
#   scripts/capture-hwinfo.sh DEST ROOT       # another root (a mounted image)
#
# Only those files, each as a regular file (sysfs's links to devices become
# directories; a device's driver link is kept as a link to a directory of
# the driver's name, which the collector reads only the name of), and only
# what is readable: run it as root for the SMBIOS serials and the UUID.
# pci.ids is copied too when CAPTURE_PCI_IDS=1 (1.5 MB: not for testdata).
# The list of files here follows the paths in internal/hwinfo/hwinfo.go;
# TestCaptureScriptCopiesWhatCollectReads fails when the two part ways.
set -euo pipefail
dest=${1:?usage: capture-hwinfo.sh DEST [ROOT]}
src=${2:-}
src=${src%/}

# copy FILE [MAXBYTES]: the file's bytes (at most MAXBYTES, default 4096,
# the collector's cap on an attribute file), if it can be read.
copy() {
  local f=$1 max=${2:-4096}
  [ -f "$src$f" ] || return 0
  mkdir -p "$dest$(dirname "$f")"
  if ! head -c "$max" "$src$f" >"$dest$f" 2>/dev/null; then
    rm -f "$dest$f" # unreadable now (a NIC's speed while its link is down)
  fi
}

# driverlink DIR: DIR/driver as a link to ../drivers/NAME.
driverlink() {
  local d=$1 l
  l=$(readlink "$src$d/driver" 2>/dev/null) || return 0
  mkdir -p "$dest$d"
  ln -sfn "../drivers/$(basename "$l")" "$dest$d/driver"
}

copy /proc/cpuinfo $((16 << 20))
copy /proc/meminfo

for d in "$src"/sys/block/*; do
  [ -e "$d/device" ] || continue # loop, ram, zram, dm, md: not disks
  b=/sys/block/$(basename "$d")
  mkdir -p "$dest$b/device"
  for f in size removable dev serial wwid queue/rotational queue/physical_block_size \
    device/vendor device/model device/serial device/wwid device/vpd_pg80; do
    copy "$b/$f"
  done
  if dev=$(cat "$d/dev" 2>/dev/null); then copy "/run/udev/data/b$dev" 16384; fi
done

for d in "$src"/sys/class/net/*; do
  [ -e "$d/device" ] || continue # lo, bridges, bonds, VLANs, tunnels
  n=/sys/class/net/$(basename "$d")
  mkdir -p "$dest$n/device"
  for f in address speed operstate carrier device/uevent; do copy "$n/$f"; done
  driverlink "$n/device"
done

for d in "$src"/sys/bus/pci/devices/*; do
  [ -e "$d" ] || continue
  p=/sys/bus/pci/devices/$(basename "$d")
  mkdir -p "$dest$p"
  for f in vendor device class uevent; do copy "$p/$f"; done
  driverlink "$p"
done

for f in bios_vendor bios_version bios_date product_name sys_vendor product_serial product_uuid \
  board_vendor board_name board_version board_serial chassis_vendor chassis_serial; do
  copy "/sys/class/dmi/id/$f"
done
[ -d "$src/sys/firmware/dmi" ] && mkdir -p "$dest/sys/firmware/dmi"
if [ -d "$src/sys/firmware/efi" ]; then
  mkdir -p "$dest/sys/firmware/efi"
  copy /sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c
fi

for d in "$src"/sys/class/tpm/*; do
  [ -e "$d" ] || continue
  t=/sys/class/tpm/$(basename "$d")
  mkdir -p "$dest$t"
  for f in tpm_version_major caps device/caps; do copy "$t/$f"; done
done

if [ "${CAPTURE_PCI_IDS:-}" = 1 ]; then
  for f in /usr/share/misc/pci.ids /usr/share/hwdata/pci.ids /usr/share/pci.ids; do
    if [ -f "$src$f" ]; then copy "$f" $((32 << 20)); break; fi
  done
fi
