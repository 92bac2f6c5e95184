#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# node-image.sh - build the test "k8-node-sdk:test" image, cached: Debian's nodejs and the
# official openai and @anthropic-ai/sdk npm packages, for the broker's tests (issue 14).
#
# debootstrap --variant=minbase --include=nodejs of Debian $RELEASE; the npm packages (set
# "clients" of scripts/npm-pins: exact versions, no scripts run) are installed on the host
# once per machine (scripts/k8cache.py npm) and copied into the image as /app/node_modules, next to
# tests/integration/broker_clients.mjs (/app/broker_clients.mjs); apt caches dropped;
# packed as one layer of an OCI image layout with umoci, working directory /app.
#
# Cache: the entry node-image-<key> of the machine-wide cache (scripts/k8cache.py), key =
# hash of this script, lib-image.sh, scripts/npm-pins, the release and broker_clients.mjs;
# a second run (from any clone) prints the checked entry's layout at once. Must run as
# root (debootstrap). Prints the layout path on stdout; progress goes to stderr.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
script=$top/scripts/node-image.sh
fill=${1:-}
release=${KOSA8_TEST_RELEASE:-bookworm}
tag=test
clients=$top/tests/integration/broker_clients.mjs

. "$top/scripts/lib-image.sh"

log() { echo "node-image.sh: $*" >&2; }

image_reuse node-image "$script" "$top/scripts/npm-pins" "$clients"
# Root, the tools, the Debian mirror this machine is configured with, a work directory.
image_begin node-image debootstrap umoci npm

# The official clients, installed once per machine (scripts/npm-pins, set "clients").
npm_dir=$("$py" "$top/scripts/k8cache.py" npm clients)
npm_pkgs=$(awk '$1 == "clients" { $1 = ""; print }' "$top/scripts/npm-pins")

log "debootstrap $release with nodejs from $mirror (takes ~1 min)"
debootstrap --variant=minbase --include=nodejs "$release" "$work/rootfs" "$mirror" \
	>"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; exit 1; }

r=$work/rootfs
mkdir -p "$r/app"
cp -a "$npm_dir/node_modules" "$r/app/"
echo '{"name":"k8-node-sdk","private":true,"type":"module"}' >"$r/app/package.json"
cp "$clients" "$r/app/broker_clients.mjs"
image_trim "$r" usr/share/doc usr/share/man usr/share/locale

log "packing the OCI layout with umoci"
layout=$work/oci
image_pack "$layout" "$tag" "$r" "debootstrap $release nodejs + npm $npm_pkgs" node /app

image_done "$layout"
