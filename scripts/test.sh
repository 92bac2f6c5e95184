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
/usr/bin/python3 -m pytest -v ${PYTEST_ARGS:-}
echo "== all: $(( $(date +%s) - t0 )) s"
