#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# install.sh - install a kosa8 release on this machine (docs/install.md):
#
#   curl -fsSL https://kosa8.com/install.sh | sh
#   sh install.sh [--url URL | --file TARBALL] [--prefix DIR] [--key PEM] [--no-guest]
#                 [--no-service] [--uninstall]
#
# 1. fetches the release's SHA256SUMS (and SHA256SUMS.sig) and its tarball, as the user
#    who runs this, into a temporary folder;
# 2. checks the signature with the release key built into this script (when it has one:
#    `make dist` fills it in), then the tarball against SHA256SUMS; refuses anything else
#    before a byte of the tarball is unpacked;
# 3. installs the Debian packages the release needs at run time (its DEPENDS; apt-get only
#    for what is missing, from apt's cache first);
# 4. puts the release in PREFIX (default /usr/local): lib/kosa8 (programs, guest image),
#    bin/kosa8, man pages, completions, the systemd unit, its sysusers and tmpfiles entries;
# 5. creates the group kosa8 (its members may use kosa8d: as good as root for sandboxes,
#    as the docker group is) and adds the user who ran this to it;
# 6. enables kosa8.service, and starts it when systemd runs the machine.
#
# Root's steps go through sudo when this runs as another user. KOSA8_OFFLINE=1: nothing is
# fetched (--file only; apt-get only from its cache).
set -eu
umask 022       # what it unpacks and installs keeps the release's modes (0755, 0644)

# ---- this release: filled in by `make dist` (scripts/dist.sh); empty in a checkout ----
KOSA8_VERSION=
KOSA8_RELEASE_URL=
KOSA8_RELEASE_KEY=
# ----

prefix=/usr/local
url=
file=
keyfile=
no_guest=
no_service=
uninstall=
home=/var/lib/kosa8
start=$(date +%s)

say() { echo "install.sh: $*" >&2; }
die() { say "$*"; exit 1; }
offline() { [ -n "${KOSA8_OFFLINE:-}" ] && [ "${KOSA8_OFFLINE:-}" != 0 ]; }

while [ $# -gt 0 ]; do
	case $1 in
	--url) url=${2:?--url needs a URL}; shift ;;
	--url=*) url=${1#--url=} ;;
	--file) file=${2:?--file needs a path}; shift ;;
	--file=*) file=${1#--file=} ;;
	--prefix) prefix=${2:?--prefix needs a folder}; shift ;;
	--prefix=*) prefix=${1#--prefix=} ;;
	--key) keyfile=${2:?--key needs a file}; shift ;;
	--key=*) keyfile=${1#--key=} ;;
	--no-guest) no_guest=1 ;;
	--no-service) no_service=1 ;;
	--uninstall) uninstall=1 ;;
	-h|--help) sed -n '3,24p' "$0" 2>/dev/null | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
	shift
done
case $prefix in /*) ;; *) die "--prefix must be an absolute path" ;; esac
pkglib=$prefix/lib/kosa8

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 || die "run this as root, or install sudo"
	SUDO=sudo
fi
as_root() { $SUDO "$@"; }

if [ -n "$uninstall" ]; then
	[ -f "$pkglib/FILES" ] || die "no kosa8 installed by install.sh in $prefix ($pkglib/FILES)"
	if command -v systemctl >/dev/null 2>&1; then
		[ -d /run/systemd/system ] && as_root systemctl stop kosa8.service || true
		as_root systemctl disable kosa8.service 2>/dev/null || true
	fi
	while IFS= read -r f; do
		as_root rm -f "$prefix/$f"
	done < "$pkglib/FILES"
	as_root rm -rf "$pkglib" "$prefix/share/doc/kosa8"
	say "kosa8 removed from $prefix; its state ($home) and the group kosa8 are kept"
	exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

download() {   # URL FILE
	if command -v curl >/dev/null 2>&1; then
		curl -fsSL --proto '=http,https' -o "$2" "$1"
	elif command -v wget >/dev/null 2>&1; then
		wget -q -O "$2" "$1"
	else
		die "neither curl nor wget is installed"
	fi
}

apt_install() {   # PACKAGE... (those not installed yet)
	missing=
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
			missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	command -v apt-get >/dev/null 2>&1 || die "apt-get is needed to install:$missing"
	say "installing Debian packages:$missing"
	if offline; then
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			--no-install-recommends --no-download $missing >&2 && return 0
		die "KOSA8_OFFLINE is set and apt's cache lacks some of:$missing"
	fi
	# apt's lists as they are first (a machine that has the packages cached), then fresh.
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		$missing >&2 2>/dev/null && return 0
	as_root apt-get update -q >&2
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		$missing >&2
}

# ---- 1. the release's files ----
base=
if [ -n "$file" ]; then
	[ -f "$file" ] || die "$file: no such file"
	dir=$(cd "$(dirname "$file")" && pwd)
	name=$(basename "$file")
	cp "$dir/SHA256SUMS" "$tmp/SHA256SUMS" 2>/dev/null ||
		die "$dir/SHA256SUMS is missing: a release's tarball comes with it"
	cp "$dir/SHA256SUMS.sig" "$tmp/SHA256SUMS.sig" 2>/dev/null || true
	cp "$file" "$tmp/$name"
else
	offline && die "KOSA8_OFFLINE is set: nothing is fetched; install from a file: --file TARBALL"
	[ -n "$url" ] || url=$KOSA8_RELEASE_URL
	[ -n "$url" ] || die "which release? --url URL (its folder or tarball) or --file TARBALL"
	case $url in http://*|https://*) ;; *) die "--url must be http:// or https://" ;; esac
	case $url in
	*.tar.gz) base=${url%/*}; name=${url##*/} ;;
	*) base=${url%/}; name= ;;
	esac
	say "fetching $base/SHA256SUMS"
	download "$base/SHA256SUMS" "$tmp/SHA256SUMS" || die "cannot fetch $base/SHA256SUMS"
	download "$base/SHA256SUMS.sig" "$tmp/SHA256SUMS.sig" 2>/dev/null || rm -f "$tmp/SHA256SUMS.sig"
	[ -n "$name" ] || name=$(awk '$2 ~ /^kosa8-.*-linux-x86_64\.tar\.gz$/ { print $2; exit }' \
		"$tmp/SHA256SUMS")
	[ -n "$name" ] || die "$base/SHA256SUMS names no kosa8 tarball"
fi
case $name in
kosa8-*-linux-x86_64.tar.gz) ;;
*) die "$name is not a kosa8 release tarball (kosa8-VERSION-linux-x86_64.tar.gz)" ;;
esac

# ---- 2. signature, then checksum: nothing is unpacked before both hold ----
key=$KOSA8_RELEASE_KEY
if [ -n "$keyfile" ]; then
	key=$(sed '1d;$d' "$keyfile" | tr -d '\n')
	[ -n "$key" ] || die "$keyfile holds no PEM key"
fi
if [ -n "$key" ]; then
	[ -s "$tmp/SHA256SUMS.sig" ] || die "the release has no SHA256SUMS.sig; this install.sh " \
		"checks releases signed with its key: refusing; nothing was installed"
	command -v openssl >/dev/null 2>&1 || apt_install openssl
	printf -- '-----BEGIN PUBLIC KEY-----\n%s\n-----END PUBLIC KEY-----\n' "$key" > "$tmp/key.pem"
	base64 -d "$tmp/SHA256SUMS.sig" > "$tmp/sig.bin" 2>/dev/null ||
		die "SHA256SUMS.sig is not base64: refusing; nothing was installed"
	openssl pkeyutl -verify -pubin -inkey "$tmp/key.pem" -rawin -in "$tmp/SHA256SUMS" \
		-sigfile "$tmp/sig.bin" >/dev/null 2>&1 ||
		die "SHA256SUMS is not signed by this release's key: refusing; nothing was installed"
	say "SHA256SUMS: signature verified"
else
	say "WARNING: this install.sh knows no release key (a checkout's; --key PEM gives one):" \
		"only the checksums are checked"
fi
want=$(awk -v n="$name" '$2 == n || $2 == "*" n { print $1; exit }' "$tmp/SHA256SUMS")
[ -n "$want" ] || die "SHA256SUMS has no line for $name"
if [ -z "$file" ]; then
	say "fetching $base/$name"
	download "$base/$name" "$tmp/$name" || die "cannot fetch $base/$name"
fi
have=$(sha256sum "$tmp/$name" | cut -c1-64)
[ "$have" = "$want" ] || die "$name has SHA-256 $have, SHA256SUMS says $want: refusing;" \
	"nothing was installed"
say "$name: SHA-256 matches SHA256SUMS"
mkdir "$tmp/x"
tar -xpzf "$tmp/$name" -C "$tmp/x" --no-same-owner
src=$tmp/x/${name%.tar.gz}
[ -x "$src/lib/kosa8/bin/kosa8d" ] && [ -f "$src/DEPENDS" ] || die "$name lacks lib/kosa8 or DEPENDS"

# ---- 3. what kosa8 needs at run time ----
deps=$(tr -cs 'a-z0-9.+-' ' ' < "$src/DEPENDS")
# shellcheck disable=SC2086
apt_install $deps

# ---- 4. the files: lib/kosa8 swapped in whole, the rest merged ----
[ -n "$no_guest" ] && rm -rf "$src/lib/kosa8/guest"
cp "$src/install.sh" "$src/lib/kosa8/install.sh"
(cd "$src" && find bin share lib -path lib/kosa8 -prune -o \( -type f -o -type l \) -print) \
	> "$src/lib/kosa8/FILES"
if [ "$prefix" != /usr/local ]; then
	sed -i "s|/usr/local/lib/kosa8|$pkglib|g" "$src/lib/systemd/system/kosa8.service"
fi
as_root mkdir -p "$prefix/lib"
as_root rm -rf "$pkglib.new" "$pkglib.old"
as_root cp -R "$src/lib/kosa8" "$pkglib.new"
as_root chown -R 0:0 "$pkglib.new"
[ -e "$pkglib" ] && as_root mv "$pkglib" "$pkglib.old"
as_root mv "$pkglib.new" "$pkglib"
as_root rm -rf "$pkglib.old"
(cd "$src" && tar -cf - --owner=0 --group=0 bin share lib/systemd lib/sysusers.d lib/tmpfiles.d) |
	as_root tar -xf - -C "$prefix" --no-same-owner
say "installed kosa8 ${KOSA8_VERSION:-$name} in $prefix ($pkglib)"

if [ -n "$no_service" ]; then
	say "done in $(( $(date +%s) - start )) s (--no-service: no group, no service)"
	exit 0
fi

# ---- 5. the group, the home ----
if ! getent group kosa8 >/dev/null 2>&1; then
	if command -v systemd-sysusers >/dev/null 2>&1; then
		as_root systemd-sysusers "$prefix/lib/sysusers.d/kosa8.conf"
	else
		as_root groupadd --system kosa8
	fi
	say "created the group kosa8"
fi
user=
[ -n "$SUDO" ] && user=$(id -un)
[ -z "$SUDO" ] && [ -n "${SUDO_USER:-}" ] && [ "${SUDO_USER:-}" != root ] && user=$SUDO_USER
if [ -n "$user" ] && ! id -nG "$user" | tr ' ' '\n' | grep -qx kosa8; then
	as_root usermod -aG kosa8 "$user"
	say "added $user to the group kosa8 (it is as good as root for sandboxes): log in again," \
		"or run newgrp kosa8, for it to count"
fi
as_root install -d -m 0710 -o root -g kosa8 "$home"
# The guest image comes from where the release came from (a mirror's too), when kosa8d
# has to fetch it; a config.json of the machine's own is left alone.
if [ -n "$base" ] && ! as_root test -e "$home/config.json"; then
	case $base in *[!A-Za-z0-9:/._~%+-]*) die "$base: not writing such a URL into config.json" ;; esac
	printf '{\n  "guest_url": "%s/guest/"\n}\n' "$base" | as_root tee "$home/config.json" >/dev/null
	as_root chmod 0600 "$home/config.json"
	say "$home/config.json: guest_url $base/guest/"
fi

# ---- 6. the service ----
if command -v systemctl >/dev/null 2>&1; then
	if [ -d /run/systemd/system ]; then
		as_root systemctl daemon-reload
		as_root systemctl enable kosa8.service >/dev/null 2>&1
		say "starting kosa8.service"
		as_root systemctl restart kosa8.service
		say "kosa8.service is running"
	else
		as_root systemctl enable kosa8.service >/dev/null 2>&1 || true
		say "kosa8.service is enabled, but systemd does not run this machine: start kosa8d" \
			"with: sudo kosa8 --home $home daemon start"
	fi
else
	say "no systemd: start kosa8d with: sudo kosa8 --home $home daemon start"
fi
say "done in $(( $(date +%s) - start )) s; try: kosa8 daemon status"
