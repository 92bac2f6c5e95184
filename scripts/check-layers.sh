#!/bin/sh
# check-layers.sh - the daemon's modules depend one way (docs/design.md, "The daemon's
# modules"): a module may include the header of a module on a lower layer, never a
# higher one, and no two modules depend on each other, not even on one layer (no cycle
# at all). Run by `make check-layers` and scripts/test.sh; prints each edge that points
# up and each cycle, and fails if there is one not listed in ALLOWED below.
set -eu
cd "$(dirname "$0")/../src/daemon"

# layer of a module (file name without .c/.h)
layer() {
	case "$1" in
	log|cgroup|qmp|agentlink|guest|jail|audit|bundle_read|api_route|fetch|interp_event) echo 0 ;;  # mechanism; api_route: the handler contract, paths, pure; fetch: HTTP GETs; interp_event: the interpreter's wire, pure
	vm|memfile|sidecar|layers) echo 1 ;; # processes and disks: QEMU, its RAM as a file, sidecars, layers
	daemon|accel) echo 2 ;;              # the daemon's context, settings; the probe
	record|guestaudit) echo 3 ;;         # a sandbox's record; its guest's audit budget
	egress|mounts|broker|secret|ports|e2b_keys) echo 4 ;;  # a sandbox's parts: network, folders, broker (and its secrets), published ports; the E2B API's keys
	boot) echo 5 ;;                      # a sandbox's VM: spawn, connect, adopt, kill
	sandbox|spare) echo 6 ;;             # a sandbox's lifecycle; its spare (rewind)
	checkpoint|exec|containers|archive|images|model|bundle|guestfetch|idle|slots|secret_api|interp|store) echo 7 ;;  # other resources; the release's guest image; the idle pause; image slots; the secrets' routes; the interpreter's contexts and cells; snapshot stores
	docker_engine|docker_int|docker_ctr|docker_run|docker_logs|docker_exec|docker_stats|docker_build|docker_images|docker_system) echo 7 ;;  # Docker API: containers (records, run, logs, exec, stats; docker_int.h their private header), their engine sandbox, builds, images, system
	e2b_box|e2b_ctl|e2b_envd|e2b_fs|e2b_interp) echo 7 ;;  # E2B sandboxes, their control plane, envd, the interpreter
	api|docker_api|e2b_api) echo 8 ;;    # routes: kosa8d.sock's, docker.sock's, the E2B API's
	main) echo 9 ;;
	*) echo "check-layers: module '$1' has no layer; add it here and to docs/design.md" >&2
	   echo 99 ;;
	esac
}

# Upward edges that remain, each with its reason (docs/design.md says the same).
ALLOWED="
"
# Modules of a cycle that remains, each with its reason (none: the last one, sandbox and
# spare, went when boot.c took the VM's start and connection below both, issue 26).
ALLOWED_CYCLE=""

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
# Cycles, on one layer too: tsort names the modules of each loop it meets.
edges=$(for f in *.c *.h; do
	m=${f%.*}
	for h in $(sed -n 's|^#include "daemon/\([a-z_]*\)\.h".*|\1|p' "$f"); do
		[ "$h" = "$m" ] || echo "$m $h"
	done
done | sort -u)
loops=$(echo "$edges" | tsort 2>&1 >/dev/null | sed -n 's/^tsort: \([a-z_]*\)$/\1/p' | tr '\n' ' ')
for m in $loops; do
	case " $ALLOWED_CYCLE " in
	*" $m "*) echo "check-layers: known cycle through $m (docs/design.md)" ;;
	*) echo "check-layers: $m is in a cycle of includes (modules that depend on each" \
		"other): move the shared part below both (docs/design.md)" >&2
	   bad=1 ;;
	esac
done
exit $bad
