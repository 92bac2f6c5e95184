#!/bin/sh
# test.sh - everything CI runs: dependencies, a -Werror build, unit tests (plain and under
# ASan+UBSan), a short fuzz run, and the end-to-end suite against real QEMU VMs.
set -eu
# VMs, cgroups, network namespaces and apt-get want root: ask sudo when we are not.
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 || { echo "$0: run this as root" >&2; exit 1; }
	exec sudo -E "$0" "$@"
fi
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
./scripts/deps.sh
t0=$(date +%s)
# The tests' images (Debian packages and npm: mostly downloads) build in the background
# while the guest kernel and the code compile; a test that needs one waits for its lock.
mkdir -p build
( ./scripts/test-image.sh && ./scripts/node-image.sh ) >build/test-images.log 2>&1 &
make -s -j2 WERROR=1 all
echo "== build: $(( $(date +%s) - t0 )) s"
make -s WERROR=1 check-layers unit
make -s WERROR=1 san
FUZZ_SECONDS=${FUZZ_SECONDS:-15} ./tests/fuzz/run.sh
echo "== unit + san + fuzz: $(( $(date +%s) - t0 )) s"
# The model engine against llama.cpp (node-llama-cpp, installed into build/node-ref on first
# use) and its server against the official openai and @anthropic-ai/sdk clients.
/usr/bin/python3 -m pytest -q "$top/tests/model"
echo "== unit + san + fuzz + model: $(( $(date +%s) - t0 )) s"
cd tests/integration
# The daemon's request paths that juggle references and threads the most (the Docker API,
# copying files, hijacked streams) run against kosa8d built with ASan+UBSan: a reference
# dropped twice corrupts the heap only now and then, and ASan sees it every time. They run
# only there, not also against the plain kosa8d (every other test covers that build): the
# suite's time in CI is bounded. The other binaries are the plain ones (the sidecars run
# under seccomp, the agent in the guest). PYTEST_ARGS (a hand-picked run) runs everything
# it names against the plain build.
asan_files="test_82_docker_frameworks.py test_88_docker_api.py test_89_docker_containers.py
	test_90_cp.py test_99_hostile_cp.py test_83_docker_build.py test_99_hostile_build.py
	test_83_docker_tty.py test_90_hostile_docker.py test_94_hostile_broker_docker.py
	test_90_hostile_docker_net.py test_99_hostile_docker_gaps.py"
if [ -n "${PYTEST_ARGS:-}" ]; then
	# shellcheck disable=SC2086
	/usr/bin/python3 -m pytest -v --durations=20 $PYTEST_ARGS
	echo "== end to end: $(( $(date +%s) - t0 )) s"
	exit 0
fi
ignore=""
for f in $asan_files; do ignore="$ignore --ignore=$f"; done
# shellcheck disable=SC2086
/usr/bin/python3 -m pytest -v --durations=30 $ignore
echo "== end to end (plain kosa8d): $(( $(date +%s) - t0 )) s"
make -C "$top" -s -j2 B=build-san SAN=1 progs
sanbin=$(mktemp -d /tmp/k8san-bin-XXXXXX)
cp "$top"/build/bin/* "$sanbin"/
cp "$top"/build-san/bin/kosa8d "$sanbin"/kosa8d
rm -f /tmp/k8san-asan.*
rc=0
# shellcheck disable=SC2086
KOSA8_BIN=$sanbin KOSA8_GUEST_DIR=$top/build/guest \
ASAN_OPTIONS=log_path=/tmp/k8san-asan:detect_leaks=0 \
UBSAN_OPTIONS=log_path=/tmp/k8san-asan:print_stacktrace=1 \
	/usr/bin/python3 -m pytest -v --durations=15 $asan_files || rc=$?
rm -rf "$sanbin"
if ls /tmp/k8san-asan.* >/dev/null 2>&1; then
	cat /tmp/k8san-asan.*
	echo "== kosa8d under ASan+UBSan reported the errors above" >&2
	rc=1
fi
[ "$rc" -eq 0 ] || exit "$rc"
echo "== end to end (kosa8d under ASan+UBSan): $(( $(date +%s) - t0 )) s"
echo "== all: $(( $(date +%s) - t0 )) s"
