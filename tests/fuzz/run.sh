#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# run.sh - build every tests/fuzz/fuzz_*.c as a libFuzzer target (ASan+UBSan) and run each
# for a while; fail if any of them crashes, leaks, times out or does not build.
#
#   FUZZ_SECONDS=20      how long each target runs
#   FUZZ_JOBS=N          targets run N at a time (default: the number of CPUs, at most 4)
#   FUZZ_TARGETS="..."   only these targets (names like fuzz_proto); default: all
#   FUZZ_ARGS="..."      extra libFuzzer flags, e.g. "-max_len=70000"
#   FUZZ_LIBS="..."      extra link flags for the targets
#   B=build              build directory (objects, binaries, corpora under $B/fuzz)
#
# Every target is linked against one archive of all of src/common, src/image, src/store, src/net, src/fs,
# src/model, src/broker, src/docker, src/e2b and src/shim (with the shim's generated protobuf-c code), the daemon's bundle reader and its API matcher
# (src/daemon/api_route.c, pure), the interpreter's event lines (interp_event.c, pure), the
# agent's tar reader (src/agent/tar.c, pure) and kosa8 mcp's JSON-RPC reader (src/cli/mcp_rpc.c, pure)
# (no main.c), so it pulls in only the objects it uses. Corpora live in
# $B/fuzz/corpus-<name> and grow from run to run; tests/fuzz/seeds/<name>/, when present,
# seeds them. Crash inputs land in $B/fuzz/crashes-<name>/; reproduce one with
#   $B/fuzz/<name> $B/fuzz/crashes-<name>/crash-...
set -u
cd "$(dirname "$0")/../.." || exit 1

B=${B:-build}
OUT=$B/fuzz
SECS=${FUZZ_SECONDS:-20}
CC=${FUZZ_CC:-clang}
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
CFLAGS="-std=gnu11 -D_GNU_SOURCE -Isrc -I$B/gen/shim -pthread -g -O1 $SAN"
LIBS="-ljansson -larchive -lssl -lcrypto -lcurl -lzstd -lprotobuf-c -lseccomp -lpthread -lm ${FUZZ_LIBS:-}"

command -v "$CC" >/dev/null 2>&1 || { echo "fuzz: $CC not found (libFuzzer needs clang)"; exit 1; }
mkdir -p "$OUT/obj" || exit 1

jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$jobs" -gt 4 ] && jobs=4
[ "$jobs" -ge 1 ] || jobs=1

# in_lanes FUNC ITEM...: FUNC ITEM for every item, $jobs at a time (lane k takes items
# k, k+jobs, ...); returns when all are done. FUNC reports through files, not its status.
in_lanes() {
	fn=$1
	shift
	lane=0
	while [ "$lane" -lt "$jobs" ]; do
		(
			i=0
			for item in "$@"; do
				[ $((i % jobs)) -eq "$lane" ] && "$fn" "$item"
				i=$((i + 1))
			done
		) &
		lane=$((lane + 1))
	done
	wait
}

objname() { echo "$OUT/obj/$(echo "$1" | sed 's|/|_|g; s|\.c$|.o|')"; }

# compile_one SRC: its instrumented object, or none and a log saying why.
compile_one() {
	obj=$(objname "$1")
	$CC $CFLAGS -fsanitize=fuzzer-no-link -c -o "$obj" "$1" 2>"$obj.log" || rm -f "$obj"
}

# The shim's messages are C that protoc-c generates from src/shim/proto at build time.
make -s B="$B" "$B/gen/shim/.stamp" || exit 1

# Library objects, instrumented for coverage but without libFuzzer's main. A file that
# does not compile is skipped with a warning: a target that needs it then fails to link.
srcs=""
stale=""
for src in src/common/*.c src/image/*.c src/store/*.c src/net/*.c src/fs/*.c src/model/*.c src/broker/*.c src/docker/*.c src/e2b/*.c \
	   src/daemon/bundle_read.c src/daemon/api_route.c src/daemon/interp_event.c src/agent/tar.c src/cli/mcp_rpc.c \
	   src/shim/*.c "$B"/gen/shim/*.pb-c.c; do
	[ -f "$src" ] || continue
	case "$src" in */main.c) continue ;; esac
	srcs="$srcs $src"
	obj=$(objname "$src")
	if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] || \
	   [ -n "$(find src -name '*.h' -newer "$obj" 2>/dev/null | head -1)" ]; then
		rm -f "$obj"
		stale="$stale $src"
	fi
done
# shellcheck disable=SC2086
in_lanes compile_one $stale
objs=""
for src in $srcs; do
	obj=$(objname "$src")
	if [ ! -f "$obj" ]; then
		echo "fuzz: warning: $src does not compile, left out (see $obj.log)"
		continue
	fi
	objs="$objs $obj"
done
rm -f "$OUT/libk8fuzz.a"
# shellcheck disable=SC2086
ar rcs "$OUT/libk8fuzz.a" $objs || exit 1

# Build every target, then run them $jobs at a time: each run is one process, so on a
# 2-core machine two at a time halve the wall time at the same fuzzing per target.
link_one() {
	# shellcheck disable=SC2086
	$CC $CFLAGS -fsanitize=fuzzer -o "$OUT/$1" "tests/fuzz/$1.c" "$OUT/libk8fuzz.a" $LIBS \
		2>"$OUT/$1.build.log" || rm -f "$OUT/$1"
}
status=0
wanted=""
for t in tests/fuzz/fuzz_*.c; do
	[ -f "$t" ] || continue
	name=$(basename "$t" .c)
	if [ -n "${FUZZ_TARGETS:-}" ]; then
		case " $FUZZ_TARGETS " in *" $name "*) ;; *) continue ;; esac
	fi
	rm -f "$OUT/$name"
	wanted="$wanted $name"
done
# shellcheck disable=SC2086
in_lanes link_one $wanted
names=""
for name in $wanted; do
	if [ ! -f "$OUT/$name" ]; then
		echo "fuzz: $name: FAILED to build"
		sed 's/^/  /' "$OUT/$name.build.log" | head -20
		status=1
		continue
	fi
	names="$names $name"
done

# run_one NAME: fuzz one built target; its verdict goes to $OUT/NAME.result (one line,
# "ok" or "FAILED", then what to print), read back in order once all have run.
run_one() {
	name=$1
	bin="$OUT/$name"
	corpus="$OUT/corpus-$name"
	crashes="$OUT/crashes-$name"
	mkdir -p "$corpus" "$crashes"
	seeds=""
	[ -d "tests/fuzz/seeds/$name" ] && seeds="tests/fuzz/seeds/$name"
	# Inputs as big as the format allows where big inputs reach other code: a frame
	# stream of several full frames, FUSE writes of 128 KiB, layers and archives with a
	# few members of some size. libFuzzer's default (the largest seed) is too small there.
	case "$name" in
	fuzz_proto|fuzz_agentlink) maxlen=600000 ;;
	fuzz_fsreq|fuzz_ttrpc) maxlen=300000 ;;
	fuzz_frame) maxlen=70000 ;;
	fuzz_unpack|fuzz_load|fuzz_bundle|fuzz_tar) maxlen=200000 ;;
	*) maxlen=0 ;;
	esac
	# shellcheck disable=SC2086
	"$bin" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
		-max_len="$maxlen" -artifact_prefix="$crashes/" ${FUZZ_ARGS:-} "$corpus" $seeds \
		>"$OUT/$name.log" 2>&1
	rc=$?
	stats=$(grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' \
		"$OUT/$name.log" | sed 's/^stat:://' | tr -s ' \n' ' ')
	if [ "$rc" -ne 0 ]; then
		{
			echo "FAILED"
			echo "fuzz: $name: FAILED (exit $rc); log $OUT/$name.log, inputs in $crashes/"
			grep -E 'ERROR|SUMMARY|runtime error|==[0-9]+==' "$OUT/$name.log" | head -10 |
				sed 's/^/  /'
		} >"$OUT/$name.result"
	else
		printf 'ok\nfuzz: %s: ok (%s)\n' "$name" "$stats" >"$OUT/$name.result"
	fi
}

set -- $names
echo "fuzz: running $# targets ${SECS}s each, $jobs at a time"
for name in $names; do rm -f "$OUT/$name.result"; done
# shellcheck disable=SC2086
in_lanes run_one $names
ran=0
for name in $names; do
	ran=$((ran + 1))
	if [ ! -f "$OUT/$name.result" ]; then
		echo "fuzz: $name: FAILED (no result)"
		status=1
		continue
	fi
	[ "$(head -1 "$OUT/$name.result")" = ok ] || status=1
	tail -n +2 "$OUT/$name.result"
done
if [ "$ran" -eq 0 ]; then
	echo "fuzz: FAILED: no target ran (FUZZ_TARGETS=${FUZZ_TARGETS:-all})"
	exit 1
fi
exit $status
