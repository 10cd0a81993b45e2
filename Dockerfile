# Anvil's container image, built with a container engine:
#
#   docker build -t anvil:dev \
#     --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg REVISION=$(git rev-parse HEAD) .
#
# `make image` builds the same contract without one (internal/tools/ociimage):
# /anvil, entrypoint `anvil serve --store kubernetes`, user 65532, the same
# OCI labels, /var/lib/anvil writable by that user. This one's base is
# distroless/static (CA certificates, time zones, /etc/passwd) instead of an
# empty one with the CA bundle only. docs/kubernetes.md says how to push it.

# The static binary, by the Makefile's own rule (flags and version stamping
# are decided there only).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=unknown
RUN make binary VERSION="$VERSION" COMMIT="$(echo "$REVISION" | cut -c1-7)" BIN=/out/anvil \
 && mkdir -p /out/data

FROM gcr.io/distroless/static:nonroot
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION" \
      org.opencontainers.image.source="https://github.com/anvilproj/anvil"
COPY --from=build /out/anvil /anvil
# serve's default --data-dir; the Deployment mounts a volume over it.
COPY --from=build --chown=65532:65532 /out/data /var/lib/anvil
USER 65532:65532
ENTRYPOINT ["/anvil", "serve", "--store", "kubernetes"]
