#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# fresh-root.sh - the root of a fresh Debian machine for the install tests and the install
# bench (tests/integration/installkit.py, bench/install.py), cached.
#
#   fresh-root.sh PKG...     prints the root folder of the checked cache entry
#
# debootstrap --variant=minbase of Debian $release, plus what a machine one installs kosa8
# on has: curl and ca-certificates (to run `curl ... | sh`), systemd (systemctl, sysusers,
# systemd-analyze; systemd does not run in it), man-db. The PKGs (a release's DEPENDS,
# openssl) are in apt's cache, downloaded and not installed, with apt's lists: the
# machine of the issue's bench, "packages already cached by apt". /dev is left empty (the
# cache holds files only); whoever enters the root mounts /dev, /proc and /sys.
#
# Cache: the entry fresh-root-<key> of the machine-wide cache (scripts/k8cache.py), key =
# this script, the release and the PKGs. Must run as root (debootstrap).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
script=$top/scripts/fresh-root.sh
release=${KOSA8_TEST_RELEASE:-bookworm}
py=/usr/bin/python3
[ -x "$py" ] || py=python3

log() { echo "fresh-root.sh: $*" >&2; }

if [ "${1:-}" != --fill ]; then
	k=$("$py" "$top/scripts/k8cache.py" key -f "$script" -s "$release" \
		-s "$(printf '%s\n' "$@" | sort -u | tr '\n' ' ')")
	e=$("$py" "$top/scripts/k8cache.py" build fresh-root "$k" -- "$script" --fill "$@")
	echo "$e/root"
	exit 0
fi
shift
: "${K8CACHE_OUT:?--fill is run by k8cache.py build}"
[ "$(id -u)" = 0 ] || { log "must run as root (debootstrap needs it)"; exit 1; }
PATH=$PATH:/usr/sbin:/sbin
. "$top/scripts/lib-image.sh"   # image_mirror
mirror=$(image_mirror "$release")
start=$(date +%s)
r=${K8CACHE_OUT:?}/root
log "debootstrap $release from $mirror, then apt's cache of: $*"
dlog=$K8CACHE_OUT.debootstrap.log
debootstrap --variant=minbase --include=curl,ca-certificates,systemd,man-db "$release" "$r" \
	"$mirror" > "$dlog" 2>&1 || { tail -20 "$dlog" >&2; rm -f "$dlog"; exit 1; }
rm -f "$dlog"
cp /etc/resolv.conf "$r/etc/resolv.conf"
chroot "$r" apt-get update -q >&2
chroot "$r" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --download-only \
	--no-install-recommends "$@" >&2
# Files only: no device nodes (the cache's seal refuses them), no leftovers of the build.
rm -rf "${r:?}"/dev/* "${r:?}"/var/cache/apt/*.bin "${r:?}"/var/log/apt/* "${r:?}"/tmp/*
find "$r" \( -type p -o -type s -o -type b -o -type c \) -delete
log "built in $(( $(date +%s) - start )) s ($(du -sh "$r" | cut -f1))"
