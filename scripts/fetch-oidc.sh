#!/usr/bin/env bash
# fetch-oidc.sh builds the OpenID Provider of the OIDC login tests
# (test/browser/oidc_test.go):
#
#   scripts/fetch-oidc.sh [DIR]     # default .cache/oidc
#
# DIR/bin/anvil-test-idp is built from the Go module proxy by the separate
# module tools/oidc (zitadel/oidc's example OP; its go.mod pins the
# release), so the main module never depends on it. DIR/KEY is a hash of
# tools/oidc's go.mod, go.sum and main.go: the binary is rebuilt only when
# they change. The tests find it there, or at $ANVIL_TEST_IDP.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.cache/oidc}
mkdir -p "$dir/bin"
dir=$(cd "$dir" && pwd)
say() { echo "fetch-oidc: $*" >&2; }

key=$(cat tools/oidc/go.mod tools/oidc/go.sum tools/oidc/main.go | sha256sum | cut -d' ' -f1)
bin="$dir/bin/anvil-test-idp"
if [ -x "$bin" ] && [ "$(cat "$dir/KEY" 2>/dev/null)" = "$key" ]; then
  exit 0
fi

version=$(cd tools/oidc && go list -m -f '{{.Version}}' github.com/zitadel/oidc/v3)
say "building anvil-test-idp (zitadel/oidc $version) into $bin"
tmp="$bin.tmp.$$"
trap 'rm -f "$tmp"' EXIT
(cd tools/oidc && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp" .)
mv "$tmp" "$bin"
echo "$key" >"$dir/KEY"
say "$bin (zitadel/oidc $version)"
