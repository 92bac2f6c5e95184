#!/bin/sh
# kernel.sh - build the guest kernel from Debian's linux-source-6.1, cached.
#
# The cache key is (linux-source package version, hash of guest/kernel.config,
# hash of this script), so a second run with the same inputs costs nothing.
# Prints the path of the built vmlinux on stdout.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${KOSA8_CACHE:-$top/build/cache}
tarball=/usr/src/linux-source-6.1.tar.xz
[ -r "$tarball" ] || { echo "kernel.sh: $tarball missing: run scripts/deps.sh" >&2; exit 1; }
ver=$(dpkg-query -W -f='${Version}' linux-source-6.1)
key=$(cat "$top/guest/kernel.config" "$0" | sha256sum | cut -c1-16)
out=$cache/kernel-$ver-$key
if [ -f "$out/vmlinux" ]; then echo "$out/vmlinux"; exit 0; fi
mkdir -p "$cache"
# One build at a time per cache (several build directories share it); the winner's
# result serves the others.
exec 9>"$cache/kernel.lock"
flock 9
if [ -f "$out/vmlinux" ]; then echo "$out/vmlinux"; exit 0; fi
work=$cache/kernel-build-$ver
if [ ! -f "$work/Makefile" ]; then
	rm -rf "$work" "$work.tmp"; mkdir -p "$work.tmp"
	echo "kernel.sh: unpacking linux-source $ver" >&2
	tar -xJf "$tarball" -C "$work.tmp" --strip-components=1
	mv "$work.tmp" "$work"
fi
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
echo "kernel.sh: building vmlinux on $(nproc) cores (first build takes ~5 min)" >&2
make -s -j"$(nproc)" vmlinux >&2
mkdir -p "$out.tmp"
cp vmlinux .config "$out.tmp/"
rm -rf "$out"; mv "$out.tmp" "$out"
echo "$out/vmlinux"
