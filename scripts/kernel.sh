#!/bin/sh
# kernel.sh - build the guest kernel from Debian's linux-source-6.1, cached machine-wide.
#
# The entry is kernel-<linux-source version>-<key> in the cache root (scripts/k8cache.py:
# $KOSA8_CACHE, else /var/cache/kosa8), key = hash of guest/kernel.config and this script,
# so every clone on the machine shares one build and a changed recipe builds a new one.
# The entry is checked against its sums before each use and written atomically. The
# unpacked source and its objects stay in <root>/work/ for the next (incremental) build.
# Prints the path of the built vmlinux on stdout.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
[ -x "$py" ] || py=python3
k8c() { "$py" "$top/scripts/k8cache.py" "$@"; }
tarball=/usr/src/linux-source-6.1.tar.xz
[ -r "$tarball" ] || { echo "kernel.sh: $tarball missing: run scripts/deps.sh" >&2; exit 1; }
ver=$(dpkg-query -W -f='${Version}' linux-source-6.1)

if [ "${1:-}" != --fill ]; then
	key=$(k8c key -f "$top/guest/kernel.config" -f "$0" -s "$ver")
	entry=$(k8c build "kernel-$ver" "$key" -- "$0" --fill)
	echo "$entry/vmlinux"
	exit 0
fi

# --fill (run by k8cache.py build): build into $K8CACHE_OUT.
: "${K8CACHE_OUT:?kernel.sh --fill is run by k8cache.py build}"
work=$(k8c root)/work/kernel-$ver
mkdir -p "$(dirname "$work")"
# One build in the work tree at a time (two recipes may want it at once).
exec 8>"$work.lock"
flock 8
# A build that did not finish may have left a torn object behind: start that tree afresh.
[ -e "$work.building" ] && { echo "kernel.sh: an earlier build did not finish: unpacking again" >&2; rm -rf "$work"; }
if [ ! -f "$work/Makefile" ]; then
	rm -rf "$work" "$work.tmp"; mkdir -p "$work.tmp"
	echo "kernel.sh: unpacking linux-source $ver" >&2
	tar -xJf "$tarball" -C "$work.tmp" --strip-components=1
	mv "$work.tmp" "$work"
fi
: >"$work.building"
cd "$work"
echo "kernel.sh: configuring (tinyconfig + guest/kernel.config)" >&2
make -s tinyconfig >/dev/null
./scripts/kconfig/merge_config.sh -m .config "$top/guest/kernel.config" >/dev/null
make -s olddefconfig >/dev/null
# Check that what we asked for survived (a dependency can silently drop it).
missing=
while IFS= read -r line; do
	case "$line" in CONFIG_*=y) grep -qx "$line" .config || missing="$missing ${line%%=*}";; esac
done < "$top/guest/kernel.config"
[ -z "$missing" ] || echo "kernel.sh: warning: not enabled:$missing" >&2
echo "kernel.sh: building vmlinux on $(nproc) cores (a first build takes 8-11 min on 2 cores)" >&2
make -s -j"$(nproc)" vmlinux >&2
cp vmlinux .config "$K8CACHE_OUT/"
rm -f "$work.building"
