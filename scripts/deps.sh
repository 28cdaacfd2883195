#!/usr/bin/env bash
# Installs what meshd's build, tests and demo need on a fresh Debian machine, idempotently:
# Debian packages only when one is missing, Go modules through the module proxy. staticcheck only
# with --staticcheck (`make vet` asks for it; the build and the demo do not need it); etcd only
# with --bench (`make bench` starts one on loopback for the Raft figure, and `make test`'s smoke
# run of the bench harness does too; the build and the demo do not need it).
set -euo pipefail
with_staticcheck=
with_bench=
for a in "$@"; do
  case "$a" in
  --staticcheck) with_staticcheck=1 ;;
  --bench) with_bench=1 ;;
  *) echo "deps: unknown option $a (want --staticcheck, --bench)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."

packages=(
  iproute2 nftables iptables ufw wireguard-tools wireguard-go conntrack util-linux procps psmisc
  curl ca-certificates docker.io
  chromium  # the status page's test drives a real headless Chromium
  bash-completion  # what meshd completion bash builds on (and its test)
  prometheus  # promtool checks and unit-tests docs/alerts.yml (its test); its server is not run
)
# The package's checks (lintian, `make package`'s test; systemd's systemd-analyze scores the
# unit's sandbox) and the lab's systemd machines (debootstrap builds their root, systemd-nspawn
# boots them).
packages+=(lintian systemd debootstrap systemd-container)
# Debian's etcd-server: the Raft figure's "versus" (cmd/meshbench), started by the bench itself.
[ -n "$with_bench" ] && packages+=(etcd-server)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "deps: missing Debian packages: ${missing[*]} (run as root to install them)" >&2
    exit 1
  fi
  echo "deps: installing ${#missing[@]} Debian packages (a minute or two on a fresh machine): ${missing[*]}"
  echo "deps: apt-get update"
  apt-get update -qq
  # apt's own lines, one per package fetched and set up, are the progress.
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" |
    awk '/^(Get:|Setting up )/ { print "deps:   " $0; fflush() }'
  echo "deps: Debian packages installed"
fi

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  export PATH=/usr/local/go/bin:$PATH
fi
command -v go >/dev/null || { echo "deps: Go is not installed (expected at /usr/local/go)" >&2; exit 1; }
echo "deps: Go modules (go mod download: quick once they are in the module cache)"
go mod download

# The root the lab's systemd machines boot from: built once (about a minute), cached by a hash of
# its package list under /var/cache/meshd-lab, rebuilt when the list changes.
bash scripts/labroot.sh

# staticcheck, pinned, installed once into the Go bin dir: for `make vet` only.
[ -n "$with_staticcheck" ] || exit 0
gobin="$(go env GOPATH)/bin"
if ! "$gobin/staticcheck" -version 2>/dev/null | grep -q '(0.8.2)'; then
  echo "deps: building staticcheck 0.8.2 (for make vet; about a minute)"
  go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
  echo "deps: staticcheck installed in $gobin"
fi
