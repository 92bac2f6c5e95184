#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# node-image.sh - build the test "k8-node-sdk:test" image, cached: Debian's nodejs and the
# official openai and @anthropic-ai/sdk npm packages, for the broker's tests (issue 14).
#
# debootstrap --variant=minbase --include=nodejs of Debian $RELEASE; the npm packages are
# installed on the host (`npm i -E`, exact versions below, no scripts run) into a
# directory that is copied into the image as /app/node_modules, next to
# tests/integration/broker_clients.mjs (/app/broker_clients.mjs); apt caches dropped;
# packed as one layer of an OCI image layout with umoci, working directory /app.
#
# Cache: ${KOSA8_CACHE:-build/cache}/node-image-<key>, key = hash of this script, lib-image.sh, the
# release and broker_clients.mjs; a second run prints the cached path at once. Must run as
# root (debootstrap). Prints the layout path on stdout; progress goes to stderr.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${KOSA8_CACHE:-$top/build/cache}
release=${KOSA8_TEST_RELEASE:-bookworm}
tag=test
clients=$top/tests/integration/broker_clients.mjs
npm_pkgs="openai@6.49.0 @anthropic-ai/sdk@1.15.0"
key=$( (cat "$0" "$top/scripts/lib-image.sh" "$clients"; echo "$release") | sha256sum | cut -c1-16)
out=$cache/node-image-$key

. "$top/scripts/lib-image.sh"

log() { echo "node-image.sh: $*" >&2; }

image_reuse
# Root, the tools, the Debian mirror this machine is configured with, a work directory.
image_begin node-image debootstrap umoci npm

log "npm i -E $npm_pkgs (on the host, no install scripts)"
mkdir -p "$work/app"
echo '{"name":"k8-node-sdk","private":true,"type":"module"}' >"$work/app/package.json"
(cd "$work/app" && npm i -E --no-audit --no-fund --ignore-scripts --omit=dev $npm_pkgs \
	>"$work/npm.log" 2>&1) || { tail -20 "$work/npm.log" >&2; exit 1; }

log "debootstrap $release with nodejs from $mirror (takes ~1 min)"
debootstrap --variant=minbase --include=nodejs "$release" "$work/rootfs" "$mirror" \
	>"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; exit 1; }

r=$work/rootfs
mkdir -p "$r/app"
cp -a "$work/app/node_modules" "$work/app/package.json" "$r/app/"
cp "$clients" "$r/app/broker_clients.mjs"
image_trim "$r" usr/share/doc usr/share/man usr/share/locale

log "packing the OCI layout with umoci"
layout=$work/oci
image_pack "$layout" "$tag" "$r" "debootstrap $release nodejs + npm $npm_pkgs" node /app

image_done "$layout"
