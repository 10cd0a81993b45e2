#!/usr/bin/env bash
# fetch-kernel.sh puts a Debian kernel and its modules under a directory,
# for the end-to-end tests and the demo (the boot environment's kernel):
#
#   scripts/fetch-kernel.sh [DIR] [ARCH]   # default .cache/kernel, amd64
#   scripts/fetch-kernel.sh .cache/kernel-arm64 arm64
#
# DIR/vmlinuz is the kernel image, DIR/modules/lib/modules/VERSION the module
# tree, DIR/VERSION the kernel release, DIR/linux-image.deb the package they
# came from (`anvil bootenv build --modules` takes it as it is). The package
# is the one Debian's linux-image-ARCH depends on today; it is downloaded
# once and reused. A foreign ARCH (arm64 on an amd64 host) is added to
# dpkg's architectures first, so that apt knows its packages: only its
# package lists are fetched, nothing of it is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.cache/kernel}
arch=${2:-amd64}
case $arch in
amd64 | arm64) ;;
*) echo "fetch-kernel: architecture $arch: want amd64 or arm64" >&2; exit 2 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -s "$dir/vmlinuz" ] && [ -s "$dir/VERSION" ]; then
  if [ ! -s "$dir/linux-image.deb" ]; then
    # A cache from before the package was kept: fetch the same version,
    # leaving the unpacked tree alone.
    version=$(cat "$dir/VERSION")
    (cd "$tmp" && apt-get download -qq "linux-image-$version:$arch")
    mv "$tmp"/*.deb "$dir/linux-image.deb"
  fi
  exit 0
fi
mkdir -p "$dir"
if [ "$arch" != "$(dpkg --print-architecture)" ] && ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
  dpkg --add-architecture "$arch"
  apt-get update -qq
fi
depends() { apt-cache depends "linux-image-$arch:$arch" 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {sub(/:.*/, "", $2); print $2; exit}'; }
pkg=$(depends)
if [ -z "$pkg" ]; then
  apt-get update -qq
  pkg=$(depends)
fi
if [ -z "$pkg" ]; then
  echo "fetch-kernel: apt knows no linux-image-$arch" >&2
  exit 1
fi
echo "fetch-kernel: $pkg ($arch)" >&2
(cd "$tmp" && apt-get download -qq "$pkg:$arch")
dpkg -x "$tmp"/*.deb "$tmp/x"
version=${pkg#linux-image-}
cp "$tmp/x/boot/vmlinuz-$version" "$dir/vmlinuz"
rm -rf "$dir/modules"
mkdir -p "$dir/modules/lib"
mv "$tmp/x/lib/modules" "$dir/modules/lib/"
cp "$tmp"/*.deb "$dir/linux-image.deb"
echo "$version" >"$dir/VERSION"
echo "fetch-kernel: $dir/vmlinuz ($version)" >&2
