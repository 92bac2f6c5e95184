#!/bin/sh
# run.sh - all benchmarks (make bench). Ratios are measured side by side in one run.
# Works from a fresh clone: installs the Debian packages (scripts/deps.sh), builds, and the
# benchmarks fetch what else they need (test images, node-llama-cpp) into the machine-wide
# cache (scripts/k8cache.py), as the tests do.
set -eu
# VMs, cgroups, network namespaces and apt-get want root: ask sudo when we are not.
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 || { echo "$0: run this as root" >&2; exit 1; }
	exec sudo -E "$0" "$@"
fi
cd "$(dirname "$0")"
../scripts/deps.sh
make -C .. -s -j2 B="${B:-build}" all
echo "== sandbox core (issue 2)"
/usr/bin/python3 core.py
echo "== from an empty machine to the first sandbox, from a release (issue 33)"
/usr/bin/python3 install.py
echo "== images from a registry (issue 3)"
/usr/bin/python3 pull.py
echo "== checkpoint, cold rewind, pause and resume, the spare's memory: the migration stream against the memory file (issues 6, 27)"
/usr/bin/python3 checkpoint.py
echo "== rewind through a spare against a cold rewind (issue 15)"
/usr/bin/python3 spare.py
echo "== fork and cold rewind, the migration stream against the memory file, and what ten forks hold (issues 15, 27)"
# (how many forks of one checkpoint a host holds: python3 forkdensity.py, not here: long)
/usr/bin/python3 fork.py
echo "== pause and resume: to disk against in memory (issue 15)"
/usr/bin/python3 pause.py
echo "== snapshot stores: push and pull against raw S3 copies, fork from a store against a local fork (issue 32)"
/usr/bin/python3 store.py
echo "== what an idle sandbox costs: TCG's cache sizes, then paused by the idle pause (issue 15)"
/usr/bin/python3 idle.py
echo "== idle CPU per guest kernel, RSS after a freed heap with and without free page reporting (issue 15)"
# IDLECPU_OLD_VMLINUX=<a kernel built before NO_HZ_IDLE> adds it side by side.
/usr/bin/python3 idlecpu.py
echo "== frame parsing and egress policy (issue 4)"
# bench/netparse.c against src/net's pure half (addr, pkt, dns, policy), nothing else.
NB=${B:-build}
case "$NB" in /*) ;; *) NB=../$NB ;; esac
mkdir -p "$NB/bench"
${CC:-cc} -O2 -std=gnu11 -D_GNU_SOURCE -I../src -o "$NB/bench/netparse" netparse.c \
	../src/net/addr.c ../src/net/pkt.c ../src/net/dns.c ../src/net/policy.c
"$NB/bench/netparse"
# The programs and guest image of $B (default build): KOSA8_BIN, unless given.
KOSA8_BIN=${KOSA8_BIN:-$NB/bin}
export KOSA8_BIN
echo "== QEMU's jail (issue 10)"
# The jail's own cost (spawn, one system call), then create-to-ready jailed against the
# same sandbox with config "jail": false.
${CC:-cc} -O2 -std=gnu11 -D_GNU_SOURCE -I../src -o "$NB/bench/jailcost" jailcost.c \
	../src/daemon/jail.c ../src/common/util.c -ljansson -lcrypto -pthread
"$NB/bench/jailcost"
/usr/bin/python3 jail.py
echo "== the image unpacker's jail (issue 34)"
# One layer unpacked in kosa8d's way before (in-process) and in a jailed worker, side by
# side (src/image/unpack_jail.c), on the python test image.
${CC:-cc} -O2 -std=gnu11 -D_GNU_SOURCE -I../src -o "$NB/bench/unpackjail" unpackjail.c \
	../src/image/*.c ../src/common/util.c ../src/common/sha.c ../src/common/jail.c \
	../src/common/worker.c ../src/common/sidecar_seccomp.c ../src/common/uarchive.c \
	-ljansson -lcrypto -lcurl -larchive -lseccomp -pthread
"$NB/bench/unpackjail" "$(../scripts/test-image.sh | tail -1)"
echo "== network egress (issue 4)"
# TCP guest -> host through kosa8-net against QEMU's own -netdev user, same VM.
/usr/bin/python3 net.py
echo "== shared folders (issue 5)"
# kosa8's FUSE-over-virtio-serial folders against virtio-9p of the same kind of folder.
/usr/bin/python3 mounts.py
echo "== local model engine against llama.cpp (issue 13)"
/usr/bin/python3 model.py
echo "== egress broker (issue 14)"
# kosa8-broker standalone: latency it adds, first streamed byte, 32 concurrent clients,
# against the same client talking to the same HTTPS upstream directly.
/usr/bin/python3 broker.py
# The official openai npm client inside a sandbox, through the broker and directly.
/usr/bin/python3 broker_node.py
echo "== copying files in and out of containers (issue 12's archive)"
/usr/bin/python3 cp.py
echo "== the Docker-compatible API against kosa8's own CLI (issue 12)"
/usr/bin/python3 dockerapi.py
echo "== the containerd shim: ctr run --rm against sandbox create + run + rm (issue 31)"
/usr/bin/python3 containerd.py
echo "== kosa8 mcp's run_code and run_cell against the CLI (issue 29)"
/usr/bin/python3 mcp.py
echo "== E2B's SDKs against kosa8's own CLI (issue 28)"
# Sandbox.create() + the first commands.run against sandbox create + run; runCode in a
# warm context against sandbox exec of the same code.
/usr/bin/python3 e2b.py
