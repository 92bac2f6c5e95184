#!/bin/sh
# guest.sh - assemble the guest image in $B/guest: vmlinux (from scripts/kernel.sh, cached),
# initramfs.cpio (uncompressed newc: /init = kosa8-agent, /dev/console), manifest.json
# and SHA256SUMS.
#
# Needs no root: the newc archive is written by a few lines of Python, so the device node
# and the owners (root:root) come from the archive, not from the disk. The archive is
# reproducible (mtime 0, fixed inode numbers): the same agent gives the same SHA-256.
# Idempotent: a file is replaced only when its content changed, so a second run costs a
# few hashes (~0.1 s) and leaves every mtime alone.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
B=${B:-build}
case $B in /*) ;; *) B=$top/$B ;; esac
# OUT and AGENT build another guest from another agent (make proto-variants).
out=${OUT:-$B/guest}
agent=${AGENT:-$B/bin/kosa8-agent}
[ -x "$agent" ] || { echo "guest.sh: $agent missing: run make $B/bin/kosa8-agent" >&2; exit 1; }
python=$(command -v python3 || true)
[ -x /usr/bin/python3 ] && python=/usr/bin/python3
[ -n "$python" ] || { echo "guest.sh: python3 is needed to write the initramfs" >&2; exit 1; }

vmlinux=$("$top/scripts/kernel.sh")
kconfig=$(dirname "$vmlinux")/.config
mkdir -p "$out"

# Replace $2 by $1 when they differ; drop $1 otherwise.
install_if_changed() {
	if cmp -s "$1" "$2"; then rm -f "$1"; else mv -f "$1" "$2"; fi
}

cp "$vmlinux" "$out/vmlinux.tmp"
install_if_changed "$out/vmlinux.tmp" "$out/vmlinux"

"$python" - "$agent" "$out/initramfs.cpio.tmp" <<'EOF'
import sys

agent, dest = sys.argv[1], sys.argv[2]
ino = [1000]


def entry(out, name, mode, data=b"", rdev=(0, 0), nlink=1):
    ino[0] += 1
    namez = name.encode() + b"\0"
    fields = [ino[0], mode, 0, 0, nlink, 0, len(data), 0, 0, rdev[0], rdev[1], len(namez), 0]
    hdr = b"070701" + b"".join(b"%08X" % f for f in fields)
    out.write(hdr + namez)
    out.write(b"\0" * (-(len(hdr) + len(namez)) % 4))
    out.write(data)
    out.write(b"\0" * (-len(data) % 4))


with open(agent, "rb") as f:
    init = f.read()
with open(dest, "wb") as out:
    entry(out, "dev", 0o040755, nlink=2)
    entry(out, "dev/console", 0o020600, rdev=(5, 1))
    entry(out, "init", 0o100755, init)
    entry(out, "TRAILER!!!", 0, nlink=1)
    pad = -out.tell() % 512
    out.write(b"\0" * pad)
EOF
install_if_changed "$out/initramfs.cpio.tmp" "$out/initramfs.cpio"

sha() { sha256sum "$1" | cut -c1-64; }
ksha=$(sha "$out/vmlinux")
isha=$(sha "$out/initramfs.cpio")
csha=$(sha "$kconfig")
kver=$(dpkg-query -W -f='${Version}' linux-source-6.1)
cat > "$out/manifest.json.tmp" <<EOF
{
  "kernel": {"file": "vmlinux", "sha256": "$ksha"},
  "initramfs": {"file": "initramfs.cpio", "sha256": "$isha"},
  "kernel_source": "linux-source-6.1 $kver",
  "config_sha256": "$csha"
}
EOF
install_if_changed "$out/manifest.json.tmp" "$out/manifest.json"
msha=$(sha "$out/manifest.json")
printf '%s  vmlinux\n%s  initramfs.cpio\n%s  manifest.json\n' "$ksha" "$isha" "$msha" > "$out/SHA256SUMS.tmp"
install_if_changed "$out/SHA256SUMS.tmp" "$out/SHA256SUMS"
echo "$out"
