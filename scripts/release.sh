#!/usr/bin/env bash
# release.sh: every release artefact of this commit in OUT (`make release`;
# docs/install.md): per architecture, the static anvil and anvil-agent, a
# .deb, a container image (docker save tarball), a CycloneDX SBOM for each
# of them, and SHA256SUMS over all.
#
# Reproducible: every input is the commit (VERSION, COMMIT, and
# SOURCE_DATE_EPOCH = the commit's time, never now), Go builds with
# -trimpath, files are staged with explicit modes and times whatever the
# umask, dpkg-deb writes sorted members owned by root, and the image and
# SBOM tools write no clock. test/release builds it twice and compares.
#
# Environment: VERSION, COMMIT, SOURCE_DATE_EPOCH (default: from git),
# OUT (default dist), ARCHES (default "amd64 arm64"), CA_BUNDLE (the
# image's CA certificates, default Debian's).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH

VERSION=${VERSION:-$(git describe --tags --always --dirty)}
COMMIT=${COMMIT:-$(git rev-parse HEAD)}
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
OUT=${OUT:-dist}
ARCHES=${ARCHES:-amd64 arm64}
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
export SOURCE_DATE_EPOCH

DATE=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
# Debian's version: no leading v, and git describe's dashes (v0.1.0-57-gabc)
# as pluses, so that a later commit sorts after the tag it follows.
DEB_VERSION=${VERSION#v}
DEB_VERSION=${DEB_VERSION//-/+}
case $DEB_VERSION in [0-9]*) ;; *) echo "release: version $VERSION does not start with a digit after its v: tag the commit (git tag -a v0.1.0)" >&2; exit 1 ;; esac

LDFLAGS="-s -w -buildid= -X github.com/anvilproj/anvil/internal/version.Version=$VERSION \
 -X github.com/anvilproj/anvil/internal/version.Commit=$COMMIT \
 -X github.com/anvilproj/anvil/internal/version.Date=$DATE"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$OUT"
mkdir -p "$OUT"

# The build-time tools, for this machine.
go build -o "$work/sbom" ./internal/tools/sbom
go build -o "$work/ociimage" ./internal/tools/ociimage

# stamp DIR: every file and directory under DIR gets the commit's time and
# a mode that does not depend on the umask it was made with.
stamp() {
	find "$1" -type d -exec chmod 0755 {} +
	find "$1" -type f -exec chmod go-w,a+r {} +
	find "$1" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
}

sbom() { # sbom ARTEFACT [BINARY...]
	local a=$1 bins=()
	shift
	for b in "$@"; do bins+=(-binary "$b"); done
	"$work/sbom" -artefact "$a" -version "$VERSION" -created "$SOURCE_DATE_EPOCH" "${bins[@]}" -o "$a.cdx.json"
}

for arch in $ARCHES; do
	anvil=$OUT/anvil-linux-$arch
	agent=$OUT/anvil-agent-linux-$arch
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "$LDFLAGS" -o "$anvil" ./cmd/anvil
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "$LDFLAGS" -o "$agent" ./cmd/anvil-agent
	chmod 0755 "$anvil" "$agent"

	# The .deb: /usr/bin/anvil, the agent out of PATH where `anvil bootenv
	# build` finds it (internal/bootenv: ../lib/anvil from anvil), the
	# unit, the default config (a conffile), the install guide.
	root=$work/deb-$arch
	mkdir -p "$root/DEBIAN" "$root/usr/bin" "$root/usr/lib/anvil" "$root/lib/systemd/system" \
		"$root/etc/anvil" "$root/usr/share/doc/anvil"
	cp "$anvil" "$root/usr/bin/anvil"
	cp "$agent" "$root/usr/lib/anvil/anvil-agent"
	cp packaging/systemd/anvil.service "$root/lib/systemd/system/anvil.service"
	cp packaging/anvil.yaml "$root/etc/anvil/anvil.yaml"
	cp docs/install.md "$root/usr/share/doc/anvil/install.md"
	cp packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm "$root/DEBIAN/"
	echo /etc/anvil/anvil.yaml >"$root/DEBIAN/conffiles"
	(cd "$root" && find usr lib etc -type f | LC_ALL=C sort | xargs md5sum) >"$root/DEBIAN/md5sums"
	size=$(find "$root" -path "$root/DEBIAN" -prune -o -type f -printf '%s\n' | awk '{k += int(($1 + 1023) / 1024)} END {print k}')
	cat >"$root/DEBIAN/control" <<CONTROL
Package: anvil
Version: $DEB_VERSION
Architecture: $arch
Maintainer: Anvil developers <anvil@anvilproj.invalid>
Installed-Size: $size
Depends: adduser
Recommends: systemd
Section: admin
Priority: optional
Homepage: https://github.com/anvilproj/anvil
Description: bare-metal provisioning engine
 Anvil discovers machines over DHCP and PXE, boots them into its own
 boot environment and runs workflows that install an operating system.
 This package runs it as the systemd service anvil.service, configured
 by /etc/anvil/anvil.yaml, with its data in /var/lib/anvil.
CONTROL
	stamp "$root"
	chmod 0755 "$root/usr/bin/anvil" "$root/usr/lib/anvil/anvil-agent" "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"
	deb=$OUT/anvil_${DEB_VERSION}_$arch.deb
	# xz at level 1: 9 s a package here against 57 s at dpkg's default 6,
	# for 20 MB instead of 18 (TestRelease builds four of them).
	dpkg-deb --root-owner-group -Zxz -z1 --build "$root" "$deb" >/dev/null

	image=$OUT/anvil-image-linux-$arch.tar
	"$work/ociimage" -binary "$anvil" -ca-bundle "$CA_BUNDLE" -version "$VERSION" -revision "$COMMIT" \
		-created "$SOURCE_DATE_EPOCH" -tag "anvil:$VERSION" -tarball "$image" >/dev/null

	sbom "$anvil"
	sbom "$agent"
	sbom "$deb" "$anvil" "$agent"
	sbom "$image" "$anvil"
done

(cd "$OUT" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
echo "release $VERSION ($COMMIT, $DATE) in $OUT:"
(cd "$OUT" && ls -l --time-style=+ | tail -n +2)
