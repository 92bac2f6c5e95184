# SPDX-License-Identifier: Apache-2.0
# k8cli.py - what the benchmarks share: the CLI's path, running it, a process's RSS.
import os
import shutil
import subprocess
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# KOSA8_BIN picks another build's programs (e.g. build-bench/bin); the guest image is the
# daemon's: KOSA8_GUEST_DIR, else the guest/ folder beside that bin/.
BIN = os.path.abspath(os.environ.get("KOSA8_BIN", os.path.join(TOP, "build", "bin")))
KOSA8 = os.path.join(BIN, "kosa8")
# The guest CPU and kernel flags of kosa8d's TCG VMs (src/daemon/vm.c): a bare VM that is
# compared with a sandbox must run on the same (docs/shared-folders.md "Speed").
TCG_CPU = "max,-erms,-fsrm"
TCG_APPEND = "clearcpuid=rep_good"
GUEST = os.path.abspath(os.environ.get("KOSA8_GUEST_DIR", os.path.join(os.path.dirname(BIN), "guest")))


def k(home, *args, check=True):
    """Run kosa8 with KOSA8_HOME=home; exit on failure (a benchmark cannot go on)."""
    p = subprocess.run([KOSA8] + list(args), capture_output=True, text=True,
                       env=dict(os.environ, KOSA8_HOME=home))
    if check and p.returncode:
        raise SystemExit("kosa8 %s: %s" % (" ".join(args), p.stderr))
    return p


def out(home, *args):
    return k(home, *args).stdout


def test_image():
    """The python test image's OCI layout (built once, cached)."""
    return subprocess.run([os.path.join(TOP, "scripts", "test-image.sh")], capture_output=True,
                          text=True, check=True).stdout.strip()


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def smaps_kib(pid, key, rollup=True):
    """A field of /proc/PID/smaps_rollup (KiB): "Rss", "Pss" (shared pages counted once
    across the processes that map them), "Anonymous"..."""
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def ram_mapping(pid):
    """smaps fields (KiB) of QEMU's mapping of a memory file (a VM restored from one,
    docs/design.md "Memory as a file"), or None: its RAM is its own anonymous memory."""
    import re
    out, cur = None, None
    try:
        with open("/proc/%d/smaps" % pid) as f:
            for line in f:
                if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                    path = " ".join(line.split()[5:])
                    cur = ({} if re.search(r"/(memory|fork-memory)( \(deleted\))?$", path)
                           else None)
                    if cur is not None:
                        out = cur
                elif cur is not None and line.split()[-1:] == ["kB"]:
                    cur[line.split(":")[0]] = int(line.split()[1])
    except OSError:
        return None
    return out


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def mem_available_mib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    return 0


def cpu_seconds(pid):
    """utime + stime of a process (all its threads), in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        st = f.read().rsplit(")", 1)[1].split()
    return (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")


def qemu_vm(home, workdir, extra=(), erofs=None, mem=512, cpus=1, guest=None, max_ports=2,
            append=""):
    """Boot the guest like kosa8d does, but by hand (core.py's bare_vm with more devices:
    `extra` QEMU arguments). Returns (proc, agent, seconds to HELLO). Needs
    home/cache/scratch-2G.qcow2, which kosa8d makes when it creates a 2 GB sandbox."""
    from k8proto import Agent
    guest = guest or GUEST
    os.makedirs(workdir, exist_ok=True)
    shutil.copy(os.path.join(home, "cache", "scratch-2G.qcow2"), os.path.join(workdir, "scratch.qcow2"))
    args = ["qemu-system-x86_64", "-M", "microvm,acpi=off,pit=on,pic=on,rtc=off",
            "-accel", "tcg,tb-size=128", "-cpu", TCG_CPU, "-m", str(mem), "-smp", str(cpus),
            "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
            "-kernel", os.path.join(guest, "vmlinux"), "-initrd", os.path.join(guest, "initramfs.cpio"),
            "-append", ("console=ttyS0 quiet panic=-1 reboot=t %s %s" % (TCG_APPEND, append)).strip(),
            "-serial", "null", "-device", "virtio-serial-device,max_ports=%d" % max_ports,
            "-chardev", "socket,id=agent,path=%s/a.sock,server=on,wait=off" % workdir,
            "-device", "virtserialport,chardev=agent,name=kosa8.agent",
            "-blockdev", "driver=file,node-name=sf,filename=%s/scratch.qcow2" % workdir,
            "-blockdev", "driver=qcow2,node-name=scratch,file=sf",
            "-device", "virtio-blk-device,drive=scratch,serial=scratch"]
    if erofs:
        args += ["-blockdev", "driver=raw,node-name=img,read-only=on,file.driver=file,"
                 "file.filename=%s,file.read-only=on" % erofs,
                 "-device", "virtio-blk-device,drive=img,serial=slot0"]
    args += list(extra) + ["-device", "virtio-rng-device"]
    t0 = time.time()
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(workdir, "qemu.log"), "w"))
    ag = Agent(os.path.join(workdir, "a.sock"))
    ag.hello()
    return proc, ag, time.time() - t0


def image_disk(home):
    """(path, digest) of the one image disk kosa8d built (after a `sandbox pull`)."""
    disks = os.path.join(home, "images", "disks")
    erofs = os.path.join(disks, sorted(os.listdir(disks))[0])
    return erofs, "sha256:" + os.path.basename(erofs).split(".")[0]


def cpu_cgroup(name, pid, cpus):
    """Put pid under the same CPU quota kosa8d gives a sandbox's QEMU (cpus x 100 ms per
    100 ms), so a bare VM competes on equal terms. Returns the cgroup dir or None."""
    for d, files in (("/sys/fs/cgroup/cpu/kosa8bench", (("cpu.cfs_period_us", "100000"),
                                                        ("cpu.cfs_quota_us", str(cpus * 100000)))),
                     ("/sys/fs/cgroup/kosa8bench", (("cpu.max", "%d 100000" % (cpus * 100000)),))):
        try:
            os.makedirs(os.path.join(d, name), exist_ok=True)
            for f, v in files:
                with open(os.path.join(d, name, f), "w") as fh:
                    fh.write(v)
            with open(os.path.join(d, name, "cgroup.procs"), "w") as fh:
                fh.write(str(pid))
            return os.path.join(d, name)
        except OSError:
            continue
    return None


def cgroup_rm(path):
    if path:
        for _ in range(50):
            try:
                os.rmdir(path)
                return
            except OSError:
                time.sleep(0.1)


def touch_memory(home, name, mib):
    """Start a Python container in sandbox `name` that holds `mib` MiB of random bytes, and
    wait until the guest uses that much. Returns the guest's used KiB."""
    import json
    cid = out(home, "sandbox", "start", name, "python:3.12-slim", "python3", "-c",
              "import time, os\nb = bytearray(os.urandom(1 << 20)) * %d\n"
              "open('/ready', 'w').close()\nwhile True: time.sleep(1)" % mib).strip()
    used = 0
    # Until the process has all of it (it says so with /ready): a checkpoint taken while
    # it still fills the array leaves that work to every copy of it.
    for _ in range(600):
        st = json.loads(out(home, "sandbox", "inspect", name))
        used = st["stat"]["mem_total_kib"] - st["stat"]["mem_free_kib"]
        if used > mib * 1024 and not k(home, "sandbox", "exec", name, cid, "test", "-e",
                                        "/ready", check=False).returncode:
            break
        time.sleep(0.5)
    time.sleep(1)
    return used


# The two ways a checkpoint keeps memory (config.json "checkpoint_memory"), measured side
# by side in one run: the migration stream of before issue 27, and the memory file.
PATHS = (("stream", {"checkpoint_memory": "stream"}), ("file", {}))


def paths_homes(prefix, layout):
    """{path: home}: a daemon per way of keeping memory, the python image loaded in each."""
    import json
    import tempfile
    homes = {}
    for path, cfg in PATHS:
        h = tempfile.mkdtemp(prefix="%s%s-" % (prefix, path[0]), dir="/tmp")
        with open(os.path.join(h, "config.json"), "w") as f:
            json.dump(cfg, f)
        out(h, "daemon", "start")
        out(h, "image", "load", layout, "--tag", "python:3.12-slim")
        homes[path] = h
    return homes


def end_home(home):
    """Stop the benchmark's daemon (and its VMs) and remove its home, whatever happened."""
    subprocess.run([KOSA8, "daemon", "stop"], capture_output=True,
                   env=dict(os.environ, KOSA8_HOME=home))
    keep = os.environ.get("BENCH_LOGS")     # a folder: the daemon's log kept there
    if keep and os.path.exists(os.path.join(home, "kosa8d.log")):
        os.makedirs(keep, exist_ok=True)
        shutil.copy(os.path.join(home, "kosa8d.log"),
                    os.path.join(keep, os.path.basename(home) + ".log"))
    shutil.rmtree(home, ignore_errors=True)
