#!/usr/bin/env bash
# bench.sh runs Anvil's benchmarks and prints their tables. `make bench` runs
# it after `make build`. Each benchmark is a section: a shell function named
# section_<name>, listed in SECTIONS in the order they run. Each writes its
# result file (internal/benchresult) into $BENCH_RESULTS; at the end every
# result there must validate (its server under test `anvil serve`), and
# docs/benchmarks.md's summary table is regenerated from bench/results/
# (bench/table): a result that does not validate fails the run.
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
#   BENCH_RESULTS directory for each run's result file (internal/benchresult;
#                default bench/results, committed with the figures it holds)
#   DHCP_ARGS    extra flags for bench/dhcp (e.g. "-duration 5s -servers anvil,kea")
#   DHCP_RATES   offered rates of the dhcprates section (default "2000,4000,8000")
#   DHCPRATES_ARGS extra flags for bench/dhcp in the dhcprates section
#   TFTP_ARGS    extra flags for bench/tftp (e.g. "-runs 1 -only anvil,dnsmasq")
#   IMAGE2DISK_ARGS extra flags for bench/image2disk (e.g. "-runs 5 -checksum")
#   BOOTENV_ARGS extra flags for bench/bootenv (e.g. "-runs 3 -compress lz4-9,zstd-19")
#   APIAUTH_ARGS extra flags for bench/apiauth (e.g. "-rounds 5 -clients 16")
#   OCIRUN_ARGS  extra flags for bench/ocirun (e.g. "-runs 20 -no-runc")
#   BMCPOLL_ARGS extra flags for bench/bmcpoll (e.g. "-n 5000 -concurrency 64")
#   HTTP_ARGS    extra flags for bench/http (e.g. "-conns 1,8 -runs 5 -duration 10s")
#   STORM_N      machines of the boot storm (default 1000)
#   STORM_ARGS   extra flags for bench/storm (e.g. "-bootenv sized -floor=false")
#   DISCOVERY_N  unknown machines of the discovery bench (default 1000)
#   DISCOVERY_ARGS extra flags for bench/discovery (e.g. "-storm-max 0 -get-action=false")
#   DISCOVERY_PEER the tinkerbell binary the discovery bench runs as its peer
#                (default $BENCH_OUT/tinkerbell when present; needs make kube)
#   INSTALL_RUNS how many end-to-end installs the install section times (default 3)
#   UI_N         machines of the UI bench (default 10000)
#   UI_ARGS      extra flags for bench/ui (e.g. "-runs 10")
#   UI_PEER      the tinkerbell binary whose UI the UI bench runs as its peer
#                (default $BENCH_OUT/tinkerbell when present; needs make kube)
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$(go env GOPATH 2>/dev/null || echo /root/go)/bin:$PATH"

ANVIL=${ANVIL:-bin/anvil}
FLEET_SIZES=${FLEET_SIZES:-"1000 10000"}
FLEET_ARGS=${FLEET_ARGS:-}
BENCH_OUT=${BENCH_OUT:-bench/out}
BENCH_RESULTS=${BENCH_RESULTS:-bench/results}

SECTIONS=(fleet dhcp dhcprates tftp http image2disk bootenv install apiauth ocirun bmcpoll storm discovery ui)

say() { echo "bench: $*" >&2; }

# fleet: N simulated agents (internal/agentsim, real gRPC) through a
# 5-action workflow each, against `anvil serve` run as a child process.
section_fleet() {
  go build -o "$BENCH_OUT/fleet" ./bench/fleet || return 1
  local rc=0 n
  for n in $FLEET_SIZES; do
    say "fleet: N=$n"
    # shellcheck disable=SC2086
    "$BENCH_OUT/fleet" -results "$BENCH_RESULTS" -n "$n" -anvil "$ANVIL" -json $FLEET_ARGS >"$BENCH_OUT/fleet-$n.txt" \
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
  "$BENCH_OUT/dhcp" -results "$BENCH_RESULTS" -anvil "$ANVIL" -json ${DHCP_ARGS:-} >"$BENCH_OUT/dhcp.txt" \
    2> >(tee "$BENCH_OUT/dhcp.log" >&2) || rc=1
  grep -v '^{' "$BENCH_OUT/dhcp.txt"
  grep '^{' "$BENCH_OUT/dhcp.txt" >"$BENCH_OUT/dhcp.json" || true
  return $rc
}

# dhcprates: perfdhcp at the same fixed offered rates (DHCP_RATES) against
# anvil serve, Kea and dnsmasq (bench/dhcp -rates): exchanges, drops and
# server CPU per exchange at each rate, and anvil's CPU per exchange over
# Kea's. Each server first gets a 10 s warm-up at the first rate.
section_dhcprates() {
  go build -o "$BENCH_OUT/dhcp" ./bench/dhcp || return 1
  local rc=0
  # shellcheck disable=SC2086
  "$BENCH_OUT/dhcp" -results "$BENCH_RESULTS" -anvil "$ANVIL" -json -rates "${DHCP_RATES:-2000,4000,8000}" -warmup 10s \
    -servers anvil,kea,dnsmasq ${DHCPRATES_ARGS:-} >"$BENCH_OUT/dhcprates.txt" \
    2> >(tee "$BENCH_OUT/dhcprates.log" >&2) || rc=1
  grep -v '^{' "$BENCH_OUT/dhcprates.txt"
  grep '^{' "$BENCH_OUT/dhcprates.txt" >"$BENCH_OUT/dhcprates.json" || true
  return $rc
}

# tftp: anvil serve's TFTP against dnsmasq, tftpd-hpa and atftpd in a
# private network namespace (bench/tftp): a 64 MiB file to one client and
# a 1 MiB file to 100 at once, with curl and atftp, with and without RFC
# 7440 windowsize; MiB/s, wall time, failed transfers, server CPU and the
# verdict against the target. atftpd is unpacked from its .deb, not
# installed: installing it removes tftpd-hpa (and takes over in.tftpd).
# Needs root.
section_tftp() {
  go build -o "$BENCH_OUT/tftpbench" ./bench/tftp || return 1
  local debs="$BENCH_OUT/debs" args=() rc=0
  unpack() { # package: unpack its .deb into $debs/root unless done
    [ -e "$debs/$1.unpacked" ] && return 0
    mkdir -p "$debs" && (cd "$debs" && apt-get download "$1" >/dev/null 2>&1) &&
      dpkg-deb -x "$(ls "$debs"/"$1"_*.deb | head -1)" "$debs/root" && touch "$debs/$1.unpacked"
  }
  if unpack atftpd; then
    args+=(-atftpd "$debs/root/usr/sbin/atftpd")
  else
    say "tftp: cannot fetch atftpd's .deb; running without atftpd"
  fi
  if readlink -f /usr/sbin/in.tftpd | grep -q atftpd; then
    unpack tftpd-hpa && args+=(-tftpd-hpa "$debs/root/usr/sbin/in.tftpd")
  fi
  # shellcheck disable=SC2086
  "$BENCH_OUT/tftpbench" -results "$BENCH_RESULTS" -anvil "$ANVIL" -json "${args[@]}" ${TFTP_ARGS:-} >"$BENCH_OUT/tftp.txt" \
    2> >(tee "$BENCH_OUT/tftp.log" >&2) || rc=1
  grep -v '^{' "$BENCH_OUT/tftp.txt"
  grep '^{' "$BENCH_OUT/tftp.txt" >"$BENCH_OUT/tftp.json" || true
  return $rc
}

# http: a 256 MiB image over HTTP from anvil serve's /images/ (every
# boot-path wrapper on, at its defaults) and from nginx with sendfile on
# (bench/http): 1, 8 and 64 persistent connections from 8 loopback source
# addresses (127.0.1.1-8), GB/s and server CPU per GB, anvil/nginx ratios.
# Target: >= 1.0x nginx's throughput, <= its CPU per GB. No root.
section_http() {
  go build -o "$BENCH_OUT/httpbench" ./bench/http || return 1
  local rc=0
  # shellcheck disable=SC2086
  "$BENCH_OUT/httpbench" -results "$BENCH_RESULTS" -anvil "$ANVIL" -json ${HTTP_ARGS:-} >"$BENCH_OUT/http.txt" \
    2> >(tee "$BENCH_OUT/http.log" >&2) || rc=1
  grep -v '^{' "$BENCH_OUT/http.txt"
  grep '^{' "$BENCH_OUT/http.txt" >"$BENCH_OUT/http.json" || true
  return $rc
}

# image2disk: a 1 GiB zstd disk image over HTTP from anvil serve's /images/ into a file, by the native
# image2disk action (internal/actions) and by `curl | zstd -dc | dd
# conv=fsync`, alternating, medians of 3 (bench/image2disk). The image is
# made once and kept in $BENCH_OUT/image2disk; the written files go there
# too (a disk-backed filesystem, so fsync costs what it costs).
section_image2disk() {
  go build -o "$BENCH_OUT/image2diskbench" ./bench/image2disk || return 1
  local rc=0
  # shellcheck disable=SC2086
  "$BENCH_OUT/image2diskbench" -results "$BENCH_RESULTS" -anvil "$ANVIL" -work "$BENCH_OUT/image2disk" -json ${IMAGE2DISK_ARGS:-} >"$BENCH_OUT/image2disk.txt" \
    2> >(tee "$BENCH_OUT/image2disk.log" >&2) || rc=1
  grep -v '^{' "$BENCH_OUT/image2disk.txt"
  grep '^{' "$BENCH_OUT/image2disk.txt" >"$BENCH_OUT/image2disk.json" || true
  return $rc
}

# ocirun: what the container path costs an action (bench/ocirun): time from
# the action's start to its program running, native vs a 10 MiB image in a
# container, pulled cold and warm (by tag and by digest), with Debian's
# docker-registry as the registry and runc's start as the peer. Needs root.
section_ocirun() {
  go build -o "$BENCH_OUT/ocirunbench" ./bench/ocirun || return 1
  local rc=0
  # shellcheck disable=SC2086
  "$BENCH_OUT/ocirunbench" -results "$BENCH_RESULTS" -json ${OCIRUN_ARGS:-} >"$BENCH_OUT/ocirun.txt" \
    2> >(tee "$BENCH_OUT/ocirun.log" >&2) || rc=1
  grep -v '^{' "$BENCH_OUT/ocirun.txt"
  grep '^{' "$BENCH_OUT/ocirun.txt" >"$BENCH_OUT/ocirun.json" || true
  return $rc
}

# bmcpoll: the BMC power-state poller of anvil serve against 1,000 IPMI
# BMCs in the bench's process (go-ipmi's BMC server, one loopback address
# each) (bench/bmcpoll): the first full sweep's time with bounded
# concurrency while Jobs run, a steady round that follows power changes
# made behind Anvil's back, the server's CPU and memory, and that no BMC
# ever had two sessions at once. No root.
section_bmcpoll() {
  go build -o "$BENCH_OUT/bmcpollbench" ./bench/bmcpoll || return 1
  local rc=0
  # shellcheck disable=SC2086
  "$BENCH_OUT/bmcpollbench" -results "$BENCH_RESULTS" -anvil "$ANVIL" -json ${BMCPOLL_ARGS:-} >"$BENCH_OUT/bmcpoll.txt" \
    2> >(tee "$BENCH_OUT/bmcpoll.log" >&2) || rc=1
  grep -v '^{' "$BENCH_OUT/bmcpoll.txt"
  grep '^{' "$BENCH_OUT/bmcpoll.txt" >"$BENCH_OUT/bmcpoll.json" || true
  return $rc
}

# storm: STORM_N machines boot at once against anvil serve with DHCP and
# TFTP on (bench/storm): DHCP through the bench as relay, the iPXE binary
# over TFTP, iPXE's DHCP, script, kernel and initramfs over HTTP, the
# agent's first GetAction; one abusive client in the same run. Writes
# bench/results/storm-N.json. Needs root (the relay's port 67); uses the
# real boot environment when make demo has built it.
section_storm() {
  go build -o "$BENCH_OUT/storm" ./bench/storm || return 1
  local rc=0 n=${STORM_N:-1000}
  # shellcheck disable=SC2086
  "$BENCH_OUT/storm" -n "$n" -anvil "$ANVIL" -json ${STORM_ARGS:-} >"$BENCH_OUT/storm-$n.txt" \
    2> >(tee "$BENCH_OUT/storm-$n.log" >&2) || rc=1
  grep -v '^{' "$BENCH_OUT/storm-$n.txt"
  grep '^{' "$BENCH_OUT/storm-$n.txt" >"$BENCH_OUT/storm-$n.json" || true
  return $rc
}

# discovery: DISCOVERY_N unknown machines at once against anvil serve
# --discovery with WorkflowRuleSets that match them (bench/discovery): each
# runs the agent's Discover until it has its workflow's token, then its
# first GetAction; machines enrolled per second, server CPU, RSS, heap and
# store per machine. Then the storm bound: the same machines against
# --discovery-max 4/5 N, exactly that many made, the rest refused, the API
# answering. With a tinkerbell binary (DISCOVERY_PEER), the same machines
# against Tinkerbell's auto-discovery on etcd and kube-apiserver. Writes
# bench/results/discovery-N.json. No root.
section_discovery() {
  go build -o "$BENCH_OUT/discoverybench" ./bench/discovery || return 1
  local rc=0 n=${DISCOVERY_N:-1000} peer=${DISCOVERY_PEER:-$BENCH_OUT/tinkerbell} args=()
  if [ -x "$peer" ]; then
    args+=(-peer "$peer")
  else
    say "discovery: no tinkerbell binary at $peer: running without the peer"
  fi
  # shellcheck disable=SC2086
  "$BENCH_OUT/discoverybench" -results "$BENCH_RESULTS" -n "$n" -anvil "$ANVIL" -json "${args[@]}" ${DISCOVERY_ARGS:-} >"$BENCH_OUT/discovery-$n.txt" \
    2> >(tee "$BENCH_OUT/discovery-$n.log" >&2) || rc=1
  grep -v '^{' "$BENCH_OUT/discovery-$n.txt"
  grep '^{' "$BENCH_OUT/discovery-$n.txt" >"$BENCH_OUT/discovery-$n.json" || true
  return $rc
}

# ui: the web UI over UI_N machines (one in five with a workflow in
# varied states) in headless Chromium (bench/ui): navigation start to
# first contentful paint and to the load event of the fleet page and the
# hardware list's first page, cold and warm. With a tinkerbell binary
# (UI_PEER), Tinkerbell's own UI's hardware list over the same machines
# on etcd and kube-apiserver. Writes bench/results/ui-N.json. No root.
section_ui() {
  go build -o "$BENCH_OUT/uibench" ./bench/ui || return 1
  local rc=0 n=${UI_N:-10000} peer=${UI_PEER:-$BENCH_OUT/tinkerbell} args=()
  if [ -x "$peer" ]; then
    args+=(-peer "$peer")
  else
    say "ui: no tinkerbell binary at $peer: running without the peer"
  fi
  # shellcheck disable=SC2086
  "$BENCH_OUT/uibench" -results "$BENCH_RESULTS" -n "$n" -anvil "$ANVIL" -screenshots "$BENCH_OUT/ui" -json "${args[@]}" ${UI_ARGS:-} \
    >"$BENCH_OUT/ui-$n.txt" 2> >(tee "$BENCH_OUT/ui-$n.log" >&2) || rc=1
  grep -v '^{' "$BENCH_OUT/ui-$n.txt"
  grep '^{' "$BENCH_OUT/ui-$n.txt" >"$BENCH_OUT/ui-$n.json" || true
  return $rc
}

# bootenv: the boot environment's initramfs compressions (bench/bootenv):
# size, build time, and QEMU TCG's time to /init booting directly and over
# iPXE and HTTP. Needs QEMU and Debian's kernel (make kernel); no root.
section_bootenv() {
  scripts/fetch-kernel.sh .cache/kernel || return 1
  go build -o "$BENCH_OUT/bootenvbench" ./bench/bootenv || return 1
  local rc=0
  # shellcheck disable=SC2086
  "$BENCH_OUT/bootenvbench" -results "$BENCH_RESULTS" -json ${BOOTENV_ARGS:-} >"$BENCH_OUT/bootenv.txt" \
    2> >(tee "$BENCH_OUT/bootenv.log" >&2) || rc=1
  grep -v '^{' "$BENCH_OUT/bootenv.txt"
  grep '^{' "$BENCH_OUT/bootenv.txt" >"$BENCH_OUT/bootenv.json" || true
  return $rc
}

# apiauth: management calls per second with authentication on (ES256
# tokens of the local issuer on every call) and off, alternating, in the
# same run (bench/apiauth). Target: on >= 0.8 x off.
section_apiauth() {
  go build -o "$BENCH_OUT/apiauthbench" ./bench/apiauth || return 1
  # shellcheck disable=SC2086
  "$BENCH_OUT/apiauthbench" -results "$BENCH_RESULTS" -anvil "$ANVIL" ${APIAUTH_ARGS:-} | tee "$BENCH_OUT/apiauth.txt"
}

# install: the end-to-end install test (test/e2e TestInstall: a blank QEMU
# machine PXE boots, the agent streams a zstd image, writes a file, reads
# its metadata, reboots into the installed OS), timed against the bare
# netboot floor measured in the same run (QEMU start to a Go /init's
# marker, netbooted the same way). Target: workflow SUCCESS within floor +
# image write + 2.5 s. Needs root (namespaces, taps).
section_install() {
  go build -o "$BENCH_OUT/installbench" ./bench/install || return 1
  "$BENCH_OUT/installbench" -results "$BENCH_RESULTS" -runs "${INSTALL_RUNS:-3}" -out "$BENCH_OUT"
}

run=("${SECTIONS[@]}")
[ $# -gt 0 ] && run=("$@")
# Sections that do not run the anvil binary (ocirun runs the action
# package directly).
if [ "${run[*]}" != "bootenv" ] && [ "${run[*]}" != "install" ] && [ "${run[*]}" != "ocirun" ] && [ ! -x "$ANVIL" ]; then
  say "$ANVIL not found: run \`make build\` first (or set ANVIL)"
  exit 1
fi
mkdir -p "$BENCH_OUT"
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
# Every result file must validate (its server under test `anvil serve`):
# bench/table refuses any that does not, and regenerates docs/benchmarks.md's
# table from bench/results.
doc=docs/benchmarks.md
[ "$BENCH_RESULTS" = bench/results ] || doc=""
if go run ./bench/table -results "$BENCH_RESULTS" -doc "$doc"; then
  [ -n "$doc" ] && say "regenerated the table of $doc from $BENCH_RESULTS/*.json"
else
  failed+=("table")
fi
if [ ${#failed[@]} -gt 0 ]; then
  say "FAILED: ${failed[*]}"
  exit 1
fi
say "all sections passed (outputs in $BENCH_OUT/)"
