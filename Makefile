# Anvil's build. `make demo` and `make test` are the two commands a newcomer
# runs; both install what they need first.

SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(shell go env GOPATH 2>/dev/null || echo /root/go)/bin:$(PATH)

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X github.com/anvilproj/anvil/internal/version.Version=$(VERSION) \
           -X github.com/anvilproj/anvil/internal/version.Commit=$(COMMIT)
BIN     := bin/anvil

# Fuzz targets run briefly on every `make test`; FUZZTIME=5m for a real session.
FUZZTIME ?= 8s
FUZZ_TARGETS := \
	./internal/actions:FuzzDetect \
	./internal/actions:FuzzEntryPath \
	./internal/actions:FuzzExtract \
	./internal/actions:FuzzParseChecksum \
	./internal/actions:FuzzParseMode \
	./internal/model:FuzzParseManifests \
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
	./internal/syslog:FuzzParse \
	./internal/tftp:FuzzParseRequest \
	./internal/clientip:FuzzResolve \
	./internal/auth:FuzzVerify \
	./internal/inventory:FuzzConvert \
	./internal/render:FuzzRender \
	./test/powercut:FuzzNBDServer

.PHONY: all build test unit fuzz lint demo bench generate deps tools kernel clean ipxe-refresh

all: build

deps:
	@scripts/install-deps.sh

tools:
	@scripts/install-deps.sh tools

# kernel: Debian's kernel, its modules and its package in .cache/kernel, for
# the boot environment's tests (internal/kmod, internal/bootenv) and e2e.
kernel:
	@scripts/fetch-kernel.sh .cache/kernel

build: deps
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/anvil

# test: everything CI checks. Lint first (cheap), then every test with the
# race detector, then a short run of each fuzz target.
test: deps tools kernel lint unit fuzz

unit:
	go test -race -count=1 -timeout 25m ./...

fuzz:
	@FUZZTIME=$(FUZZTIME) scripts/fuzz.sh $(FUZZ_TARGETS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	staticcheck ./...

# demo: build, serve in a private network namespace, apply the examples and
# watch a workflow run to SUCCESS (driven by a simulated agent until the real
# boot path exists).
demo: build
	@scripts/demo.sh

# bench: the fleet benchmark at 1,000 and 10,000 simulated machines.
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
	rm -rf bin
