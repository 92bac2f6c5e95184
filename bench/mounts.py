# SPDX-License-Identifier: Apache-2.0
# mounts.py - shared folders (issues 5 and 30), measured side by side in one run (shared,
# noisy machines: compare ratios, not absolute numbers).
#
# The same python3 script in a container of the same image, over the same kind of host
# folder:
#   kosa8:  a sandbox created with --mount HOSTDIR:/data (FUSE in the guest, messages over
#           the virtio-serial port kosa8.fs to kosa8-fs on the host)
#   9p:     the same kernel, initramfs, agent and guest CPU (k8cli.TCG_CPU) booted by hand
#           with -fsdev local,path=HOSTDIR,security_model=none -device virtio-9p-device,
#           once per cache mode (none, loose by default).
# Measured inside the guest with time.monotonic(), one container run per workload (host
# CPU of kosa8-fs and of QEMU taken around each, per MiB moved):
#   write   S MiB in 1 MiB writes + fsync;
#   read    S MiB (1 MiB reads) of a file the host wrote (the guest never saw it, so
#           nothing is in its page cache: a container cannot drop caches, /proc/sys is
#           read-only there);
#   small   create 1,000 files of 1 KiB, then stat all of them;
#   csv     a Python program over a C MB CSV the host wrote: `for line in f`, one column
#           changed, each row written to a second file (Python's default buffering, i.e.
#           the file system's st_blksize): what an interpreter does with a data file;
#   lookup  stat of 1,000 names that are not there: one round trip each.
#
# How the 9p share reaches a container: containers lack CAP_SYS_ADMIN, so they cannot
# mount 9p, and the agent runs nothing else in the VM. So the bare VM gets one more
# initramfs archive, appended after the guest's (the kernel unpacks both; later entries
# win): /init is a small static program (source below) that forks and execs the real
# agent as PID 1. Its child waits until the agent has bind-mounted the (otherwise unused)
# FUSE shared folder at /data in the VM's root, then mounts 9p on top of it. A container
# clones the topmost mount at /data (the agent's open_tree), i.e. the 9p one. kosa8-fs
# runs for that VM too (an empty folder), only so that the agent's shared-folder set-up
# completes. The script checks in /proc/self/mountinfo that /data is 9p before measuring.
#
# Environment: BENCH_N (repetitions, default 2), BENCH_FS_MIB (default 128),
# BENCH_FS_FILES (default 1000), BENCH_CSV_MB (default 100), BENCH_9P_CACHES (default
# "none,loose"), BENCH_FS_WORK (default "write,read,small,csv,lookup"), KOSA8_BIN.
import ast
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from k8cli import (k, test_image, qemu_vm, image_disk, cpu_cgroup, cgroup_rm,  # noqa: E402
                   cpu_seconds, BIN, GUEST, TCG_CPU)

N = int(os.environ.get("BENCH_N", "2"))
MIB = int(os.environ.get("BENCH_FS_MIB", "128"))
FILES = int(os.environ.get("BENCH_FS_FILES", "1000"))
CACHES = [c for c in os.environ.get("BENCH_9P_CACHES", "none,loose").split(",") if c]
CSV_MB = int(os.environ.get("BENCH_CSV_MB", "100"))
WORKLOADS = [w for w in os.environ.get("BENCH_FS_WORK", "write,read,small,csv,lookup").split(",")
             if w]
LOAD0 = " ".join("%.2f" % x for x in os.getloadavg())
MEM = 512
ENV = ["PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"]

# One workload per container run (so CPU per MiB can be taken around each), printed as a
# dict on the last line. Paths are the same on both sides: /data is the shared folder.
SCRIPT = r"""
import os, sys, time
d, tag, what = sys.argv[1], sys.argv[2], sys.argv[3]
arg = [int(x) for x in sys.argv[4:]]
fst = [l.split(" - ")[1].split()[0] for l in open("/proc/self/mountinfo")
       if l.split()[4] == "/data"]
r = {"fstype": fst[-1] if fst else None, "blksize": os.stat(d).st_blksize}
if what == "write":
    buf = bytes(range(256)) * 4096
    t = time.monotonic()
    fd = os.open("%s/w-%s.bin" % (d, tag), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for _ in range(arg[0]):
        os.write(fd, buf)
    os.fsync(fd)
    os.close(fd)
    r["secs"] = time.monotonic() - t
elif what == "read":
    b = bytearray(1 << 20)
    n = 0
    t = time.monotonic()
    with open("%s/r-%s.bin" % (d, tag), "rb", buffering=0) as f:
        while True:
            got = f.readinto(b)
            if not got:
                break
            n += got
    r["secs"] = time.monotonic() - t
    r["bytes"] = n
elif what == "small":
    sd = "%s/small-%s" % (d, tag)
    small = b"k" * 1024
    t = time.monotonic()
    os.mkdir(sd)
    for i in range(arg[0]):
        with open("%s/%d" % (sd, i), "wb") as f:
            f.write(small)
    t1 = time.monotonic()
    for i in range(arg[0]):
        os.stat("%s/%d" % (sd, i))
    t2 = time.monotonic()
    r["create"], r["stat"], r["secs"] = t1 - t, t2 - t1, t2 - t
elif what == "csv":
    # what an interpreter's program does with a data file: read it line by line, change
    # each row, write the result (default buffering: the file system's st_blksize)
    t = time.monotonic()
    n = 0
    with open("%s/in-%s.csv" % (d, tag)) as f, open("%s/out-%s.csv" % (d, tag), "w") as o:
        for line in f:
            c = line.split(",")
            c[2] = c[2].upper()
            o.write(",".join(c))
            n += 1
    r["secs"] = time.monotonic() - t
    r["rows"] = n
elif what == "lookup":
    # one round trip each: a name that is not there (failed lookups are not cached)
    t = time.monotonic()
    for i in range(arg[0]):
        try:
            os.stat("%s/missing-%d" % (d, i))
        except FileNotFoundError:
            pass
    r["secs"] = time.monotonic() - t
print(repr(r))
"""

# /init of the 9p VM: the agent stays PID 1; a child mounts 9p over /data (see the top).
WRAPPER_C = r'''
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mount.h>
#include <sys/stat.h>
int main(int argc, char **argv)
{
	(void)argc;
	if (fork() == 0) {
		const char *opts = getenv("k8b9p");
		char line[4096];
		int rooted = 0;
		mkdir("/k8proc", 0755);
		if (mount("proc", "/k8proc", "proc", 0, NULL) < 0)
			_exit(1);
		for (int i = 0; i < 12000; i++, usleep(10000)) {
			if (!rooted) {
				if (access("/k8proc/1/root/proc/self/mountinfo", R_OK) ||
				    chroot("/k8proc/1/root") || chdir("/"))
					continue;
				rooted = 1;
			}
			FILE *f = fopen("/proc/self/mountinfo", "r");
			int found = 0;
			while (f && fgets(line, sizeof(line), f)) {
				char mp[1024];
				if (sscanf(line, "%*s %*s %*s %*s %1023s", mp) == 1 && !strcmp(mp, "/data") &&
				    strstr(line, " - fuse"))
					found = 1;
			}
			if (f)
				fclose(f);
			if (found) {
				mount("share", "/data", "9p", 0, opts);
				_exit(0);
			}
		}
		_exit(1);
	}
	execv("/k8agent", argv);
	return 127;
}
'''


def med(xs):
    return statistics.median(xs)


def ctl(path, req):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall((json.dumps(dict(req, id=7)) + "\n").encode())
    f = s.makefile()
    while True:
        r = json.loads(f.readline())
        if r.get("id") == 7:
            s.close()
            return r


def p9_initrd(work):
    """The guest's initramfs with the wrapper /init appended (the agent moves to /k8agent)."""
    out = os.path.join(work, "initramfs-9p.cpio")
    cdir = os.path.join(work, "cpio")
    os.makedirs(cdir, exist_ok=True)
    subprocess.run(["cc", "-O2", "-static", "-o", os.path.join(cdir, "init"), "-x", "c", "-"],
                   input=WRAPPER_C.encode(), check=True)
    shutil.copy(os.path.join(BIN, "kosa8-agent"), os.path.join(cdir, "k8agent"))
    subprocess.run(["sh", "-c", "cat %s > %s && cd %s && printf 'init\\nk8agent\\n' | "
                    "cpio -o -H newc -R 0:0 --quiet >> %s"
                    % (os.path.join(GUEST, "initramfs.cpio"), out, cdir, out)], check=True)
    return out


def host_file(path, mib):
    blk = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(blk)


def host_csv(path, mb):
    """A CSV of about mb MB: 8 columns, ~100 bytes a row."""
    rows = []
    for i in range(10000):
        rows.append("%d,%08x,name%05d,%d.%02d,%s,%d,%d,%s\n" % (
            i, (i * 2654435761) & 0xffffffff, i % 99991, i % 1000, i % 100,
            "abcdefghij" * 2, i * 7, i % 3, "x" * 18))
    chunk = "".join(rows).encode()
    with open(path, "wb") as f:
        for _ in range(max(1, (mb * 1000000) // len(chunk))):
            f.write(chunk)
    return os.path.getsize(path)


def main():
    home = tempfile.mkdtemp(prefix="k8bfs-", dir="/tmp")
    top = tempfile.mkdtemp(prefix="k8bshare-", dir="/tmp")  # not under home: kosa8 refuses that
    shares = {"kosa8": os.path.join(top, "kosa8")}
    for c in CACHES:
        shares[c] = os.path.join(top, "9p-" + c)
    for d in shares.values():
        os.makedirs(d)
    vms = {}
    k(home, "daemon", "start")
    try:
        bench(home, shares, vms)
    finally:
        for proc, ag, fsd, cg in vms.values():
            proc.kill()
            proc.wait()
            fsd.terminate()
            fsd.wait()
            cgroup_rm(cg)
        k(home, "daemon", "stop", check=False)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(top, ignore_errors=True)


def qemu_pid(home, sid):
    with open(os.path.join(home, "run", "%s.qemu.pid" % sid)) as f:
        return int(f.read().split()[0])


def bench(home, shares, vms):
    k(home, "image", "load", test_image(), "--tag", "python:3.12-slim")
    k(home, "sandbox", "create", "fs", "--mount", shares["kosa8"] + ":/data",
      "--memory", str(MEM), "--cpus", "1", "--disk", "2")
    k(home, "sandbox", "pull", "fs", "python:3.12-slim")
    sb = json.loads(k(home, "sandbox", "inspect", "fs").stdout)
    sbj = json.load(open(os.path.join(sb["dir"], "sandbox.json")))
    fspid, sid = sbj["sidecars"]["fs"]["pid"], sbj["id"]
    kqemu = sbj.get("pid")
    fsctl = os.path.join(home, "run", "%s.fsctl" % sid)

    erofs, digest = image_disk(home)
    initrd = p9_initrd(os.path.join(home, "p9"))
    p9guest = os.path.join(home, "p9", "guest")
    os.makedirs(p9guest)
    os.symlink(os.path.join(GUEST, "vmlinux"), os.path.join(p9guest, "vmlinux"))
    os.symlink(initrd, os.path.join(p9guest, "initramfs.cpio"))
    empty = os.path.join(home, "empty")
    os.makedirs(empty)

    for c in CACHES:
        w = os.path.join(home, "vm-" + c)
        os.makedirs(w)
        opts = "trans=virtio,version=9p2000.L,msize=524288,cache=%s" % c
        extra = ["-fsdev", "local,id=fs0,path=%s,security_model=none" % shares[c],
                 "-device", "virtio-9p-device,fsdev=fs0,mount_tag=share",
                 "-chardev", "socket,id=fs,path=%s/fs.sock,server=on,wait=off" % w,
                 "-device", "virtserialport,chardev=fs,name=kosa8.fs"]
        proc, ag, _ = qemu_vm(home, w, extra=extra, erofs=erofs, mem=MEM, guest=p9guest,
                              max_ports=3, append="k8b9p=" + opts)
        fsd = subprocess.Popen([os.path.join(BIN, "kosa8-fs"), "--id", "p9" + c, "--port",
                                "%s/fs.sock" % w, "--control", "%s/fs.ctl" % w, "--mount",
                                empty + ":rw"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        fsd.stdout.readline()
        cg = cpu_cgroup("fs%s%d" % (c, os.getpid()), proc.pid, 1)
        vms[c] = (proc, ag, fsd, cg)
        ag.request({"op": "init", "time_ns": time.time_ns(), "hostname": "bare", "seed": "00" * 32,
                    "limits": {"pids": 1024, "memory_reserve_mib": 64},
                    "mounts": [{"index": 0, "guest": "/data", "ro": False}]})
        ag.request({"op": "image.mount", "slot": 0, "digest": digest})
    print("bare 9p VMs: CPU quota %s; guest CPU -cpu %s (as kosa8d's TCG VMs)" % (
        "1 CPU each, like the sandbox's QEMU" if all(v[3] for v in vms.values()) else "none",
        TCG_CPU))

    seq = [0]

    def guest_run(which, argv):
        """Run argv in a container on that side; (stdout, {cpu seconds of the host
        processes that served it})."""
        if which == "kosa8":
            c0, q0 = cpu_seconds(fspid), cpu_seconds(kqemu) if kqemu else 0
            s0 = ctl(fsctl, {"op": "stats"})
            out = k(home, "sandbox", "run", "fs", "python:3.12-slim", *argv).stdout
            s1 = ctl(fsctl, {"op": "stats"})
            return out, {"fs_cpu": cpu_seconds(fspid) - c0,
                         "qemu_cpu": (cpu_seconds(kqemu) - q0) if kqemu else None,
                         "requests": s1["requests"] - s0["requests"],
                         "ram_writes": s1.get("ram_writes", 0) - s0.get("ram_writes", 0),
                         "moved": (s1["bytes_read"] - s0["bytes_read"]) +
                                  (s1["bytes_written"] - s0["bytes_written"])}
        proc, ag = vms[which][:2]
        seq[0] += 1
        for _ in range(100):  # the wrapper's mount lands shortly after the agent's
            o, ex = ag.run({"op": "run", "container": "%012x" % (0xf0000 + seq[0]),
                            "image": digest, "argv": ["cat", "/proc/self/mountinfo"],
                            "env": ENV, "cwd": "/", "user": "0", "stdin": False,
                            "rm": True, "detach": False})
            seq[0] += 1
            if b" /data " in o and b" - 9p " in o.split(b" /data ")[-1].split(b"\n")[0]:
                break
            time.sleep(0.2)
        c0 = cpu_seconds(proc.pid)
        o, ex = ag.run({"op": "run", "container": "%012x" % (0xf0000 + seq[0]), "image": digest,
                        "argv": argv, "env": ENV, "cwd": "/", "user": "0", "stdin": False,
                        "rm": True, "detach": False})
        assert ex.get("code") == 0, (o, ex)
        return o.decode(), {"qemu_cpu": cpu_seconds(proc.pid) - c0}

    def run(which, tag, what):
        d = shares[which]
        arg, size = [], 0
        if what == "write":
            arg, size = [MIB], MIB << 20
        elif what == "read":
            host_file(os.path.join(d, "r-%s.bin" % tag), MIB)
            size = MIB << 20
        elif what == "small":
            arg = [FILES]
        elif what == "csv":
            size = 2 * host_csv(os.path.join(d, "in-%s.csv" % tag), CSV_MB)
        elif what == "lookup":
            arg = [FILES]
        out, extra = guest_run(which, ["python3", "-c", SCRIPT, "/data", tag, what] +
                               [str(a) for a in arg])
        r = ast.literal_eval(out.strip().splitlines()[-1])
        r.update(extra)
        r["size"] = size
        want = "fuse" if which == "kosa8" else "9p"
        if r["fstype"] != want or (what == "read" and r["bytes"] != MIB << 20):
            raise SystemExit("%s: /data is %s, %r" % (which, r["fstype"], r))
        if what == "csv":
            # 9p cache=loose writes back after close: wait for it (outside the timing)
            out_csv = os.path.join(d, "out-%s.csv" % tag)
            for _ in range(600 if which == "loose" else 1):
                if os.path.getsize(out_csv) == size // 2:
                    break
                time.sleep(0.1)
            got = os.path.getsize(out_csv)
            if got != size // 2:
                raise SystemExit("%s: csv out %d bytes, in %d" % (which, got, size // 2))
        # the next run starts from the same state: the folder empty
        for f in os.listdir(d):
            p = os.path.join(d, f)
            shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)
        return r

    sides = ["kosa8"] + CACHES
    res = {(s, w): [] for s in sides for w in WORKLOADS}
    for i in range(N):
        for w in WORKLOADS:
            for s in (sides if i % 2 == 0 else sides[::-1]):
                res[(s, w)].append(run(s, "%s%d" % (s, i), w))

    def mbs(s, w):
        return med([r["size"] / r["secs"] / 1e6 for r in res[(s, w)]])

    def secs(s, w, key="secs"):
        return med([r[key] for r in res[(s, w)]])

    def per_mib(s, w, key):
        xs = [r[key] / (r["size"] / (1 << 20)) * 1000 for r in res.get((s, w), [])
              if r.get(key) is not None and r["size"]]
        return med(xs) if xs else float("nan")

    print("shared folder, %d runs each, medians, inside the guest (load average before: %s, "
          "after: %s)" % (N, LOAD0, " ".join("%.2f" % x for x in os.getloadavg())))
    name = {s: s if s == "kosa8" else "9p cache=" + s for s in sides}
    if "write" in WORKLOADS or "read" in WORKLOADS:
        print("  %d MiB sequential in 1 MiB ops (write + fsync; read of a file the host wrote):"
              % MIB)
        print("  %-14s %10s %10s %18s %18s %18s" % ("", "write MB/s", "read MB/s",
                                                   "kosa8-fs ms/MiB w,r", "QEMU ms/MiB w,r",
                                                   "st_blksize"))
        for s in sides:
            print("  %-14s %10.1f %10.1f %18s %18s %18s" % (
                name[s], mbs(s, "write") if "write" in WORKLOADS else 0,
                mbs(s, "read") if "read" in WORKLOADS else 0,
                "%.1f, %.1f" % (per_mib(s, "write", "fs_cpu"), per_mib(s, "read", "fs_cpu"))
                if s == "kosa8" else "-",
                "%.1f, %.1f" % (per_mib(s, "write", "qemu_cpu"), per_mib(s, "read", "qemu_cpu")),
                res[(s, WORKLOADS[0])][0]["blksize"]))
    if "small" in WORKLOADS:
        print("  %d files of 1 KiB: create, then stat each" % FILES)
        print("  %-14s %12s %10s %10s" % ("", "create+stat s", "create s", "stat s"))
        for s in sides:
            print("  %-14s %12.2f %10.2f %10.2f" % (name[s], secs(s, "small"),
                                                    secs(s, "small", "create"),
                                                    secs(s, "small", "stat")))
    if "csv" in WORKLOADS:
        print("  a Python program: %d MB CSV read line by line, each row changed, written back "
              "(default buffering)" % CSV_MB)
        print("  %-14s %10s %10s %18s" % ("", "seconds", "MB/s", "kosa8-fs ms/MiB"))
        for s in sides:
            print("  %-14s %10.2f %10.1f %18s" % (
                name[s], secs(s, "csv"), mbs(s, "csv"),
                "%.2f" % per_mib(s, "csv", "fs_cpu") if s == "kosa8" else "-"))
    if "lookup" in WORKLOADS:
        print("  round trip: stat of a missing name, %d times" % FILES)
        for s in sides:
            print("  %-14s %8.0f us each" % (name[s], secs(s, "lookup") / FILES * 1e6))
    for c in CACHES:
        parts = []
        if "write" in WORKLOADS:
            parts.append("write %.2fx" % (mbs("kosa8", "write") / mbs(c, "write")))
        if "read" in WORKLOADS:
            parts.append("read %.2fx" % (mbs("kosa8", "read") / mbs(c, "read")))
        if "small" in WORKLOADS:
            parts.append("create+stat of %d files %.2fx" % (
                FILES, secs(c, "small") / secs("kosa8", "small")))
        if "csv" in WORKLOADS:
            parts.append("csv program %.2fx" % (secs(c, "csv") / secs("kosa8", "csv")))
        print("kosa8 vs 9p cache=%s: %s (>1: kosa8 faster; goals: write, read >= 1, "
              "files >= 1.2, csv >= 1)" % (c, ", ".join(parts)))
    kr = [r for w in WORKLOADS for r in res[("kosa8", w)]]
    print("kosa8-fs over all kosa8 runs: %d requests (%d WRITEs by reference), %.1f s CPU, "
          "%.0f MiB moved" % (
        sum(r["requests"] for r in kr), sum(r["ram_writes"] for r in kr),
        sum(r["fs_cpu"] for r in kr),
        sum(r["moved"] for r in kr) / (1 << 20)))


if __name__ == "__main__":
    main()
