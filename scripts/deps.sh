#!/usr/bin/env bash
# Installs what meshd's build, tests and demo need on a fresh Debian machine, idempotently:
# Debian packages only when one is missing, Go modules through the module proxy.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  iproute2 nftables iptables ufw wireguard-tools wireguard-go conntrack util-linux procps psmisc
  curl ca-certificates docker.io
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "deps: missing Debian packages: ${missing[*]} (run as root to install them)" >&2
    exit 1
  fi
  echo "deps: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  export PATH=/usr/local/go/bin:$PATH
fi
command -v go >/dev/null || { echo "deps: Go is not installed (expected at /usr/local/go)" >&2; exit 1; }
go mod download

# staticcheck, pinned, installed once into the Go bin dir.
gobin="$(go env GOPATH)/bin"
if ! "$gobin/staticcheck" -version 2>/dev/null | grep -q '(0.8.2)'; then
  echo "deps: installing staticcheck 0.8.2"
  go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
fi
