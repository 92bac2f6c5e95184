#!/bin/sh
# deps.sh - install the Debian packages kosa8 needs to build, run and test.
# Runs apt-get only when something is missing. Needs root (or sudo).
set -eu
pkgs="gcc make pkg-config clang qemu-system-x86 qemu-utils linux-source-6.1 bc bison flex
libelf-dev libssl-dev libcurl4-openssl-dev libjansson-dev libarchive-dev libmicrohttpd-dev libzstd-dev
libslirp-dev libseccomp-dev erofs-utils e2fsprogs cpio xz-utils zstd debootstrap skopeo
umoci docker-registry apache2-utils python3 python3-pytest busybox-static iproute2
python3-numpy openssl curl ca-certificates nodejs python3-docker
protobuf-c-compiler libprotobuf-c-dev containerd python3-grpcio python3-yaml
python3-venv python3-pip"
# The Docker API tests drive a docker CLI: Debian's only when there is none on PATH.
command -v docker >/dev/null 2>&1 || pkgs="$pkgs docker.io"
# The broker and model tests run the official openai and Anthropic npm clients (tests fetch them).
command -v npm >/dev/null 2>&1 || pkgs="$pkgs npm"
missing=
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps.sh: installing:$missing" >&2
SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >&2
