#!/usr/bin/env bash
# demo.sh: start Anvil with its embedded store in a private network namespace
# and provision a QEMU machine end to end: the blank machine PXE boots from
# Anvil (DHCP -> iPXE -> its script), boots Anvil's boot environment (Debian's
# kernel, bin/anvil-agent as /init), the agent runs the workflow in
# examples/demo/ (stream a disk image, write the boot config, fetch its own
# metadata, reboot), and the machine then boots the OS on its disk.
#
# Without root (no namespace, no QEMU) the demo runs the control-plane part on
# this host's loopback, with a simulated agent and the examples/ manifests.
set -euo pipefail
cd "$(dirname "$0")/.."

ANVIL=${ANVIL:-$PWD/bin/anvil}
NS=anvil-demo-$$
DATA=$(mktemp -d /tmp/anvil-demo.XXXXXX)
LOG=$DATA/serve.log
# The examples' Hardware lives on 10.20.0.0/24 with gateway 10.20.0.1: the
# demo network is that one, so the examples apply unchanged.
ADDR=10.20.0.1
MAC=3c:ec:ef:12:34:07

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

netboot=no
if [ "$(id -u)" = 0 ] && ip netns add "$NS" 2>/dev/null; then
  ip -n "$NS" link set lo up
  in_ns() { ip netns exec "$NS" "$@"; }
  where="network namespace $NS"
  if command -v qemu-system-x86_64 >/dev/null && [ -e /dev/net/tun ]; then
    netboot=yes
    ip -n "$NS" link add br0 type bridge
    ip -n "$NS" addr add "$ADDR/24" dev br0
    ip -n "$NS" -6 addr add fd20::1/64 dev br0 nodad
    ip -n "$NS" link set br0 up
    ip -n "$NS" tuntap add dev tap0 mode tap
    ip -n "$NS" link set tap0 master br0 up
  else
    ip -n "$NS" addr add "$ADDR/24" dev lo
    echo "demo: QEMU or /dev/net/tun missing (make deps installs QEMU): skipping the network boot" >&2
  fi
else
  echo "demo: not root (or no netns support): running on this host's loopback, without the network boot" >&2
  NS=""
  ADDR=127.0.0.1
  in_ns() { "$@"; }
  where="this host's loopback"
fi
SERVER=http://$ADDR:7080
if [ -z "$NS" ] && curl -fs "$SERVER/healthz" >/dev/null 2>&1; then
  echo "demo: something already listens on $SERVER; stop it first" >&2
  exit 1
fi

pids=()
server_pid=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  if [ -n "$NS" ]; then
    # Anything still running in the namespace (QEMU, the RA sender).
    for p in $(ip netns pids "$NS" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$NS" 2>/dev/null || true
  fi
  rm -rf "$DATA"
}
trap cleanup EXIT

anvil() { in_ns "$ANVIL" --server "$SERVER" --token-file "$DATA/data/auth/admin.token" "$@"; }

serve_flags=(--data-dir "$DATA/data" --bind "$ADDR" --log-format text)
if [ "$netboot" = yes ]; then
  step "preparing: Debian's kernel, the boot environment, the OS image the workflow installs"
  # Built once into .cache/demo and rebuilt only when its inputs change.
  ANVIL=$ANVIL scripts/demo-assets.sh .cache/demo
  serve_flags+=(--bootenv-dir .cache/demo/bootenv --images-dir .cache/demo/images)
  # iPXE waits ~13 s for an IPv6 router advertisement unless one comes.
  in_ns dnsmasq --keep-in-foreground --port=0 --conf-file=/dev/null --pid-file= --interface=br0 \
    --bind-interfaces --enable-ra --dhcp-range=::,constructor:br0,ra-only >"$DATA/ra.log" 2>&1 &
  pids+=($!)
else
  serve_flags+=(--no-dhcp --no-tftp --no-syslog --no-metadata --no-console)
fi

step "anvil serve (embedded store in $DATA/data, listening in $where)"
in_ns "$ANVIL" serve "${serve_flags[@]}" >"$LOG" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
  in_ns curl -fs "$SERVER/readyz" >/dev/null 2>&1 && break
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "anvil serve exited; its log:" >&2; cat "$LOG" >&2; exit 1
  fi
  sleep 0.1
done
in_ns curl -fsS "$SERVER/readyz" >/dev/null
sed 's/^/    /' "$LOG"

if [ "$netboot" = yes ]; then
  MAC=52:54:00:20:00:11
  step "anvil apply -f examples/demo/   (Tinkerbell Hardware, Template and Workflow)"
  anvil apply -f examples/demo/
  step "anvil get hardware,workflows"
  anvil get hardware
  anvil get workflows

  step "switching on demo-node1: a QEMU machine with a blank disk (BIOS, iPXE, MAC $MAC)"
  truncate -s 64M "$DATA/disk.raw"
  echo "    (TCG emulation; its serial console goes to $DATA/serial.log)"
  start=$(date +%s.%N)
  in_ns qemu-system-x86_64 -accel tcg -m 512 -smp 1 -display none -monitor none \
    -machine pc,graphics=off -serial "file:$DATA/serial.log" -boot order=nc \
    -netdev tap,id=n0,ifname=tap0,script=no,downscript=no \
    -device virtio-net-pci,netdev=n0,mac=$MAC \
    -drive file="$DATA/disk.raw",format=raw,if=virtio &
  qemu_pid=$!
  pids+=("$qemu_pid")

  step "anvil workflow watch demo-node1-install   (live, as the machine's agent reports)"
  anvil workflow watch demo-node1-install
  done_at=$(date +%s.%N)

  step "the machine reboots into the OS the workflow wrote"
  for _ in $(seq 1 120); do kill -0 "$qemu_pid" 2>/dev/null || break; sleep 1; done
  end=$(date +%s.%N)
  echo "    the machine's console (the agent's lines, then the installed OS):"
  grep -a -E 'anvil (init|agent)|^  [a-z-]+: |ANVIL-INSTALLED-OS' "$DATA/serial.log" | tr -d '\r' | sed 's/^/    | /' | tail -40
  if ! grep -aq ANVIL-INSTALLED-OS "$DATA/serial.log"; then
    echo "    the installed OS did not come up; see $DATA/serial.log" >&2
  fi
  awk -v s="$start" -v d="$done_at" -v e="$end" \
    'BEGIN { printf "    QEMU start -> workflow SUCCESS %.1fs, -> installed OS powered off %.1fs\n", d - s, e - s }'

  step "anvil describe workflow demo-node1-install"
  anvil describe workflow demo-node1-install

  step "anvil logs workflow/demo-node1-install   (every line the agent streamed)"
  anvil logs workflow/demo-node1-install

  step "anvil logs hardware/demo-node1 --tail 25   (the machine's record: DHCP, TFTP, HTTP, metadata, agent)"
  anvil logs hardware/demo-node1 --tail 25

  step "netboot was toggled off after SUCCESS (toggleAllowNetboot): the next boot goes to disk"
  anvil get hardware demo-node1 -o wide
else
  step "anvil apply -f examples/   (Tinkerbell manifests, unchanged)"
  anvil apply -f examples/

  step "anvil get hardware"
  anvil get hardware
  step "anvil get workflows"
  anvil get workflows

  step "the JSON API answers curl too"
  echo "    curl -H 'Content-Type: application/json' -d '{\"name\":\"rack1-node07\"}' $SERVER/anvil.v1.HardwareService/Get"
  in_ns curl -fsS -o "$DATA/hw.json" -H 'Content-Type: application/json' -d '{"name":"rack1-node07"}' \
    "$SERVER/anvil.v1.HardwareService/Get"
  printf '    %s …\n' "$(cut -c1-300 "$DATA/hw.json")"

  step "a (simulated) machine's agent takes the actions; we watch the workflow live"
  anvil simulate-agent --agent-id 3c:ec:ef:12:34:07 --action-time 2s --progress-steps 4 \
    >"$DATA/agent.log" 2>&1 &
  agent_pid=$!
  anvil workflow watch rack1-node07-install
  wait "$agent_pid"

  step "anvil describe workflow rack1-node07-install"
  anvil describe workflow rack1-node07-install

  step "netboot was toggled off after SUCCESS (toggleAllowNetboot): the next boot goes to disk"
  anvil get hardware
fi

echo
echo "Demo done. The server's log (last lines):"
sed 's/^/    /' "$LOG" | tail -20
