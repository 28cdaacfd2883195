#!/usr/bin/env bash
# The demo: the whole migration of a lab fleet the predecessor mesh runs, narrated step by step.
# The hub is a Debian machine booted by real systemd (meshd installed from its package, its agent
# run by the package's unit); it looks the way the predecessor leaves it (a ufw firewall, service containers, a file its
# control keeps rewriting, a WireGuard tunnel to two peers that call a service through it); meshd
# adopts it, takes its tunnel over in place, enrols the peers (keeping their addresses) and a new
# machine (converged, a fresh address), takes the service over, then previews and converges every
# node — while probes from the peers, a second machine and an outsider record every call. Each
# step says what the operator does, what meshd reports and what the probes say; then the probes
# per step as a table, and the end is the board (`meshd status`) and `meshd history`. `meshlab
# down` at the end leaves nothing behind (KEEP_LAB=1 keeps the lab to look around).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "demo: run as root (the lab is network namespaces and its own Docker engines)" >&2; exit 1; }

lab=demo
meshlab="$PWD/bin/meshlab"
meshd_bin="$PWD/bin/meshd"
keep=${KEEP_LAB:-}
agent_args=(agent --data-dir /var/lib/meshd --docker-host unix:///run/docker.sock --reconcile-interval 2s)
# SCREENSHOTS=DIR (`make screenshots`): the agents serve the status page on their loopback, and the
# hub's is photographed into DIR at two moments of the migration (shot, below).
shots=${SCREENSHOTS:-}
page_addr=127.0.0.1:9180
if [ -n "$shots" ]; then agent_args+=(--metrics "$page_addr"); fi
started=$(date +%s)

n=0
# step says a step of the migration begins: a heading, and the lab counts the probes' calls per step.
step() {
  n=$((n + 1))
  printf '\n\033[1m== %d. %s\033[0m\n' "$n" "$*"
  "$meshlab" step --name "$lab" "$*"
}
say() { printf '   %s\n' "$*"; }
on() { local m=$1; shift; printf '%s$ %s\n' "$m" "$*"; "$meshlab" exec --name "$lab" "$m" -- "$@"; }
quiet() { local m=$1; shift; "$meshlab" exec --name "$lab" "$m" -- "$@"; }
lab() { printf 'lab$ meshlab %s\n' "$*"; "$meshlab" "$@"; }
try() { local m=$1; shift; printf '%s$ %s\n' "$m" "$*"; "$meshlab" exec --name "$lab" "$m" -- "$@" || echo "(exit $?: refused, as it should be)"; }
# probes prints what the probes say about the step under way (its row of the per-step table),
# once they answer again (an outage still going on is waited out, with a progress line).
probes() {
  local t0 now waited=
  t0=$(date +%s)
  while "$meshlab" probes --steps --name "$lab" | tail -1 | grep -q 'still failing'; do
    waited=1
    now=$(date +%s)
    if [ $((now - t0)) -ge 30 ]; then
      printf '\r   the probes still fail after 30 s (bin/meshlab probes --name %s)\n' "$lab"
      break
    fi
    printf '\r   waiting for the probes to answer again ... %ds' $((now - t0))
    sleep 0.5
  done
  if [ -n "$waited" ]; then printf '\r   the probes answer again                              \n'; fi

  printf '   \033[2mthe probes in this step:\033[0m\n'
  "$meshlab" probes --steps --name "$lab" | sed -n '1p;$p' | sed 's/^/   /'
}
# wait_for DESC SECONDS CMD...: runs CMD (on the lab machine named by its first word) until it
# succeeds, with a progress line; says so and goes on when SECONDS pass.
wait_for() {
  local what=$1 limit=$2; shift 2
  local t0 now
  t0=$(date +%s)
  while :; do
    if "$meshlab" exec --name "$lab" "$@" >/dev/null 2>&1; then
      now=$(date +%s); printf '\r   waiting for %s ... done in %ds          \n' "$what" $((now - t0)); return 0
    fi
    now=$(date +%s)
    if [ $((now - t0)) -ge "$limit" ]; then
      printf '\r   waiting for %s ... not within %ds (look: meshd node show, bin/meshlab probes)\n' "$what" "$limit"; return 1
    fi
    printf '\r   waiting for %s ... %ds' "$what" $((now - t0))
    sleep 0.5
  done
}
# shot NAME=PATH [--want TEXT]... [NAME=PATH ...]: with SCREENSHOTS set, bin/statusshot takes the
# hub's status page at each PATH as DIR/NAME once it shows every TEXT, from the hub's own network.
shot() {
  [ -n "$shots" ] || return 0
  local netns args=()
  netns=$("$meshlab" status --json --name "$lab" | grep -o '"netns":"[^"]*-hub"' | cut -d'"' -f4)
  for a in "$@"; do
    case "$a" in --want) args+=(--want) ;; *=/*) args+=(--page "$a") ;; *) args+=("$a") ;; esac
  done
  nsenter --net="$netns" -- "$PWD/bin/statusshot" --base "http://$page_addr" --out "$shots" "${args[@]}" |
    sed 's/^/   /'
}
put_meshd() { "$meshlab" exec --name "$lab" "$1" -- sh -c "cat > /usr/local/bin/meshd && chmod 0755 /usr/local/bin/meshd" < "$meshd_bin"; }
# The package `make package` built (the hub is a systemd machine: meshd goes on it as on a real one).
deb=$(ls -t bin/meshd_*_amd64.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || { echo "demo: no bin/meshd_*_amd64.deb (make demo builds it: make package)" >&2; exit 1; }
cleanup() {
  if [ -z "$keep" ]; then "$meshlab" down --name "$lab" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

printf '\033[1mmeshd demo: a fleet migrated from its predecessor while it serves\033[0m\n'
say "The lab: hub (the predecessor's hub: ufw, containers webapp :8080, predecessor-registry :5000, metrics :9090,"
say "a WireGuard tunnel wg0 10.44.0.1), peer1 and peer2 (calling webapp through the tunnel), newnode (bare),"
say "outside (off the private network: it must never reach the store). Probes call all the time."
"$meshlab" down --name "$lab" >/dev/null 2>&1 || true
lab up --name "$lab" --scenario predecessor-ufw --systemd hub | sed 's/^/   /'
on hub ufw status
on hub docker ps --format '{{.Names}}  {{.Ports}}'
on hub wg show wg0 | grep -E 'interface|listening|peer|allowed' || true

step "A converged genesis on a machine in use is refused"
say "hub is a Debian machine booted by systemd (PID 1 there is systemd); meshd goes on it from its package:"
quiet hub sh -c "cat > /root/$(basename "$deb")" < "$deb"
printf 'hub$ apt install ./%s\n' "$(basename "$deb")"
"$meshlab" exec --name "$lab" hub -- env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "/root/$(basename "$deb")" 2>&1 |
  grep -E '^(Unpacking|Setting up|Created symlink)' | sed 's/^/   /' || true
say "operator: meshd genesis (converged: it would load a drop-by-default ruleset)"
try hub meshd genesis --name hub --advertise 198.51.100.10 --docker-host unix:///run/docker.sock
say "operator: meshd genesis --adopted (the registry's port 5000 is the predecessor's)"
try hub meshd genesis --name hub --adopted --advertise 198.51.100.10 --docker-host unix:///run/docker.sock --take-tunnel wg0
probes

step "The predecessor's control stopped; genesis adopted on hub, the registry on 5001, the tunnel taken"
say "operator: stops the predecessor's control (its services keep serving on what they have)"
lab stop-service --name "$lab" hub predecessor-control
say "operator: meshd genesis --adopted --port registry=5001 --take-tunnel wg0, then runs the agent"
on hub meshd genesis --name hub --adopted --advertise 198.51.100.10 --docker-host unix:///run/docker.sock --take-tunnel wg0 --port registry=5001
say "operator: starts the agent by the package's unit (its config: /etc/meshd/meshd.yaml; a 2 s pass for the demo)"
quiet hub sed -i 's/^reconcile_interval:.*/reconcile_interval: 2s/' /etc/meshd/meshd.yaml
if [ -n "$shots" ]; then quiet hub sh -c "printf 'metrics:\n  - %s\n' '$page_addr' >> /etc/meshd/meshd.yaml"; fi
on hub systemctl enable --now meshd
# shellcheck disable=SC2046
wait_for "the mesh's interface to carry the tunnel" 60 hub -- sh -c "meshd tunnel show --json | grep -q '\"state\": *\"mesh-up\"'"
say "meshd: the found wg0 is down, its file kept; the mesh's wg0 in its place has its key, port, address and"
say "both peers, carried:"
on hub meshd tunnel show
probes

step "Assign webapp on hub: prepares only (the found container and file are held)"
on hub meshd module assign hub webapp
wait_for "the hub's report to hold webapp's file" 30 hub -- sh -c "meshd node show hub | grep -q 'app.conf  *webapp  *held'"
on hub meshd node show hub
probes

step "The predecessor's control started again: its write is reported, never reverted"
lab start-service --name "$lab" hub predecessor-control
wait_for "the report to say CHANGED BY SOMETHING ELSE" 30 hub -- sh -c "meshd node show hub | grep -q 'CHANGED BY SOMETHING ELSE'"
lab stop-service --name "$lab" hub predecessor-control
quiet hub meshd node show hub | grep -E 'app.conf|CHANGED' | sed 's/^/   /' || true
probes

for p in peer1 peer2; do
  step "Enrol $p adopted over the tunnel it has; it keeps its address; its tunnel taken"
  put_meshd "$p"
  tok=$(quiet hub meshd token create --adopted --json | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
  say "operator: meshd token create --adopted on hub; meshd join --token-file - --name $p --tunnel wg0 on $p"
  printf '%s\n' "$tok" | quiet "$p" meshd join --token-file - --name "$p" --data-dir /var/lib/meshd --tunnel wg0 | sed 's/^/   /'
  "$meshlab" install-agent --name "$lab" "$p" "$meshd_bin" -- "${agent_args[@]}"
  on hub meshd tunnel take "$p" wg0
  # A found tunnel's name is kept: the mesh's interface is raised as wg0 in the found one's place.
  wait_for "the mesh's wg0 to be up in $p's found wg0's place" 60 hub -- sh -c "meshd node show $p | grep -Eq '^tunnel[[:space:]]+wg0 .*: mesh-up'"
  probes
done

step "Enrol newnode converged: a fresh address from the same range"
put_meshd newnode
tok=$(quiet hub meshd token create --converged --json | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
say "operator: meshd token create --converged on hub; meshd join --token-file - --name newnode on newnode"
printf '%s\n' "$tok" | quiet newnode meshd join --token-file - --name newnode --data-dir /var/lib/meshd --advertise 198.51.100.13 | sed 's/^/   /'
"$meshlab" install-agent --name "$lab" newnode "$meshd_bin" -- "${agent_args[@]}"
wait_for "newnode's meshd0 at its fresh address 10.44.0.4" 60 newnode -- sh -c "ip -4 addr show dev meshd0 | grep -q 10.44.0.4"
on newnode wg show meshd0 | grep -E 'interface|listening|peer|endpoint' || true
# The migration's midpoint: every machine enrolled, only newnode converged (it joined so), and
# webapp's held file, changed by the predecessor's write, in the way of its take.
shot status-changed.png=/ --want "1 of 4 nodes converged" --want "(webapp) changed by something else" \
  --want "newnode enrolled" --want "live: record index"
probes

step "Take webapp on hub: the cutover (the found container swapped for meshd's)"
say "operator: meshd module take hub webapp (after its data moved)"
on hub meshd module take hub webapp
wait_for "webapp to be meshd's own (replaced)" 60 hub -- sh -c "meshd node show hub | grep -q 'webapp  *webapp  *meshd.s own (replaced'"
swap=$(grep -o 'container taken.*swap=[0-9.]*[a-zµ]*' "/var/tmp/meshlab/$lab/machines/hub/log/meshd.log" 2>/dev/null | tail -1 | grep -o 'swap=.*' || true)
say "meshd: the new container was created (its image checked) before the found one was stopped: the outage"
say "is the swap (stop + start), ${swap:-in the agent log as swap=}; the probes below measure it from outside"
on hub cat /etc/webapp/app.conf
probes

# converge_node NODE: the preview (its derived filter's rules left out here), then the converge
# with that preview's plan token; a token gone stale in between (the node's next report changed
# something) is said, and the preview read again.
converge_node() {
  local node=$1 token
  for _ in 1 2 3; do
    printf 'hub$ meshd converge %s --preview\n' "$node"
    quiet hub meshd converge "$node" --preview | grep -v '^    ' | sed 's/^/   /' || true
    say "(the derived filter's rules are left out here: meshd converge $node --preview prints them all)"
    token=$(quiet hub meshd converge "$node" --preview --json | sed -n 's/^  "token": *"\([^"]*\)".*/\1/p' || true)
    if on hub meshd converge "$node" --plan "$token" --wait 3m; then return 0; fi
    say "meshd refused the plan (the node changed since that preview): the operator reads the preview again"
  done
  return 1
}

for node in hub peer1 peer2; do
  step "Preview, then converge $node"
  say "operator: meshd converge $node --preview (what listens, what will close, the derived filter, a plan token),"
  say "reads every 'will close' line, then meshd converge $node --plan TOKEN"
  converge_node "$node"
  probes
done

printf '\n\033[1mThe probes per step\033[0m (calls and failed calls of the peers'"'"' and newnode'"'"'s probes; the longest outage that began in the step; the outsider'"'"'s calls to the store, refused and reached)\n'
"$meshlab" probes --steps --name "$lab"
# The end: the board with every node converged, beside the timeline.
shot status-overview.png=/ --want "4 of 4 nodes converged" --want "peer2 is converged" --want "live: record index" \
  status-node.png=/node/hub --want "Last host report"

step "Done: every node converged"
say "operator: meshd status (the summary line and the board: every node's steps, none in the way)"
on hub meshd status
step "What happened, when, and who did it"
say "operator: meshd history (every command with who gave it, and the host events, by record index)"
on hub meshd history
echo
echo "The demo took $(( $(date +%s) - started )) s."
if [ -n "$keep" ]; then
  echo "The lab stays up (KEEP_LAB): bin/meshlab status --name $lab; bin/meshlab exec --name $lab hub -- meshd status;"
  echo "bin/meshlab probes --steps --name $lab. Tear it down with: bin/meshlab down --name $lab"
else
  echo "To look around next time: KEEP_LAB=1 make demo (then bin/meshlab status --name $lab). The lab is being torn down now (bin/meshlab down --name $lab)."
fi
