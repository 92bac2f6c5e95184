#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# test-image.sh - build the test "python:3.12-slim" image from Debian packages, cached.
#
# debootstrap --variant=minbase --include=python3-minimal of Debian $RELEASE, python
# symlinks in /usr/local/bin, apt caches dropped, packed as one layer of an OCI image
# layout with umoci, tagged 3.12-slim (annotation org.opencontainers.image.ref.name).
# (The name is the one tests and docs use; the python inside is Debian's python3.)
#
# Cache: ${KOSA8_CACHE:-build/cache}/python-image-<key>, key = hash of this script and
# the release; a second run prints the cached path at once. Must run as root
# (debootstrap). Prints the layout path on stdout; progress goes to stderr.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${KOSA8_CACHE:-$top/build/cache}
release=${KOSA8_TEST_RELEASE:-bookworm}
tag=3.12-slim
key=$( (cat "$0"; echo "$release") | sha256sum | cut -c1-16)
out=$cache/python-image-$key

log() { echo "test-image.sh: $*" >&2; }

if [ -f "$out/index.json" ] && [ -f "$out/oci-layout" ]; then
	echo "$out"
	exit 0
fi
[ "$(id -u)" = 0 ] || { log "must run as root (debootstrap needs it)"; exit 1; }
for t in debootstrap umoci; do
	command -v "$t" >/dev/null 2>&1 || [ -x "/usr/sbin/$t" ] ||
		{ log "$t is missing: apt-get install $t"; exit 1; }
done
PATH=$PATH:/usr/sbin:/sbin

# The Debian mirror this machine is configured with (deb822 first, then one-line).
mirror=${KOSA8_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -r "$f" ] || continue
		mirror=$(awk '
			/^[ \t]*$/ { if (deb && uri && suite) { print uri; exit } deb = uri = suite = 0; next }
			/^Types:/ && / deb( |$)/ { deb = 1 }
			/^URIs:/ { uri = $2 }
			/^Suites:/ { for (i = 2; i <= NF; i++) if ($i == "'"$release"'") suite = 1 }
			END { if (deb && uri && suite) print uri }' "$f" | head -1)
		[ -n "$mirror" ] && break
	done
fi
if [ -z "$mirror" ]; then
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -r "$f" ] || continue
		mirror=$(awk '$1 == "deb" && $3 == "'"$release"'" { print $2; exit }' "$f")
		[ -n "$mirror" ] && break
	done
fi
mirror=${mirror:-http://deb.debian.org/debian}

mkdir -p "$cache"
work=$(mktemp -d "$cache/python-image-build.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
start=$(date +%s)

log "debootstrap $release from $mirror (takes ~30 s)"
debootstrap --variant=minbase --include=python3-minimal "$release" "$work/rootfs" "$mirror" \
	>"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; exit 1; }

r=$work/rootfs
mkdir -p "$r/usr/local/bin"
ln -sf /usr/bin/python3 "$r/usr/local/bin/python3"
ln -sf /usr/bin/python3 "$r/usr/local/bin/python"
rm -rf "$r/var/cache/apt/"*.bin "$r/var/cache/apt/archives/"*.deb \
	"$r/var/cache/apt/archives/partial" "$r/var/lib/apt/lists" "$r/var/log/"*.log \
	"$r/var/cache/debconf/"*-old "$r/var/lib/dpkg/"*-old
mkdir -p "$r/var/lib/apt/lists/partial"

log "packing the OCI layout with umoci"
layout=$work/oci
umoci init --layout "$layout" >&2
umoci new --image "$layout:$tag" >&2
umoci insert --image "$layout:$tag" --history.created_by "debootstrap $release" "$r" / >&2
umoci config --image "$layout:$tag" --no-history \
	--config.cmd python3 \
	--config.env PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin \
	--config.env LANG=C.UTF-8 \
	--config.workingdir / >&2
umoci gc --layout "$layout" >&2

rm -rf "$out"
mv "$layout" "$out"
log "built $out in $(( $(date +%s) - start )) s ($(du -sh "$out" | cut -f1))"
echo "$out"
