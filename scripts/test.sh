#!/bin/sh
# test.sh - everything CI runs: dependencies, a -Werror build, unit tests (plain and under
# ASan+UBSan), a short fuzz run, the model engine, and the end-to-end suite against real
# QEMU VMs (docs/testing.md).
#
# Stages run one after another, but for two that start first and run in the background:
# the guest kernel (cached machine-wide, so built only on a fresh machine or after
# guest/kernel.config changes) and the test fixtures (python and node images, the npm
# clients; cached likewise). The end-to-end suite runs in lanes (tests/integration/
# lanes.py: E2E_LANES, default 2), the Docker API's files against a kosa8d built with
# ASan+UBSan. At the end a table gives each stage's wall time and the slowest tests.
#
#   PYTEST_ARGS="test_x.py ..."  only these end-to-end files, plain build, one pytest
#   FUZZ_SECONDS=15              each fuzz target's time
set -eu
# VMs, cgroups, network namespaces and apt-get want root: ask sudo when we are not.
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 || { echo "$0: run this as root" >&2; exit 1; }
	exec sudo -E "$0" "$@"
fi
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
report=$top/build/test-report
rm -rf "$report"
mkdir -p "$report"
stages=$report/stages.txt
py=/usr/bin/python3

# stage NAME CMD...: run CMD as one timed stage (a line "NAME START END RC" in $stages);
# a failed stage ends the run (the table is printed on the way out) unless $keep_going,
# when it returns the status.
stage() {
	name=$1
	shift
	echo "== $name: $*"
	s=$(date +%s)
	rc=0
	"$@" || rc=$?
	echo "$name $s $(date +%s) $rc" >>"$stages"
	[ "$rc" -eq 0 ] && return 0
	echo "== $name FAILED (exit $rc)" >&2
	[ -n "${keep_going:-}" ] && return "$rc"
	exit "$rc"
}
# bg NAME CMD...: the same in the background, output to $report/NAME.log.
bg() {
	name=$1
	shift
	(
		s=$(date +%s)
		rc=0
		"$@" >"$report/$name.log" 2>&1 || rc=$?
		echo "$name $s $(date +%s) $rc" >>"$stages"
	) &
}
# bg_wait NAME PID: wait for a background stage; its log when it failed.
bg_wait() {
	wait "$2" || true
	rc=$(awk -v n="$1" '$1 == n { print $4 }' "$stages")
	if [ "${rc:-1}" -ne 0 ]; then
		tail -40 "$report/$1.log" >&2
		echo "== $1 FAILED (log $report/$1.log)" >&2
		exit 1
	fi
}
trap '[ -f "$stages" ] && $py "$top/tests/report.py" "$report" || true' EXIT

stage deps ./scripts/deps.sh
bg kernel ./scripts/kernel.sh
kernel_pid=$!
fixtures() {
	./scripts/test-image.sh && ./scripts/node-image.sh &&
		$py scripts/k8cache.py npm clients && $py scripts/k8cache.py npm llama
}
bg fixtures fixtures
fixtures_pid=$!
# All but kosa8d's link, which waits for the guest image's digest (the "guest" stage).
stage build make -s -j2 WERROR=1 progs-early
stage unit sh -c "make -s -j2 WERROR=1 check-layers unit && $py -m pytest -q tests/tools"
stage san make -s -j2 WERROR=1 B=build-san SAN=1 unit
stage fuzz env FUZZ_SECONDS="${FUZZ_SECONDS:-15}" ./tests/fuzz/run.sh
# The model engine against llama.cpp (node-llama-cpp) and its server against the official
# openai and @anthropic-ai/sdk clients (npm sets of scripts/npm-pins, cached machine-wide).
stage model $py -m pytest -q tests/model --ignore=tests/model/test_bundle.py \
	--ignore=tests/model/test_pull.py
bg_wait kernel "$kernel_pid"
# The guest image, kosa8d, and the kosa8d built with ASan+UBSan that the Docker API's
# end-to-end files run against.
stage guest sh -c "make -s -j2 WERROR=1 all && make -s -j2 WERROR=1 B=build-san SAN=1 progs"
# The daemon's model and bundle verbs (they need kosa8d, so the guest).
stage bundle $py -m pytest -q tests/model/test_bundle.py tests/model/test_pull.py
bg_wait fixtures "$fixtures_pid"

cd tests/integration
if [ -n "${PYTEST_ARGS:-}" ]; then
	# shellcheck disable=SC2086
	stage e2e $py -m pytest -v --durations=20 --junitxml="$report/e2e.xml" $PYTEST_ARGS
	exit 0
fi
sanbin=$(mktemp -d /tmp/k8san-bin-XXXXXX)
cp "$top"/build/bin/* "$sanbin"/
cp "$top"/build-san/bin/kosa8d "$sanbin"/kosa8d
rm -f /tmp/k8san-asan.*
rc=0
keep_going=1 stage e2e $py lanes.py run --san-bin "$sanbin" --report "$report" || rc=$?
rm -rf "$sanbin"
if ls /tmp/k8san-asan.* >/dev/null 2>&1; then
	cat /tmp/k8san-asan.*
	echo "== kosa8d under ASan+UBSan reported the errors above" >&2
	exit 1
fi
exit "$rc"
