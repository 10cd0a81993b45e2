// Package release tests `make release` (scripts/release.sh) from the
// outside: two builds of one commit, in different directories under
// different umasks and at different times, give the same bytes for every
// artefact; the .deb holds what docs/install.md says where it says; the
// checksums and SBOMs describe the artefacts; the packaged default config
// is one `anvil serve` accepts. It owns no code, only these tests.
package release
