// Package repocheck holds the checks that keep the repository's docs true
// to its code: every package says what it owns in a doc comment, every
// component README has the fixed sections (what it does, configuration,
// metrics, examples), and README.md's layout names every package. It has
// no code of its own; its tests read the source tree.
package repocheck
