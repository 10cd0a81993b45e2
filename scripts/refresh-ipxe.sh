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
#
# ARM64: bookworm's ipxe has no arm64 binary. The ipxe package of the next
# Debian release ($ARM64_SUITE) builds ipxe-arm64.efi from its source
# package with Debian's cross compiler (gcc-aarch64-linux-gnu, a
# Build-Depends of that source package); this script takes that file
# unmodified from that package, read through a private apt directory so
# the host's sources and installed ipxe stay as they are. Why not build it
# here from `apt-get source ipxe`: the mirror this project's machines use
# serves no ipxe source files (404 for bookworm's and trixie's), so a build
# from source cannot run on them; Debian's own cross build is the next
# closest thing and names its exact source (README.md, Corresponding source).
set -euo pipefail

cd "$(dirname "$0")/.."
src=/usr/lib/ipxe
dst=internal/ipxe/binaries
files=(undionly.kpxe ipxe.efi snponly.efi)
ARM64_SUITE=${ARM64_SUITE:-trixie}
arm64_file=ipxe-arm64.efi

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

# The arm64 binary, from $ARM64_SUITE's ipxe package.
apt_dir=$(mktemp -d)
trap 'rm -rf "$apt_dir"' EXIT
mkdir -p "$apt_dir/etc" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/deb"
cat >"$apt_dir/etc/ipxe-arm64.sources" <<SOURCES
Types: deb
URIs: $(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || echo http://deb.debian.org/debian)
Suites: $ARM64_SUITE
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
apt_opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$apt_dir/etc"
	-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o APT::Architectures::=amd64)
apt-get "${apt_opts[@]}" update -qq
arm64_version=$(apt-cache "${apt_opts[@]}" show "ipxe/$ARM64_SUITE" | awk '/^Version:/ {print $2; exit}')
(cd "$apt_dir/deb" && apt-get "${apt_opts[@]}" download -qq "ipxe=$arm64_version" 2>/dev/null)
dpkg-deb -x "$apt_dir"/deb/ipxe_*.deb "$apt_dir/x"
if [ ! -s "$apt_dir/x/usr/lib/ipxe/$arm64_file" ]; then
	echo "refresh-ipxe: ipxe $arm64_version ($ARM64_SUITE) has no /usr/lib/ipxe/$arm64_file" >&2
	exit 1
fi
cp "$apt_dir/x/usr/lib/ipxe/$arm64_file" "$dst/$arm64_file"
chmod 0644 "$dst/$arm64_file"
cp "$apt_dir/x/usr/share/doc/ipxe/copyright" "$dst/COPYING.debian-arm64"
printf '%s\n' "$arm64_version" >"$dst/VERSION-arm64"
arm64_commit=$(sed -n 's/^.*+git[0-9]*\.\([0-9a-f]*\)+.*$/\1/p' <<<"$arm64_version")

{
	cat <<HEADER
# Bundled iPXE binaries

These files are embedded into the anvil binary (see ../binaries.go) and
served over TFTP and HTTP to machines that network boot. They are copied
unmodified from Debian's \`ipxe\` package by \`make ipxe-refresh\`
(scripts/refresh-ipxe.sh); do not edit them by hand.

| | |
| --- | --- |
| Debian package | ipxe $version (x86), ipxe $arm64_version ($ARM64_SUITE, for $arm64_file) |
| upstream | iPXE git snapshot of ${date:-unknown}, commit ${commit:-unknown} (https://github.com/ipxe/ipxe/commit/${commit:-}); for $arm64_file commit ${arm64_commit:-unknown} (https://github.com/ipxe/ipxe/commit/${arm64_commit:-}) |
| copied from | $src on $(. /etc/os-release && echo "$PRETTY_NAME"); $arm64_file from /usr/lib/ipxe of $ARM64_SUITE's ipxe_${arm64_version}_all.deb |

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
	printf '| %s | %s | `%s` | %s |\n' "$arm64_file" "$(stat -c %s "$dst/$arm64_file")" "$(sha256sum "$dst/$arm64_file" | cut -d' ' -f1)" \
		"ARM64 UEFI, PXE and HTTP boot (iPXE's own NIC drivers and the firmware's SNP); cross-built by Debian with gcc-aarch64-linux-gnu"
	cat <<FOOTER

bookworm's ipxe package has no ARM64 binary; $arm64_file comes from the ipxe
package of $ARM64_SUITE, whose source package builds it with Debian's cross
compiler. VERSION names the x86 binaries' package, VERSION-arm64 the
ARM64 one's.

## Licence

iPXE is free software under the GNU General Public License version 2 (most
of its files "or any later version"); see COPYING.GPL-2 for the licence text and
COPYING.debian (COPYING.debian-arm64 for $arm64_file) for Debian's copyright
file, which lists every file's licence. Upstream offers many of iPXE's
files under GPL-2 "or, at your option, the Unmodified Binary Distribution
Licence" (UBDL, iPXE's COPYING.UBDL); Debian's copyright files list the
GPL terms, and Anvil ships these binaries unmodified under the GPL-2 with
the corresponding source named below.

Corresponding source: the Debian source package ipxe $version, from
https://snapshot.debian.org/package/ipxe/$version/ or
\`apt-get source ipxe=$version\`, which is upstream commit ${commit:-unknown}
plus Debian's patches; for $arm64_file the source package ipxe
$arm64_version (https://snapshot.debian.org/package/ipxe/$arm64_version/),
upstream commit ${arm64_commit:-unknown} plus Debian's patches.
FOOTER
} >"$dst/README.md"

echo "refresh-ipxe: copied ipxe $version (upstream ${commit:-unknown}) into $dst"
sha256sum "${files[@]/#/$dst/}" "$dst/$arm64_file"
