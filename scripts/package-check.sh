#!/usr/bin/env bash
# `make package-check`: Debian's own checks of the package `make package` builds, beyond the
# tests (packaging/deb's TestPackage runs lintian too; the lab's systemd machines walk install,
# upgrade, remove and purge under real systemd):
#   lintian --pedantic   no error, no warning
#   piuparts             in a bookworm chroot it debootstraps from Debian's mirror (as apt
#                        does): install and purge leave nothing behind; install-upgrade-purge
#                        from the first packaged build (ae14058, built once and cached by
#                        commit, `meshpkg commit`), served to the chroot's apt as a local
#                        repository, to the tree's.
# Needs root (piuparts chroots), piuparts (installed here when missing) and Debian's mirror.
# A few minutes; not part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
mirror=${MESHD_DEBIAN_MIRROR:-http://deb.debian.org/debian}
first=${MESHD_FIRST_PACKAGED:-ae14058}

if ! command -v piuparts >/dev/null; then
  echo "package-check: installing piuparts (Debian's)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends piuparts >/dev/null
fi

pkg=$(go run ./cmd/meshpkg build --out bin | tail -n 1)
echo "package-check: $pkg"
lintian --pedantic --fail-on error,warning "$pkg"
echo "package-check: lintian: no error, no warning"

old=$(go run ./cmd/meshpkg commit "$first" | tail -n 1)
repo=$(mktemp -d /tmp/meshd-piuparts-repo.XXXXXX)
trap 'rm -rf "$repo"' EXIT
cp "$old" "$repo/"
# A flat repository of the one older package: its Packages stanza is the package's control
# fields and where and how big the file is.
deb=$(basename "$old")
{
  dpkg-deb -f "$repo/$deb"
  echo "Filename: ./$deb"
  echo "Size: $(stat -c %s "$repo/$deb")"
  echo "SHA256: $(sha256sum "$repo/$deb" | cut -d' ' -f1)"
  echo
} >"$repo/Packages"
chmod -R a+rX "$repo"

# piuparts runs install-purge, then install-upgrade-purge since apt knows an older meshd (the
# extra repository's): apt-get installs it, then the tree's file upgrades it. Its bookworm chroot
# is debootstrapped once (about four minutes) and kept beside the lab's machine root.
cache=${MESHD_LAB_CACHE:-/var/cache/meshd-lab}
base="$cache/piuparts-bookworm.tgz"
if [ -f "$base" ]; then chroot_arg=(--basetgz "$base"); else mkdir -p "$cache"; chroot_arg=(--save "$base"); fi
log=$(mktemp /tmp/meshd-piuparts.XXXXXX.log)
echo "package-check: piuparts (its log: $log)"
if ! piuparts --distribution bookworm --mirror "$mirror" "${chroot_arg[@]}" \
  --bindmount "$repo" --extra-repo "deb [trusted=yes] file://$repo ./" \
  --warn-on-others --log-level debug "$pkg" >"$log" 2>&1; then
  grep -E ' (INFO|ERROR|FAIL)' "$log" | tail -n 30
  echo "package-check: piuparts failed (its log: $log)" >&2
  exit 1
fi
grep -E ' INFO: (PASS|Installation)' "$log"
# The only meshd the chroot's apt knows is the extra repository's, the first build.
oldv=$(dpkg-deb -f "$old" Version)
if ! grep -q "Command ok: \[.*'apt-get', '-y', 'install', 'meshd'\]" "$log"; then
  echo "package-check: piuparts passed but never installed $oldv through apt first: no upgrade was tested" >&2
  exit 1
fi
echo "package-check: piuparts: install-purge, and install-upgrade-purge from $oldv, passed"
