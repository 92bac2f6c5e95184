#!/bin/sh
# demo.sh - the main job on a fresh machine: install what is missing, build everything,
# start the daemon, load a locally built python image, create a sandbox with the guide's
# shared folders, run Python in it, checkpoint and rewind.
# Re-running is cheap: the kernel, the test image and the build are cached.
set -eu
# VMs, cgroups, network namespaces and apt-get want root: ask sudo when we are not.
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 || { echo "$0: run this as root" >&2; exit 1; }
	exec sudo -E "$0" "$@"
fi
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
./scripts/deps.sh
make -s -j2 all >&2
export PATH="$top/build/bin:$PATH"
export KOSA8_HOME="${KOSA8_HOME:-$HOME/.kosa8}"
layout=$(./scripts/test-image.sh)
kosa8 daemon start
kosa8 image load "$layout" --tag python:3.12-slim
# The guide's folders: code reads /in (read-only), what it writes to /out lands here.
work="${KOSA8_DEMO_DIR:-$HOME/interp}"
mkdir -p "$work/in" "$work/out"
cat > "$work/in/main.py" <<'PY'
import platform
with open("/out/result.txt", "w") as f:
    f.write("6*7 = %d, computed on %s (kernel %s)\n" % (6 * 7, platform.node(), platform.release()))
print("wrote /out/result.txt")
PY
# A sandbox from an older demo run (without the folders) is made again.
if ! kosa8 sandbox inspect interp 2>/dev/null | grep -q '"guest": "/in"'; then
	kosa8 sandbox rm -f interp
	kosa8 sandbox create interp --cpus 2 --memory 1024 --disk 4 \
		--mount "$work/in:/in:ro" --mount "$work/out:/out"
fi
kosa8 sandbox pull interp python:3.12-slim
echo '$ kosa8 sandbox run interp python:3.12-slim python3 /in/main.py'
kosa8 sandbox run interp python:3.12-slim python3 /in/main.py
echo "\$ cat $work/out/result.txt"
cat "$work/out/result.txt"
echo '$ kosa8 sandbox run interp python:3.12-slim timeout 30 python3 -c "print(6*7)"'
kosa8 sandbox run interp python:3.12-slim timeout 30 python3 -c 'print(6*7)'
echo '$ echo "import platform; print(platform.node(), platform.release())" | kosa8 sandbox run interp python:3.12-slim python3 -'
echo 'import platform; print(platform.node(), platform.release())' | kosa8 sandbox run interp python:3.12-slim python3 -
# The guide's loop: a clean checkpoint, a run that dirties the machine, a rewind.
kosa8 checkpoint rm interp clean >/dev/null 2>&1 || true
kosa8 checkpoint interp --label clean
echo '$ kosa8 sandbox run interp python:3.12-slim sh -c "echo x > /tmp/dirty; ls /tmp/dirty"'
kosa8 sandbox run interp python:3.12-slim sh -c 'echo x > /tmp/dirty; ls /tmp/dirty'
kosa8 rewind interp --to clean -y
echo '$ kosa8 sandbox egress interp      # deny by default: nothing leaves, DNS included'
kosa8 sandbox egress interp
kosa8 sandbox ls
kosa8 audit verify
