#!/bin/sh
# check-layers.sh - the daemon's modules depend one way (docs/design.md, "The daemon's
# modules"): a module may include the header of a module on a lower layer, never a
# higher one. Run by `make check-layers` and scripts/test.sh; prints each edge that
# points up and fails if there is one not listed in ALLOWED below.
set -eu
cd "$(dirname "$0")/../src/daemon"

# layer of a module (file name without .c/.h)
layer() {
	case "$1" in
	log|cgroup|qmp|agentlink|guest|jail|audit|bundle_read|api_route|docker_route|fetch|interp_event) echo 0 ;;  # mechanism; api_route, docker_route: the handler contract, paths, pure; fetch: HTTP GETs; interp_event: the interpreter's wire, pure
	vm|sidecar|layers) echo 1 ;;         # processes and disks: QEMU, sidecars, layers
	daemon|accel) echo 2 ;;              # the daemon's context, settings; the probe
	record|guestaudit) echo 3 ;;         # a sandbox's record; its guest's audit budget
	egress|mounts|broker|secret|ports) echo 4 ;;  # a sandbox's parts: network, folders, broker (and its secrets), published ports
	sandbox|spare) echo 5 ;;             # a sandbox's lifecycle; its spare (rewind)
	checkpoint|exec|containers|archive|images|model|bundle|guestfetch|idle|interp) echo 6 ;;  # other resources; the release's guest image; the idle pause; the interpreter's contexts and cells
	docker_engine|docker_ctr|docker_build) echo 6 ;;  # Docker API containers, their engine sandbox, builds
	api|docker_api) echo 7 ;;            # routes: kosa8d.sock's, docker.sock's
	main) echo 8 ;;
	*) echo "check-layers: module '$1' has no layer; add it here and to docs/design.md" >&2
	   echo 99 ;;
	esac
}

# Upward edges that remain, each with its reason (docs/design.md says the same).
ALLOWED="
"

bad=0
for f in *.c *.h; do
	m=${f%.*}
	lm=$(layer "$m")
	[ "$lm" = 99 ] && bad=1
	for h in $(sed -n 's|^#include "daemon/\([a-z_]*\)\.h".*|\1|p' "$f"); do
		[ "$h" = "$m" ] && continue
		lh=$(layer "$h")
		[ "$lh" -le "$lm" ] && continue
		case "$ALLOWED" in
		*"
$f>$h.h
"*) echo "check-layers: known upward edge $f -> $h.h (layer $lm -> $lh)" ;;
		*) echo "check-layers: $f (layer $lm) includes daemon/$h.h (layer $lh):" \
			"dependencies run one way (docs/design.md)" >&2
		   bad=1 ;;
		esac
	done
done
exit $bad
