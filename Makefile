# Anvil's build. `make demo` and `make test` are the two commands a newcomer
# runs; both install what they need first.

SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(shell go env GOPATH 2>/dev/null || echo /root/go)/bin:$(PATH)

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X github.com/anvilproj/anvil/internal/version.Version=$(VERSION) \
           -X github.com/anvilproj/anvil/internal/version.Commit=$(COMMIT)
BIN     := bin/anvil
# The boot environment's /init (cmd/anvil-agent: the agent without the
# server), next to anvil, where `anvil bootenv build` looks for it.
AGENT_BIN := $(dir $(BIN))anvil-agent

# The container image (`make image`, docs/kubernetes.md): its reference, the
# commit in its revision label, and its one time, the last commit's, so that
# the same commit gives the same digest (reproducible builds' convention).
IMAGE             ?= anvil:$(VERSION)
REVISION          ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
CA_BUNDLE         ?= /etc/ssl/certs/ca-certificates.crt

# Fuzz targets run briefly on every `make test`. For a longer, nightly-style
# session: `make fuzz FUZZTIME=10m` (each target 10 minutes, every target run
# even after a finding), or one target: `make fuzz FUZZ_TARGETS=PKG:FUNC`.
FUZZTIME ?= 8s
FUZZ_TARGETS := \
	./internal/actions:FuzzDetect \
	./internal/actions:FuzzParseChecksum \
	./internal/actions:FuzzParseMode \
	./internal/actions:FuzzGrubDefault \
	./internal/actions:FuzzParseNVMeHealth \
	./internal/actions:FuzzParseATAStatus \
	./internal/actions:FuzzParseDMIMemoryDevice \
	./internal/actions:FuzzParseSMBIOSMemory \
	./internal/actions:FuzzParseSize \
	./internal/agentcmdline:FuzzParse \
	./internal/agentcmdline:FuzzBuild \
	./internal/macaddr:FuzzParse \
	./internal/systemd:FuzzEnv \
	./internal/untar:FuzzEntryPath \
	./internal/untar:FuzzExtract \
	./internal/oci:FuzzParseSettings \
	./internal/oci:FuzzResolve \
	./internal/oci:FuzzParseSize \
	./internal/container:FuzzParseVolume \
	./internal/model:FuzzParseManifests \
	./internal/model:FuzzManifestForms \
	./internal/migrate:FuzzExportRoundTrip \
	./internal/wire:FuzzDecode \
	./internal/dhcp:FuzzReply \
	./internal/dhcp:FuzzWire \
	./internal/httpboot:FuzzScriptAlias \
	./internal/ipxe:FuzzBootEnv \
	./internal/bootenv:FuzzReadAr \
	./internal/kmod:FuzzMatch \
	./internal/kmod:FuzzParseDep \
	./internal/kmod:FuzzParseAlias \
	./internal/kmod:FuzzParseSoftdep \
	./internal/kmod:FuzzParseModinfo \
	./internal/labels:FuzzParse \
	./internal/rulepattern:FuzzParse \
	./internal/syslog:FuzzParse \
	./internal/tftp:FuzzParseRequest \
	./internal/clientip:FuzzResolve \
	./internal/auth:FuzzVerify \
	./internal/auth:FuzzVerifySigned \
	./internal/auth:FuzzParseRevocations \
	./internal/inventory:FuzzConvert \
	./internal/hwinfo:FuzzParsers \
	./internal/render:FuzzRender \
	./test/powercut:FuzzNBDServer \
	./internal/doctest:FuzzParse \
	./deploy/kubernetes:FuzzParse \
	./internal/tmplbudget:FuzzExecute \
	./internal/secrets:FuzzOpen \
	./test/redfishsim:FuzzParseReply \
	./internal/bmc/wsman:FuzzParseResponse \
	./internal/bmc/wsman:FuzzParseChallenges \
	./internal/ui:FuzzSafeNext \
	./internal/config:FuzzParse

.PHONY: all build binary image release test unit fuzz lint labcheck demo bench generate deps tools kernel kube oidc clean ipxe-refresh

all: build

deps:
	@scripts/install-deps.sh

tools:
	@scripts/install-deps.sh tools

# kernel: Debian's kernel, its modules and its package in .cache/kernel, for
# the boot environment's tests (internal/kmod, internal/bootenv) and e2e;
# Debian's arm64 kernel in .cache/kernel-arm64 for the ARM64 install (e2e).
kernel:
	@scripts/fetch-kernel.sh .cache/kernel
	@scripts/fetch-kernel.sh .cache/kernel-arm64 arm64

# kube: kube-apiserver in .cache/kube/bin, built from the Go module proxy by
# the separate module tools/kube (the main module does not depend on
# Kubernetes), and Debian's etcd, for the Kubernetes tests (internal/kubetest,
# deploy/crds). Rebuilt only when tools/kube/go.mod or go.sum change; a cold
# build takes minutes (docs/kubernetes.md).
kube:
	@scripts/fetch-kube.sh .cache/kube

# oidc: the OpenID Provider of the UI's OIDC login test (test/browser),
# zitadel/oidc's example OP, in .cache/oidc/bin, built from the Go module
# proxy by the separate module tools/oidc. Rebuilt only when tools/oidc
# changes; a cold build takes about 45 s on the 2-core lab machine, a
# rebuild with a warm Go build cache about 13 s (docs/ui.md).
oidc:
	@scripts/fetch-oidc.sh .cache/oidc

build: deps
	@$(MAKE) --no-print-directory binary

# binary: the static anvil binary and the boot environment's anvil-agent
# next to it, without installing anything first (the Dockerfile's build
# stage runs this).
binary:
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/anvil
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o $(AGENT_BIN) ./cmd/anvil-agent

# image: the container image without a container engine, from the static
# binary (internal/tools/ociimage): an OCI layout in bin/image (crane push
# bin/image, skopeo copy oci:bin/image) and a docker save tarball
# bin/anvil-image.tar (docker load, kind load image-archive). Two runs on
# the same commit print the same digest. The Dockerfile builds the same
# with docker or podman.
image: binary
	go run ./internal/tools/ociimage -binary $(BIN) -ca-bundle $(CA_BUNDLE) \
		-version $(VERSION) -revision $(REVISION) -created $(SOURCE_DATE_EPOCH) \
		-tag $(IMAGE) -oci-layout bin/image -tarball bin/anvil-image.tar

# release: every release artefact of this commit in dist/ (scripts/release.sh,
# docs/install.md): static anvil and anvil-agent for linux/amd64 and arm64,
# a .deb and a container image tarball per architecture, a CycloneDX SBOM
# for each, SHA256SUMS. The same commit gives the same bytes
# (test/release checks it); the version is `git describe --tags`.
release:
	VERSION=$(VERSION) SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) CA_BUNDLE=$(CA_BUNDLE) OUT=dist scripts/release.sh

# labcheck: can this machine run every test (root, namespaces, taps, the
# tools, the kernel)? Under CI=true a missing piece fails here, before the
# suite; elsewhere it lists what will be skipped.
labcheck:
	@scripts/check-lab.sh

# test: everything CI checks. Lint first (cheap), then every test with the
# race detector, then a short run of each fuzz target.
test: deps tools kernel kube oidc labcheck lint unit fuzz

# unit: every test with the race detector, through testsum: go test's usual
# output (V=1: every line, as go test -v), then a summary listing each
# skipped test with its reason. Under CI=true a skip fails the run unless
# .ci/allowed-skips lists it, with why.
unit:
	@mkdir -p bin && go build -o bin/testsum ./internal/tools/testsum
	set -o pipefail; go test -race -count=1 -timeout 25m -json ./... | bin/testsum -allow .ci/allowed-skips $(if $(V),-v)

fuzz:
	@FUZZTIME=$(FUZZTIME) scripts/fuzz.sh $(FUZZ_TARGETS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	staticcheck ./...

# demo: build, serve in a private network namespace and provision a QEMU
# machine end to end (DHCP, iPXE, the boot environment's agent, the
# workflow, the installed OS); without root, the control plane on loopback
# with a simulated agent (scripts/demo.sh).
demo: build
	@scripts/demo.sh

# bench: every benchmark section of scripts/bench.sh, each writing its result
# file to bench/results/, then docs/benchmarks.md's table regenerated from them.
bench: build
	@scripts/bench.sh

# generate: rebuild the protobuf code from api/ with buf.
generate: tools
	buf generate
	@echo "generated code in api/anvil/v1"

# ipxe-refresh: re-copy the embedded iPXE binaries from Debian's ipxe
# package (installing it if needed) and rewrite their README and checksums.
ipxe-refresh:
	@scripts/refresh-ipxe.sh

clean:
	rm -rf bin dist
