#!/bin/sh
# run-unit.sh - run each unit test binary, print its summary, add them up.
pass=0 fail=0 status=0
for t in "$@"; do
	out=$("$t" 2>&1); rc=$?
	printf '%s\n' "$out"
	line=$(printf '%s\n' "$out" | grep -E '^[^ ]+: [0-9]+ passed, [0-9]+ failed$' | tail -1)
	p=$(echo "$line" | sed -E 's/.* ([0-9]+) passed.*/\1/'); f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
	[ -n "$p" ] || { p=0; f=1; echo "$t: no summary (exit $rc)"; }
	[ "$rc" -eq 0 ] || { [ "$f" -gt 0 ] || f=1; status=1; }
	pass=$((pass + p)); fail=$((fail + f))
done
echo "unit: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && exit $status || exit 1
