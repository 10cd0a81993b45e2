#!/usr/bin/env bash
# demo.sh: start Anvil with its embedded store in a private network namespace,
# apply the Tinkerbell examples, switch on a QEMU machine that network-boots
# from Anvil (DHCP -> TFTP ipxe.efi -> iPXE -> its script -> kernel +
# initramfs), then watch the workflow run to SUCCESS.
#
# Until the real boot environment exists (the agent as /init), the machine
# boots a stand-in initramfs that shows the kernel command line Anvil gave it
# and powers off, and the workflow is driven by `anvil simulate-agent`, which
# speaks the real agent protocol. Without root (no namespace, no QEMU) the
# demo runs the control-plane part on this host's loopback.
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
  if command -v qemu-system-x86_64 >/dev/null && [ -r /usr/share/OVMF/OVMF_CODE.fd ] && [ -e /dev/net/tun ]; then
    netboot=yes
    ip -n "$NS" link add br0 type bridge
    ip -n "$NS" addr add "$ADDR/24" dev br0
    ip -n "$NS" -6 addr add fd20::1/64 dev br0 nodad
    ip -n "$NS" link set br0 up
    ip -n "$NS" tuntap add dev tap0 mode tap
    ip -n "$NS" link set tap0 master br0 up
  else
    ip -n "$NS" addr add "$ADDR/24" dev lo
    echo "demo: QEMU/OVMF not installed (make deps installs them): skipping the network boot" >&2
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

anvil() { in_ns "$ANVIL" --server "$SERVER" "$@"; }

serve_flags=(--data-dir "$DATA/data" --bind "$ADDR" --log-format text)
if [ "$netboot" = yes ]; then
  step "preparing the boot environment: Debian's kernel + a stand-in initramfs"
  scripts/fetch-kernel.sh .cache/kernel
  mkdir -p "$DATA/data/bootenv" "$DATA/initramfs/dev"
  cp .cache/kernel/vmlinuz "$DATA/data/bootenv/vmlinuz-x86_64"
  CGO_ENABLED=0 go build -o "$DATA/initramfs/init" ./test/e2e/testinit
  mknod "$DATA/initramfs/dev/console" c 5 1
  (cd "$DATA/initramfs" && find . | cpio --quiet -o -H newc) >"$DATA/data/bootenv/initramfs-x86_64"
  ls -l "$DATA/data/bootenv" | sed 's/^/    /'
  # iPXE waits ~13 s for an IPv6 router advertisement unless one comes.
  in_ns dnsmasq --keep-in-foreground --port=0 --conf-file=/dev/null --pid-file= --interface=br0 \
    --bind-interfaces --enable-ra --dhcp-range=::,constructor:br0,ra-only >"$DATA/ra.log" 2>&1 &
  pids+=($!)
else
  serve_flags+=(--no-dhcp --no-tftp --no-syslog)
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

if [ "$netboot" = yes ]; then
  step "switching on rack1-node07: a QEMU machine (UEFI, OVMF's own PXE client, empty disk, MAC $MAC)"
  cp /usr/share/OVMF/OVMF_VARS.fd "$DATA/vars.fd"
  echo "    (TCG emulation: about 20 seconds; its serial console goes to $DATA/serial.log)"
  in_ns qemu-system-x86_64 -accel tcg -m 512 -no-reboot -display none -monitor none \
    -machine q35,graphics=off -serial "file:$DATA/serial.log" \
    -drive if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE.fd \
    -drive if=pflash,format=raw,unit=1,file="$DATA/vars.fd" \
    -netdev tap,id=n0,ifname=tap0,script=no,downscript=no \
    -device virtio-net-pci,netdev=n0,mac=$MAC,romfile=,bootindex=1 &
  qemu_pid=$!
  pids+=("$qemu_pid")
  for _ in $(seq 1 180); do kill -0 "$qemu_pid" 2>/dev/null || break; sleep 1; done
  echo "    the machine's console said:"
  grep -a -o 'ANVIL-E2E-BOOTED.*' "$DATA/serial.log" | sed 's/^/    | /' || echo "    | (no boot marker: see $DATA/serial.log)"

  step "anvil logs hardware/rack1-node07   (the machine's record: what each service did for it, and why)"
  anvil logs hardware/rack1-node07
fi

step "a (simulated) machine's agent takes the actions; we watch the workflow live"
anvil simulate-agent --agent-id 3c:ec:ef:12:34:07 --action-time 2s --progress-steps 4 \
  >"$DATA/agent.log" 2>&1 &
agent_pid=$!
anvil workflow watch rack1-node07-install
wait "$agent_pid"

step "anvil describe workflow rack1-node07-install"
anvil describe workflow rack1-node07-install

step "anvil logs rack1-node07-install   (lines the agent streamed)"
anvil logs rack1-node07-install

step "netboot was toggled off after SUCCESS (toggleAllowNetboot): the next boot goes to disk"
anvil get hardware

step "the rendered workflow is stored with its tasks and actions (anvil get workflow -o yaml, abridged)"
anvil get workflow rack1-node07-install -o yaml >"$DATA/wf.yaml"
# Files, not pipes into head: under pipefail an early-closing head fails the demo.
sed -n '/^  tasks:/,$p' "$DATA/wf.yaml" | awk 'NR <= 30 { print "    " $0 }'

echo
echo "Demo done. The server's log:"
sed 's/^/    /' "$LOG" | tail -20
