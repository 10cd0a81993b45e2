#!/usr/bin/env bash
# fetch-kube.sh builds kube-apiserver for the Kubernetes tests
# (internal/kubetest) and makes sure etcd is installed:
#
#   scripts/fetch-kube.sh [DIR]     # default .cache/kube
#
# DIR/bin/kube-apiserver is built from the Go module proxy by the separate
# module tools/kube (its go.mod pins the release), so the main module never
# depends on Kubernetes. DIR/KEY is a hash of tools/kube/go.mod and go.sum:
# the binary is rebuilt only when they change. A cold build takes minutes and
# about 2 GB of memory (docs/kubernetes.md has the figures); a rebuild with
# a warm Go build cache takes seconds.
#
# etcd is Debian's etcd-server (scripts/install-deps.sh lists it); the tests
# find it on PATH, or at ETCD.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.cache/kube}
say() { echo "fetch-kube: $*" >&2; }

if ! command -v etcd >/dev/null && [ -z "${ETCD:-}" ]; then
  say "etcd missing: installing etcd-server with scripts/install-deps.sh"
  scripts/install-deps.sh
fi

key=$(cat tools/kube/go.mod tools/kube/go.sum | sha256sum | cut -d' ' -f1)
bin="$dir/bin/kube-apiserver"
if [ -x "$bin" ] && [ "$(cat "$dir/KEY" 2>/dev/null)" = "$key" ]; then
  exit 0
fi

# The release the binary reports (GET /version) is the one go.mod requires.
version=$(cd tools/kube && go list -m -f '{{.Version}}' k8s.io/kubernetes)
mkdir -p "$dir/bin"
say "building kube-apiserver $version into $bin (cold: several minutes)"
tmp="$bin.tmp.$$"
trap 'rm -f "$tmp"' EXIT
(cd tools/kube && CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$version" \
  -o "../../$tmp" k8s.io/kubernetes/cmd/kube-apiserver)
mv "$tmp" "$bin"
echo "$key" >"$dir/KEY"
say "$bin ($version)"
