#!/usr/bin/env bash
# Builds, once, the Debian bookworm root the lab's systemd machines boot from (lab/systemd), and
# caches it under /var/cache/meshd-lab/root-HASH, HASH being of what makes the root (the suite,
# the package list and the steps below): a changed list builds a new root, an unchanged one is
# reused. /var/cache/meshd-lab/root-current names the root in use; older roots are removed.
# Machines boot from an overlay of it, never from the root itself, so no test changes the cache.
# Needs root, debootstrap and Debian's mirror (about a minute); scripts/deps.sh runs it.
set -euo pipefail
cache=${MESHD_LAB_CACHE:-/var/cache/meshd-lab}
suite=bookworm
# What a lab machine runs: systemd itself, the predecessor's firewall and tunnel (ufw, nftables,
# iptables, wg-quick with userspace wireguard-go), what meshd's package needs (procps: the
# unit's ExecReload), apt (the package is installed with it, from the file, offline), and the
# machine's own Docker engine (docker.io), so a module's container sees the machine's own files
# (lab/systemd gives each machine what the engine needs under nspawn: see its Boot), and curl,
# which the lab's checks call from a machine as from any of the namespace machines.
packages=(
  systemd systemd-sysv dbus apt ca-certificates procps curl
  iproute2 nftables iptables ufw wireguard-tools wireguard-go docker.io
)
recipe="v5 $suite ${packages[*]}"
hash=$(printf '%s\n' "$recipe" | sha256sum | cut -c1-12)
root="$cache/root-$hash"

if [ -f "$root/.meshd-lab-root" ] && [ "$(readlink "$cache/root-current" 2>/dev/null)" = "root-$hash" ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "labroot: the lab's systemd root $root is not built (run as root to build it)" >&2
  exit 0
fi
mkdir -p "$cache"
# One build at a time: two runs of deps.sh at once wait for each other here.
exec 9>"$cache/.lock"
flock 9
if [ -f "$root/.meshd-lab-root" ]; then
  ln -sfn "root-$hash" "$cache/root-current"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "labroot: debootstrap is not installed" >&2; exit 1; }

# The mirror this host's apt uses for Debian itself (a deb822 URIs line or a one-line deb entry
# naming /debian), else deb.debian.org.
mirror=$(grep -rhoE '^(URIs:[[:space:]]*|deb[[:space:]]+(\[[^]]*\][[:space:]]+)?)https?://[^[:space:]]+/debian/?([[:space:]]|$)' \
  /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null | grep -oE 'https?://[^[:space:]]+' | head -1 || true)
mirror=${mirror:-http://deb.debian.org/debian}

echo "labroot: building the lab's systemd root ($suite, ${#packages[@]} packages, from $mirror; about a minute)"
tmp="$root.tmp"
rm -rf "$tmp"
include=$(IFS=,; echo "${packages[*]}")
if ! debootstrap --variant=minbase --include="$include" "$suite" "$tmp" "$mirror" >"$cache/debootstrap.log" 2>&1; then
  echo "labroot: debootstrap failed; the end of $cache/debootstrap.log:" >&2
  tail -20 "$cache/debootstrap.log" >&2
  exit 1
fi
# Each machine is given its own machine-id at boot (systemd-nspawn makes one when it is empty),
# and its name as its host name (debootstrap copied this host's /etc/hostname).
rm -f "$tmp/etc/hostname"
: >"$tmp/etc/machine-id"
# No mirror inside: a machine installs from files it is given (the lab has no route out).
: >"$tmp/etc/apt/sources.list"
chroot "$tmp" apt-get clean
echo "$recipe" >"$tmp/.meshd-lab-root"
mv "$tmp" "$root"
ln -sfn "root-$hash" "$cache/root-current"
for old in "$cache"/root-*; do
  case "$old" in "$root" | "$cache/root-current") continue ;; esac
  [ -d "$old" ] && rm -rf "$old"
done
echo "labroot: built $root"
