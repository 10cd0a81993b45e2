// Package version holds the version and commit anvil was built from, set at
// link time:
//
//	go build -ldflags "-X github.com/anvilproj/anvil/internal/version.Version=v0.1.0 \
//	  -X github.com/anvilproj/anvil/internal/version.Commit=$(git rev-parse HEAD) \
//	  -X github.com/anvilproj/anvil/internal/version.Date=2026-11-28T12:00:00Z" ./cmd/anvil
//
// Date is the commit's time, not the build's (`make release` takes it from
// git), so that two builds of one commit are the same bytes.
//
// It owns nothing else and imports nothing of Anvil's.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by -ldflags -X. Left empty, Version is "dev" and Commit comes from the
// Go toolchain's VCS stamp when there is one.
var (
	Version = ""
	Commit  = ""
	Date    = ""
)

// Info is what `anvil version` prints.
type Info struct {
	Version string
	Commit  string
	// Date is when the commit was made (RFC 3339), "" when not stamped.
	Date string
	Go   string
}

// Get returns the build's version information, filling the blanks from the
// build info the Go toolchain embeds.
func Get() Info {
	i := Info{Version: Version, Commit: Commit, Date: Date, Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			i.Version = bi.Main.Version
		}
		if i.Commit == "" {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					i.Commit = s.Value
				}
			}
		}
		if i.Date == "" {
			for _, s := range bi.Settings {
				if s.Key == "vcs.time" {
					i.Date = s.Value
				}
			}
		}
	}
	if i.Version == "" {
		i.Version = "dev"
	}
	if i.Commit == "" {
		i.Commit = "unknown"
	}
	return i
}

// String renders the information on one line.
func (i Info) String() string {
	if i.Date != "" {
		return fmt.Sprintf("anvil %s (commit %s of %s, %s)", i.Version, i.Commit, i.Date, i.Go)
	}
	return fmt.Sprintf("anvil %s (commit %s, %s)", i.Version, i.Commit, i.Go)
}
