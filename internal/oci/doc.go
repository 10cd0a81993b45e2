// Package oci gets container images for the agent's container path: it
// decides how an image is reached (Settings.Resolve: registry mirrors,
// plain HTTP, CA certificates and credentials, from the server's flags and
// a Hardware's annotation), and pulls images into a cache of unpacked root
// filesystems (Puller).
//
// Image handling is go-containerregistry's: references, the registry
// protocol and its token auth, manifest lists (the machine's platform is
// picked), digest verification, layer decompression and the flattening of
// layers with their whiteouts. This package adds the cache: kept in a
// directory (tmpfs in the boot environment, so in memory), keyed by the
// image's manifest digest (content-addressed: a tag that moves pulls the
// new image, an image pinned by digest is found without asking the
// registry), bounded in size, evicting the least recently used image no
// one holds. A pull downloads and verifies every layer before it unpacks
// any, into a staging directory, and only a complete image enters the
// cache: a failed pull leaves nothing.
//
// Checker answers, without pulling, whether an image can be resolved
// under Settings (a manifest HEAD with a short timeout, answers cached
// briefly): the server's apply warns of images no agent could pull.
//
// It owns images and nothing else: it runs nothing (internal/container
// does), talks to no Anvil server and writes no disk but its cache. Its
// Sources hold credentials; their String and LogValue leave them out.
// User documentation: docs/actions.md ("Container images").
package oci
