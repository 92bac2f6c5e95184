#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# dist.sh - a release of this build in $B/dist (run by `make dist`; docs/install.md):
#
#   kosa8-VER-linux-x86_64.tar.gz  `make install` for PREFIX=/usr/local, stripped: the
#                                  programs, the guest image, man pages, completions, the
#                                  unit and its sysusers/tmpfiles entries, the docs, and
#                                  DEPENDS (the Debian packages kosa8 needs to run)
#   guest/                         the guest image's files, which kosa8d fetches when it
#                                  has none (its manifest's SHA-256 is built into kosa8d)
#   install.sh                     scripts/install.sh with this release's version, address
#                                  and (when signed) verifying key filled in
#   SHA256SUMS                     of all of the above
#   SHA256SUMS.sig                 with SIGN_KEY (an ed25519 private key, PEM): its
#                                  signature, base64; the key itself never enters $B/dist
#
# RELEASE_URL: where the release's files will be published (default
# https://kosa8.com/releases/VER, where this version's kosa8d looks for its guest).
# DIST_OUT: another folder than $B/dist (a test's).
# The tarball is reproducible: names sorted, mtimes, owners and gzip's name/time fixed.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
B=${B:-build}
case $B in /*) ;; *) B=$top/$B ;; esac
ver=$(sed -n 's/^#define KOSA8_VERSION "\(.*\)"$/\1/p' "$top/src/common/version.h")
[ -n "$ver" ] || { echo "dist.sh: no KOSA8_VERSION in src/common/version.h" >&2; exit 1; }
url=${RELEASE_URL:-https://kosa8.com/releases/$ver}
name=kosa8-$ver-linux-x86_64
out=${DIST_OUT:-$B/dist}
stage=$out/.stage
prefix=/usr/local

rm -rf "$out"
mkdir -p "$stage" "$out/guest"
make -s -C "$top" B="$B" install DESTDIR="$stage/root" PREFIX="$prefix" STRIP=1 >/dev/null
tree=$stage/root$prefix

# The Debian packages of the programs kosa8d runs, and of each library the installed
# programs link directly (apt brings what those need; libc6 every machine has).
deps="qemu-system-x86 qemu-utils erofs-utils e2fsprogs ca-certificates"
libs=$(for f in "$tree"/lib/kosa8/bin/*; do
	for so in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
		ldd "$f" | sed -n "s|^[[:space:]]*$so => \(/[^ ]*\) (.*|\1|p"
	done
done | sort -u)
for l in $libs; do
	p=$(dpkg-query -S "$(realpath "$l")" 2>/dev/null || dpkg-query -S "$l" 2>/dev/null) ||
		{ echo "dist.sh: no Debian package holds $l" >&2; exit 1; }
	p=${p%%:*}
	case " $deps libc6 " in *" $p "*) ;; *) deps="$deps $p" ;; esac
done
printf '%s\n' $deps > "$tree/DEPENDS"

cp "$top/scripts/install.sh" "$tree/install.sh"
(cd "$tree" && tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
	--transform "flags=r;s|^\.|$name|" -cf - ./) | gzip -9n > "$out/$name.tar.gz"
cp "$B"/guest/manifest.json "$B"/guest/vmlinux "$B"/guest/initramfs.cpio "$out/guest/"

# install.sh knows its release: version, address, tarball, and the key that signed it.
key=
if [ -n "${SIGN_KEY:-}" ]; then
	key=$(openssl pkey -in "$SIGN_KEY" -pubout | sed '1d;$d' | tr -d '\n')
	[ -n "$key" ] || { echo "dist.sh: no public key from $SIGN_KEY" >&2; exit 1; }
fi
sed -e "s|^KOSA8_VERSION=.*|KOSA8_VERSION=$ver|" \
    -e "s|^KOSA8_RELEASE_URL=.*|KOSA8_RELEASE_URL=$url|" \
    -e "s|^KOSA8_RELEASE_KEY=.*|KOSA8_RELEASE_KEY=$key|" \
    "$top/scripts/install.sh" > "$out/install.sh"
chmod 0755 "$out/install.sh"

(cd "$out" && sha256sum "$name.tar.gz" install.sh guest/manifest.json guest/vmlinux \
	guest/initramfs.cpio > SHA256SUMS)
if [ -n "${SIGN_KEY:-}" ]; then
	openssl pkeyutl -sign -rawin -inkey "$SIGN_KEY" -in "$out/SHA256SUMS" |
		base64 -w0 > "$out/SHA256SUMS.sig"
	echo >> "$out/SHA256SUMS.sig"
fi
rm -rf "$stage"
echo "dist.sh: $out: $name.tar.gz ($(du -h "$out/$name.tar.gz" | cut -f1)), guest/," \
	"install.sh, SHA256SUMS${SIGN_KEY:+ (signed)}" >&2
echo "$out"
