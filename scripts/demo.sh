#!/usr/bin/env bash
# demo.sh: start Anvil with its embedded store in a private network namespace,
# apply the Tinkerbell examples, and watch the workflow run to SUCCESS.
#
# Until the boot path exists (network boot, boot environment, real agent), the
# machine's agent is simulated: `anvil simulate-agent` speaks the real agent
# protocol and reports each action done after a short pause.
set -euo pipefail
cd "$(dirname "$0")/.."

ANVIL=${ANVIL:-$PWD/bin/anvil}
NS=anvil-demo-$$
DATA=$(mktemp -d /tmp/anvil-demo.XXXXXX)
ADDR=127.0.0.1
SERVER=http://$ADDR:7080
LOG=$DATA/serve.log

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

# Run in the namespace when we can make one (root), else on this host's
# loopback so the demo still works for a non-root user.
if [ "$(id -u)" = 0 ] && ip netns add "$NS" 2>/dev/null; then
  ip -n "$NS" link set lo up
  in_ns() { ip netns exec "$NS" "$@"; }
  where="network namespace $NS"
else
  echo "demo: not root (or no netns support): running on this host's loopback instead" >&2
  NS=""
  in_ns() { "$@"; }
  where="this host's loopback"
  if curl -fs "$SERVER/healthz" >/dev/null 2>&1; then
    echo "demo: something already listens on $SERVER; stop it first" >&2
    exit 1
  fi
fi

server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  [ -n "$NS" ] && ip netns del "$NS" 2>/dev/null || true
  rm -rf "$DATA"
}
trap cleanup EXIT

anvil() { in_ns "$ANVIL" --server "$SERVER" "$@"; }

step "anvil serve (embedded store in $DATA, listening in $where)"
in_ns "$ANVIL" serve --data-dir "$DATA" --bind "$ADDR" --log-format text >"$LOG" 2>&1 &
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
