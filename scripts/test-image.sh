#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# test-image.sh - build the test "python:3.12-slim" image from Debian packages, cached.
#
# debootstrap --variant=minbase --include=python3-minimal of Debian $RELEASE, python
# symlinks in /usr/local/bin, apt caches dropped, packed as one layer of an OCI image
# layout with umoci, tagged 3.12-slim (annotation org.opencontainers.image.ref.name).
# (The name is the one tests and docs use; the python inside is Debian's python3.)
#
# Cache: the entry python-image-<key> of the machine-wide cache (scripts/k8cache.py), key =
# hash of this script, lib-image.sh and the release; a second run (from any clone) prints
# the checked entry's layout at once. Must run as root (debootstrap). Prints the layout
# path on stdout; progress goes to stderr.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
script=$top/scripts/test-image.sh
fill=${1:-}
release=${KOSA8_TEST_RELEASE:-bookworm}
tag=3.12-slim

. "$top/scripts/lib-image.sh"

log() { echo "test-image.sh: $*" >&2; }

image_reuse python-image "$script"
# Root, the tools, the Debian mirror this machine is configured with, a work directory.
image_begin python-image debootstrap umoci

log "debootstrap $release from $mirror (takes ~30 s)"
debootstrap --variant=minbase --include=python3-minimal "$release" "$work/rootfs" "$mirror" \
	>"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; exit 1; }

r=$work/rootfs
mkdir -p "$r/usr/local/bin"
ln -sf /usr/bin/python3 "$r/usr/local/bin/python3"
ln -sf /usr/bin/python3 "$r/usr/local/bin/python"
image_trim "$r"

log "packing the OCI layout with umoci"
layout=$work/oci
image_pack "$layout" "$tag" "$r" "debootstrap $release" python3 /

image_done "$layout"
