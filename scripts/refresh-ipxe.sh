#!/usr/bin/env bash
# refresh-ipxe.sh — copy Debian's iPXE binaries into internal/ipxe/binaries,
# where `go build` embeds them, and write down what they are.
#
# Why Debian's build: it is reproducible from a public source package, its
# licence is stated, and `apt-get source ipxe=VERSION` gives anyone the exact
# corresponding source, which the GPL-2 asks of us when we ship the binaries.
#
# Usage: scripts/refresh-ipxe.sh        (or: make ipxe-refresh)
# To take a newer Debian build, upgrade the package first
# (apt-get install --only-upgrade ipxe), then run this again and commit
# internal/ipxe/binaries.
set -euo pipefail

cd "$(dirname "$0")/.."
src=/usr/lib/ipxe
dst=internal/ipxe/binaries
files=(undionly.kpxe ipxe.efi snponly.efi)

installed() { dpkg-query -W -f='${Status}' ipxe 2>/dev/null | grep -q 'install ok installed'; }

if ! installed; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "refresh-ipxe: Debian's ipxe package is not installed; run: sudo apt-get install ipxe" >&2
		exit 1
	fi
	echo "refresh-ipxe: installing Debian's ipxe package"
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q ipxe
fi

version=$(dpkg-query -W -f='${Version}' ipxe)
# Debian versions the snapshot as 1.0.0+git-YYYYMMDD.COMMIT-REVISION.
commit=$(sed -n 's/^.*+git-[0-9]*\.\([0-9a-f]*\)-.*$/\1/p' <<<"$version")
date=$(sed -n 's/^.*+git-\([0-9]\{8\}\)\..*$/\1/p' <<<"$version")

mkdir -p "$dst"
for f in "${files[@]}"; do
	if [ ! -e "$src/$f" ]; then
		echo "refresh-ipxe: $src/$f is missing from ipxe $version" >&2
		exit 1
	fi
	# -L: Debian ships ipxe.efi as a symlink to /boot/ipxe.efi.
	cp -L "$src/$f" "$dst/$f"
	chmod 0644 "$dst/$f"
done
cp /usr/share/doc/ipxe/copyright "$dst/COPYING.debian"
cp /usr/share/common-licenses/GPL-2 "$dst/COPYING.GPL-2"
printf '%s\n' "$version" >"$dst/VERSION"

{
	cat <<HEADER
# Bundled iPXE binaries

These files are embedded into the anvil binary (see ../binaries.go) and
served over TFTP and HTTP to machines that network boot. They are copied
unmodified from Debian's \`ipxe\` package by \`make ipxe-refresh\`
(scripts/refresh-ipxe.sh); do not edit them by hand.

| | |
| --- | --- |
| Debian package | ipxe $version |
| upstream | iPXE git snapshot of ${date:-unknown}, commit ${commit:-unknown} (https://github.com/ipxe/ipxe/commit/${commit:-}) |
| copied from | $src on $(. /etc/os-release && echo "$PRETTY_NAME") |

## Files

| file | bytes | SHA-256 | for |
| --- | --- | --- | --- |
HEADER
	for f in "${files[@]}"; do
		case $f in
		undionly.kpxe) for="PC BIOS PXE (chainloads through the NIC's UNDI driver)" ;;
		ipxe.efi) for="x86-64 UEFI, PXE and HTTP boot (iPXE's own NIC drivers)" ;;
		snponly.efi) for="x86-64 UEFI, using the firmware's network driver (SNP); smaller, works where ipxe.efi lacks a driver" ;;
		esac
		printf '| %s | %s | `%s` | %s |\n' "$f" "$(stat -c %s "$dst/$f")" "$(sha256sum "$dst/$f" | cut -d' ' -f1)" "$for"
	done
	cat <<FOOTER

There is no ARM64 binary: Debian's package has none. An operator who needs
one puts snp-arm64.efi in the TFTP/HTTP directory.

## Licence

iPXE is free software under the GNU General Public License version 2 (most
of its files "or any later version"); see COPYING.GPL-2 for the licence text and
COPYING.debian for Debian's copyright file, which lists every file's
licence. Anvil ships these binaries unmodified.

Corresponding source: the Debian source package ipxe $version, from
https://snapshot.debian.org/package/ipxe/$version/ or
\`apt-get source ipxe=$version\`, which is upstream commit ${commit:-unknown}
plus Debian's patches.
FOOTER
} >"$dst/README.md"

echo "refresh-ipxe: copied ipxe $version (upstream ${commit:-unknown}) into $dst"
sha256sum "${files[@]/#/$dst/}"
