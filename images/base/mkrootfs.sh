#!/usr/bin/env bash
# Build a minimal Debian bookworm root file system and pack it as a tarball
# that `docker import` turns into an image. Needs root and a reachable Debian mirror.
#
#   mkrootfs.sh OUT.tar.gz
#
# The mirror is the one this host's apt uses (DEBIAN_MIRROR overrides it).
set -euo pipefail

out=${1:?usage: mkrootfs.sh OUT.tar.gz}
here=$(cd "$(dirname "$0")" && pwd)
suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

include=$(grep -v '^\s*#' "$here/packages.txt" | grep -v '^\s*$' | paste -sd, -)
work=$(mktemp -d "${TMPDIR:-/tmp}/rmqha-rootfs.XXXXXX")
root="$work/rootfs"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

echo "debootstrap --variant=minbase --include=$include $suite $mirror"
# debootstrap prints a line per package and stage; show the stage lines as they come.
if ! debootstrap --variant=minbase --include="$include" "$suite" "$root" "$mirror" < /dev/null 2>&1 \
        | tee "$work/debootstrap.log" | grep --line-buffered -E '^[IEW]: .*(\.\.\.|successfully\.)$|^[EW]: ' \
        | grep --line-buffered -vE '^I: [A-Z][a-z]+ [^ ]+\.\.\.$'; then
    echo "debootstrap failed; last lines of its log:" >&2
    tail -n 25 "$work/debootstrap.log" >&2
    [ -f "$root/debootstrap/debootstrap.log" ] && tail -n 25 "$root/debootstrap/debootstrap.log" >&2
    exit 1
fi

# Slim down: package lists, caches, docs and locales are not needed at run time.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
       "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
       "$root"/var/log/*.log "$root"/var/log/apt/* "$root"/tmp/* "$root"/debootstrap
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'locale.alias' -exec rm -rf {} + 2>/dev/null || true
# A container gets its own resolv.conf and hostname from the engine.
: > "$root/etc/resolv.conf"
echo rmqha > "$root/etc/hostname"
# No daemons may start while packages are installed later from a Dockerfile.
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"

# Numeric owners keep uid/gid as they are inside the root file system.
tar --numeric-owner --xattrs -C "$root" -czf "$out.partial" .
mv "$out.partial" "$out"
echo "rootfs: $out ($(du -h "$out" | cut -f1))"
