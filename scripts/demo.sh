#!/usr/bin/env bash
# The demo: a one-node mesh raised adopted in a network namespace of its own, a module assigned and
# taken, the agent killed and restarted with nothing lost. Narrated; leaves nothing behind.
# (When the lab bed lands, this grows into a predecessor machine being migrated.)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "demo: run as root (it creates a network namespace)" >&2; exit 1; }

ns=meshd-demo
work=$(mktemp -d /tmp/meshd-demo.XXXXXX)
meshd="$PWD/bin/meshd"
export MESHD_SOCKET="$work/meshd.sock"
agent_pid=""

cleanup() {
  [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
in_ns() { ip netns exec "$ns" "$@"; }

ip netns del "$ns" 2>/dev/null || true
ip netns add "$ns"
in_ns ip link set lo up

start_agent() {
  in_ns "$meshd" agent --data-dir "$work/data" --log-level warn >>"$work/agent.log" 2>&1 &
  agent_pid=$!
  for _ in $(seq 100); do "$meshd" status --json 2>/dev/null | grep -q '"id": "[0-9a-f]' && return; sleep 0.1; done
  echo "demo: the agent did not come up:" >&2; cat "$work/agent.log" >&2; exit 1
}

say "A machine that already serves is raised ADOPTED: what meshd finds there is held, not replaced."
say "The registry's usual port (5000) is held by the predecessor here, so genesis is given another."
run in_ns "$meshd" genesis --name hub --adopted --data-dir "$work/data" --advertise 127.0.0.1 --port registry=5001
start_agent
run "$meshd" status

say "Assigning a module on an adopted node only prepares it: found files and containers are held."
run "$meshd" module assign hub webapp
run "$meshd" declaration hub

say "Taking the module is the cutover, once its data has moved: from now on it converges."
run "$meshd" module take hub webapp

say "Kill the agent outright (SIGKILL) in the middle of the migration, and start it again."
kill -9 "$agent_pid"; wait "$agent_pid" 2>/dev/null || true
agent_pid=""
start_agent
run "$meshd" node show hub
run "$meshd" operator raft list-peers

say "Nothing acknowledged was lost. The node stays ADOPTED until the operator converges it."
