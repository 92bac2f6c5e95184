#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# run.sh - build every tests/fuzz/fuzz_*.c as a libFuzzer target (ASan+UBSan) and run each
# for a while; fail if any of them crashes, leaks, times out or does not build.
#
#   FUZZ_SECONDS=20      how long each target runs
#   FUZZ_TARGETS="..."   only these targets (names like fuzz_proto); default: all
#   FUZZ_ARGS="..."      extra libFuzzer flags, e.g. "-max_len=70000"
#   FUZZ_LIBS="..."      extra link flags for the targets
#   B=build              build directory (objects, binaries, corpora under $B/fuzz)
#
# Every target is linked against one archive of all of src/common, src/image, src/net, src/fs,
# src/model, src/broker and src/docker, the daemon's bundle reader and its API matcher
# (src/daemon/api_route.c, pure), docker.sock's path rules (docker_route.c, pure) and the
# agent's tar reader (src/agent/tar.c, pure)
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
CFLAGS="-std=gnu11 -D_GNU_SOURCE -Isrc -pthread -g -O1 $SAN"
LIBS="-ljansson -larchive -lssl -lcrypto -lcurl -lpthread -lm ${FUZZ_LIBS:-}"

command -v "$CC" >/dev/null 2>&1 || { echo "fuzz: $CC not found (libFuzzer needs clang)"; exit 1; }
mkdir -p "$OUT/obj" || exit 1

# Library objects, instrumented for coverage but without libFuzzer's main. A file that
# does not compile is skipped with a warning: a target that needs it then fails to link.
objs=""
for src in src/common/*.c src/image/*.c src/net/*.c src/fs/*.c src/model/*.c src/broker/*.c src/docker/*.c \
	   src/daemon/bundle_read.c src/daemon/api_route.c src/daemon/docker_route.c src/agent/tar.c; do
	[ -f "$src" ] || continue
	case "$src" in */main.c) continue ;; esac
	obj="$OUT/obj/$(echo "$src" | sed 's|/|_|g; s|\.c$|.o|')"
	if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] || \
	   [ -n "$(find src -name '*.h' -newer "$obj" 2>/dev/null | head -1)" ]; then
		if ! $CC $CFLAGS -fsanitize=fuzzer-no-link -c -o "$obj" "$src" 2>"$obj.log"; then
			echo "fuzz: warning: $src does not compile, left out (see $obj.log)"
			rm -f "$obj"
			continue
		fi
	fi
	objs="$objs $obj"
done
rm -f "$OUT/libk8fuzz.a"
# shellcheck disable=SC2086
ar rcs "$OUT/libk8fuzz.a" $objs || exit 1

status=0
ran=0
for t in tests/fuzz/fuzz_*.c; do
	[ -f "$t" ] || continue
	name=$(basename "$t" .c)
	if [ -n "${FUZZ_TARGETS:-}" ]; then
		case " $FUZZ_TARGETS " in *" $name "*) ;; *) continue ;; esac
	fi
	bin="$OUT/$name"
	# shellcheck disable=SC2086
	if ! $CC $CFLAGS -fsanitize=fuzzer -o "$bin" "$t" "$OUT/libk8fuzz.a" $LIBS \
	     2>"$OUT/$name.build.log"; then
		echo "fuzz: $name: FAILED to build"
		sed 's/^/  /' "$OUT/$name.build.log" | head -20
		status=1
		continue
	fi
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
	fuzz_fsreq) maxlen=300000 ;;
	fuzz_frame) maxlen=70000 ;;
	fuzz_unpack|fuzz_load|fuzz_bundle|fuzz_tar) maxlen=200000 ;;
	*) maxlen=0 ;;
	esac
	echo "fuzz: $name: running ${SECS}s (corpus $corpus${seeds:+, seeds $seeds})"
	# shellcheck disable=SC2086
	"$bin" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
		-max_len="$maxlen" -artifact_prefix="$crashes/" ${FUZZ_ARGS:-} "$corpus" $seeds \
		>"$OUT/$name.log" 2>&1
	rc=$?
	ran=$((ran + 1))
	stats=$(grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' \
		"$OUT/$name.log" | sed 's/^stat:://' | tr -s ' \n' ' ')
	if [ "$rc" -ne 0 ]; then
		echo "fuzz: $name: FAILED (exit $rc); log $OUT/$name.log, inputs in $crashes/"
		grep -E 'ERROR|SUMMARY|runtime error|==[0-9]+==' "$OUT/$name.log" | head -10 |
			sed 's/^/  /'
		status=1
	else
		echo "fuzz: $name: ok ($stats)"
	fi
done
if [ "$ran" -eq 0 ]; then
	echo "fuzz: FAILED: no target ran (FUZZ_TARGETS=${FUZZ_TARGETS:-all})"
	exit 1
fi
exit $status
