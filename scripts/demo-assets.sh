#!/usr/bin/env bash
# demo-assets.sh makes what the demo's machine boots and installs, in one
# place for `make demo` (scripts/demo.sh) and the .deb's install test
# (test/pkg), which provisions the same machine through the packaged service:
#
#   ANVIL=bin/anvil scripts/demo-assets.sh OUTDIR
#
# OUTDIR/bootenv: `$ANVIL bootenv build` of Debian's kernel (.cache/kernel,
# fetched when missing) with the anvil-agent next to $ANVIL as /init;
# rebuilt by bootenv build itself only when an input changed.
# OUTDIR/images/os.raw.zst: the small BIOS OS of scripts/make-os-image.sh,
# whose init is test/e2e/testinit; rebuilt when testinit changed.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: ANVIL=bin/anvil scripts/demo-assets.sh OUTDIR}
ANVIL=${ANVIL:-$PWD/bin/anvil}

scripts/fetch-kernel.sh .cache/kernel
"$ANVIL" bootenv build --kernel .cache/kernel/vmlinuz --modules .cache/kernel/modules --out "$out/bootenv" \
  | sed 's/^/    /'
if [ ! -s "$out/images/os.raw.zst" ] || [ test/e2e/testinit/main.go -nt "$out/images/os.raw.zst" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/os-initramfs/dev"
  CGO_ENABLED=0 go build -o "$tmp/os-initramfs/init" ./test/e2e/testinit
  mknod "$tmp/os-initramfs/dev/console" c 5 1
  (cd "$tmp/os-initramfs" && find . | cpio --quiet -o -H newc) >"$tmp/os-initrd"
  scripts/make-os-image.sh "$out/images" .cache/kernel/vmlinuz "$tmp/os-initrd" 2>&1 | sed 's/^/    /'
fi
echo "    OS image: $out/images/os.raw.zst ($(stat -c %s "$out/images/os.raw.zst") bytes; a FAT partition with SYSLINUX, a kernel and a tiny init)"
