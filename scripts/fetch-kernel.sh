#!/usr/bin/env bash
# fetch-kernel.sh puts a Debian kernel and its modules under a directory,
# for the end-to-end tests and the demo (the boot environment's kernel):
#
#   scripts/fetch-kernel.sh [DIR]     # default .cache/kernel
#
# DIR/vmlinuz is the kernel image, DIR/modules/lib/modules/VERSION the module
# tree, DIR/VERSION the kernel release, DIR/linux-image.deb the package they
# came from (`anvil bootenv build --modules` takes it as it is). The package
# is the one Debian's linux-image-amd64 depends on today; it is downloaded
# once and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.cache/kernel}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -s "$dir/vmlinuz" ] && [ -s "$dir/VERSION" ]; then
  if [ ! -s "$dir/linux-image.deb" ]; then
    # A cache from before the package was kept: fetch the same version,
    # leaving the unpacked tree alone.
    version=$(cat "$dir/VERSION")
    (cd "$tmp" && apt-get download -qq "linux-image-$version")
    mv "$tmp"/*.deb "$dir/linux-image.deb"
  fi
  exit 0
fi
mkdir -p "$dir"
pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
if [ -z "$pkg" ]; then
  apt-get update -qq
  pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
fi
echo "fetch-kernel: $pkg" >&2
(cd "$tmp" && apt-get download -qq "$pkg")
dpkg -x "$tmp"/*.deb "$tmp/x"
version=${pkg#linux-image-}
cp "$tmp/x/boot/vmlinuz-$version" "$dir/vmlinuz"
rm -rf "$dir/modules"
mkdir -p "$dir/modules/lib"
mv "$tmp/x/lib/modules" "$dir/modules/lib/"
cp "$tmp"/*.deb "$dir/linux-image.deb"
echo "$version" >"$dir/VERSION"
echo "fetch-kernel: $dir/vmlinuz ($version)" >&2
