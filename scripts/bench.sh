#!/usr/bin/env bash
# bench.sh runs Anvil's benchmarks and prints their tables. `make bench` runs
# it after `make build`. Each benchmark is a section: a shell function named
# section_<name>, listed in SECTIONS in the order they run. Later issues add
# theirs (DHCP and TFTP peers) the same way.
#
#   scripts/bench.sh                     # every section
#   scripts/bench.sh fleet               # only the named sections
#   FLEET_SIZES="1000" scripts/bench.sh  # the fleet bench at N=1000 only
#
# Environment:
#   ANVIL        the anvil binary under test (default bin/anvil)
#   FLEET_SIZES  machine counts for the fleet bench (default "1000 10000")
#   FLEET_ARGS   extra flags for bench/fleet (e.g. "-action-time 1s")
#   BENCH_OUT    directory for each run's output and JSON line (default bench/out)
#   DHCP_ARGS    extra flags for bench/dhcp (e.g. "-duration 5s -servers anvil,kea")
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$(go env GOPATH 2>/dev/null || echo /root/go)/bin:$PATH"

ANVIL=${ANVIL:-bin/anvil}
FLEET_SIZES=${FLEET_SIZES:-"1000 10000"}
FLEET_ARGS=${FLEET_ARGS:-}
BENCH_OUT=${BENCH_OUT:-bench/out}

SECTIONS=(fleet dhcp)

say() { echo "bench: $*" >&2; }

# fleet: N simulated agents (internal/agentsim, real gRPC) through a
# 5-action workflow each, against `anvil serve` run as a child process.
section_fleet() {
  go build -o "$BENCH_OUT/fleet" ./bench/fleet || return 1
  local rc=0 n
  for n in $FLEET_SIZES; do
    say "fleet: N=$n"
    # shellcheck disable=SC2086
    "$BENCH_OUT/fleet" -n "$n" -anvil "$ANVIL" -json $FLEET_ARGS >"$BENCH_OUT/fleet-$n.txt" \
      2> >(tee "$BENCH_OUT/fleet-$n.log" >&2) || rc=1
    grep -v '^{' "$BENCH_OUT/fleet-$n.txt"
    grep '^{' "$BENCH_OUT/fleet-$n.txt" >"$BENCH_OUT/fleet-$n.json" || true
  done
  return $rc
}

# dhcp: perfdhcp against anvil serve, dnsmasq and Kea in two network
# namespaces (bench/dhcp): the highest rate each answers with 0 drops, the
# server CPU per exchange, and the ratios. Needs root and the peers
# (scripts/install-deps.sh installs them).
section_dhcp() {
  go build -o "$BENCH_OUT/dhcp" ./bench/dhcp || return 1
  local rc=0
  # shellcheck disable=SC2086
  "$BENCH_OUT/dhcp" -anvil "$ANVIL" -json ${DHCP_ARGS:-} >"$BENCH_OUT/dhcp.txt" \
    2> >(tee "$BENCH_OUT/dhcp.log" >&2) || rc=1
  grep -v '^{' "$BENCH_OUT/dhcp.txt"
  grep '^{' "$BENCH_OUT/dhcp.txt" >"$BENCH_OUT/dhcp.json" || true
  return $rc
}

if [ ! -x "$ANVIL" ]; then
  say "$ANVIL not found: run \`make build\` first (or set ANVIL)"
  exit 1
fi
mkdir -p "$BENCH_OUT"
run=("${SECTIONS[@]}")
[ $# -gt 0 ] && run=("$@")
failed=()
for s in "${run[@]}"; do
  if ! declare -F "section_$s" >/dev/null; then
    say "no section \"$s\" (have: ${SECTIONS[*]})"
    exit 2
  fi
  echo "=== $s ==="
  "section_$s" || failed+=("$s")
  echo
done
if [ ${#failed[@]} -gt 0 ]; then
  say "FAILED: ${failed[*]}"
  exit 1
fi
say "all sections passed (outputs in $BENCH_OUT/)"
