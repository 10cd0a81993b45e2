#!/usr/bin/env bash
# client-size.sh measures what the client commands (internal/cli) cost on
# their own: it builds a throwaway main that holds only the client commands
# (no `anvil serve`, no agent), then prints the binary's size, how many
# packages it links, which server packages' code is in it, what the
# packages' init functions cost (GODEBUG=inittrace=1), peak RSS, page
# faults and CPU per start (GNU time), and the median wall time of 10 runs
# of `get hardware --help` and of `get hardware` against a port nothing
# listens on. docs/design.md ("The client does not link the server")
# records its figures before and after the wire package moved out of
# internal/api.
#
#   scripts/client-size.sh            # 10 runs each
#   RUNS=30 scripts/client-size.sh
#   KEEP=/tmp/client-before scripts/client-size.sh   # also keep the binary
#   BEFORE=/tmp/client-before scripts/client-size.sh # time it too, interleaved
#
# To compare with an older commit, run a copy of this script there with
# KEEP, then this one with BEFORE.
#
# The main is written into a directory inside the module (internal packages
# are importable only from there) whose name starts with a dot, so `go
# ./...` never sees it, and removed on exit. Its name is fixed: it is in
# the binary, and a random one would change the size from run to run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
RUNS=${RUNS:-10}

dir=./.client-size
rm -rf "$dir" && mkdir "$dir"
trap 'rm -rf "$dir"' EXIT
cat >"$dir/main.go" <<'EOF'
// The client commands alone, with the root flags cmd/anvil gives them.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/anvilproj/anvil/internal/cli"
)

func main() {
	root := &cobra.Command{Use: "anvil", SilenceUsage: true, SilenceErrors: true}
	pf := root.PersistentFlags()
	pf.String("server", cli.DefaultServer, "")
	pf.String(cli.FlagCACert, "", "")
	pf.Bool(cli.FlagInsecureSkipVerify, false, "")
	cli.AddTokenFlags(root)
	root.AddCommand(cli.Commands()...)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "anvil:", err)
		os.Exit(1)
	}
}
EOF
bin="$dir/anvil-client"
go build -trimpath -o "$bin" "./$dir"
if [[ -n ${KEEP:-} ]]; then cp "$bin" "$KEEP"; fi

size=$(stat -c %s "$bin")
pkgs=$(go list -deps "./$dir" | wc -l)
mods=$(go list -deps "./$dir" | grep -c '^github.com/anvilproj/anvil/' || true)
# Server packages whose code made it into the binary (after the linker
# dropped what is unreachable), by their symbols.
server=$(go tool nm "$bin" | grep -oE 'anvilproj/anvil/internal/(api|store|store/[a-z]+|secrets|audit|kmod|workflow|agent|server)\.' | sort -u | sed 's|anvilproj/anvil/||; s|\.$||' | tr '\n' ' ' || true)

# wall prints the wall time, in microseconds, of one run of the command;
# its output and exit status are ignored (the failed connection is the
# point of the second measurement).
wall() {
	local t0 t1
	t0=$(date +%s%N)
	"$@" >/dev/null 2>&1 || true
	t1=$(date +%s%N)
	echo $(((t1 - t0) / 1000))
}

# median reads microseconds, one a line, and prints their median in ms.
median() {
	sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.1f ms", m/1000}'
}

# timing prints the median wall time of RUNS runs of the client with
# args; with BEFORE, also of that binary, the two runs interleaved so
# that both see the same machine load.
timing() {
	local i mine=() theirs=()
	for ((i = 0; i < RUNS; i++)); do
		if [[ -n ${BEFORE:-} ]]; then theirs+=("$(wall "$BEFORE" "$@")"); fi
		mine+=("$(wall "$bin" "$@")")
	done
	printf '%s' "$(printf '%s\n' "${mine[@]}" | median)"
	if [[ -n ${BEFORE:-} ]]; then printf ' (%s: %s)' "$BEFORE" "$(printf '%s\n' "${theirs[@]}" | median)"; fi
	echo
}

echo "client-only binary: $size bytes, $pkgs packages linked ($mods of them anvil's)"
echo "server packages in it: ${server:-none}"
# What the packages' init functions cost at every start, from the
# runtime's own trace: unlike wall time, the allocations do not depend on
# how busy the machine is.
GODEBUG=inittrace=1 "$bin" get hardware --help 2>&1 >/dev/null |
	awk '/^init / {n++; ms += $5; b += $8; a += $10} END {printf "package inits at start: %d, %.1f ms, %d bytes in %d allocations\n", n, ms, b, a}'
# Peak RSS, page faults and CPU per start, with GNU time when it is
# there; like the allocations, they move little with the machine's load.
if [[ -x /usr/bin/time ]]; then
	for b in ${BEFORE:-} "$bin"; do
		/usr/bin/time -f "$b: get hardware --help: peak RSS %M KB, %R minor page faults" "$b" get hardware --help 2>&1 >/dev/null | tail -1
		/usr/bin/time -f "%U %S" bash -c "for i in \$(seq $((RUNS * 10))); do $b get hardware --help >/dev/null; done" 2>&1 |
			awk -v b="$b" -v n=$((RUNS * 10)) '{printf "%s: CPU (user + sys) per get hardware --help, %d runs: %.1f ms\n", b, n, 1000 * ($1 + $2) / n}'
	done
fi
echo "get hardware --help, median of $RUNS: $(timing get hardware --help)"
echo "get hardware against a closed port, median of $RUNS: $(timing --server http://127.0.0.1:1 get hardware)"
