#!/usr/bin/env bash
# The demo: a lab machine that looks the way the predecessor mesh leaves it (a ufw firewall, service
# containers, a file its control keeps rewriting, a WireGuard tunnel to two peers that call a service
# through it) is taken over by meshd while probes watch that nothing that serves changes. Narrated;
# `meshlab down` at the end leaves nothing behind.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "demo: run as root (the lab is network namespaces and its own Docker engines)" >&2; exit 1; }

lab=demo
meshlab="$PWD/bin/meshlab"
meshd_bin="$PWD/bin/meshd"
keep=${KEEP_LAB:-}

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
on() { local m=$1; shift; printf '%s$ %s\n' "$m" "$*"; "$meshlab" exec --name "$lab" "$m" -- "$@"; }
lab() { printf 'lab$ meshlab %s\n' "$*"; "$meshlab" "$@"; }
# until_report waits until hub's host report shows what grep pattern $1 finds (at most 30 s).
until_report() {
  for _ in $(seq 60); do
    "$meshlab" exec --name "$lab" hub -- meshd node show hub 2>/dev/null | grep -q -- "$1" && return
    sleep 0.5
  done
  echo "(the host report did not show '$1' within 30 s)"
}
try() { local m=$1; shift; printf '%s$ %s\n' "$m" "$*"; "$meshlab" exec --name "$lab" "$m" -- "$@" || echo "(exit $?: refused, as it should be)"; }
cleanup() {
  if [ -z "$keep" ]; then "$meshlab" down --name "$lab" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

say "Raising the lab: a predecessor hub (ufw, containers, a tunnel), two peers, a new machine, an outsider"
"$meshlab" down --name "$lab" >/dev/null 2>&1 || true
lab up --name "$lab" --scenario predecessor-ufw
on hub ufw status
on hub docker ps --format '{{.Names}}  {{.Ports}}'
on hub cat /etc/webapp/app.conf

say "Put meshd on the hub. A converged genesis would load a drop-by-default ruleset: it refuses a machine in use"
"$meshlab" exec --name "$lab" hub -- sh -c "cat > /usr/local/bin/meshd" < "$meshd_bin"
on hub chmod 0755 /usr/local/bin/meshd
try hub meshd genesis --name hub --advertise 198.51.100.10 --docker-host unix:///run/docker.sock --take-tunnel wg0

say "Adopted keeps what is found in force. The registry's port is the predecessor's: genesis names the holder"
try hub meshd genesis --name hub --adopted --advertise 198.51.100.10 --docker-host unix:///run/docker.sock --take-tunnel wg0

say "The operator stops the predecessor's control (its services keep serving), gives the registry another port,"
say "and has the mesh take the predecessor's tunnel wg0 over in place: its key, port, address, range and peers"
lab stop-service --name "$lab" hub predecessor-control
on hub meshd genesis --name hub --adopted --advertise 198.51.100.10 --docker-host unix:///run/docker.sock --take-tunnel wg0 --port registry=5001
say "Run the agent on the hub (as a unit, so a reboot starts it again); it raises the foundation and the tunnel"
lab install-agent --name "$lab" hub "$meshd_bin" -- agent --data-dir /var/lib/meshd --docker-host unix:///run/docker.sock --reconcile-interval 2s
until_report "meshd-registry .*meshd's own (created"
on hub meshd status
say "The tunnel changed hands: wg0 is down, its file still on disk; meshd0 carries the peers, who changed nothing"
on hub meshd tunnel show
on hub ip -brief link
on hub docker ps --format '{{.Names}}  {{.Ports}}'

say "Assigning webapp on an adopted node only prepares it: the found container and file are held"
on hub meshd module assign hub webapp
until_report "app.conf  *webapp  *held"
on hub meshd node show hub

say "The predecessor's control, started again, rewrites the file: reported, never reverted"
lab start-service --name "$lab" hub predecessor-control
until_report "CHANGED BY SOMETHING ELSE"
lab stop-service --name "$lab" hub predecessor-control
on hub meshd node show hub

say "So far nothing that serves changed: the probes (peers through the tunnel, a second machine, the outsider)"
lab probes --name "$lab"

say "Taking webapp is the cutover: the container is replaced by meshd's, the file converges, its original kept"
on hub meshd module take hub webapp
until_report "webapp  *webapp  *meshd's own (replaced"
on hub docker ps --format '{{.Names}}  {{.Image}}  {{.Labels}}'
on hub cat /etc/webapp/app.conf
echo "(the original is the file as meshd found it at assign, generation and all: the predecessor"
echo " had rewritten it since the lab came up, and again while it was held)"
on hub meshd node original hub /etc/webapp/app.conf

say "The probes again: the only failed calls are at webapp's cutover (the old container stopped, meshd's started)"
lab probes --name "$lab"

say "Done. The hub stays ADOPTED until the operator converges it."
on hub meshd status
if [ -n "$keep" ]; then echo "(KEEP_LAB set: the lab stays up; meshlab down --name $lab removes it)"; fi
