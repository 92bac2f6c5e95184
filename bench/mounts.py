# SPDX-License-Identifier: Apache-2.0
# mounts.py - shared folders (issue 5), measured side by side in one run (shared, noisy
# machines: compare ratios, not absolute numbers).
#
# The same python3 script in a container of the same image, over the same kind of host
# folder:
#   kosa8:  a sandbox created with --mount HOSTDIR:/data (FUSE in the guest, messages over
#           the virtio-serial port kosa8.fs to kosa8-fs on the host)
#   9p:     the same kernel, initramfs and agent booted by hand with
#           -fsdev local,path=HOSTDIR,security_model=none -device virtio-9p-device, once
#           per cache mode (none, loose by default).
# Measured inside the guest with time.monotonic(): sequential write of S MiB in 1 MiB
# writes + fsync; sequential read of S MiB (1 MiB reads) of a file the host wrote (the guest
# never saw it, so nothing is in its page cache: a container cannot drop caches, /proc/sys
# is read-only there); create 1,000 files of 1 KiB, then stat all of them.
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
# BENCH_FS_FILES (default 1000), BENCH_9P_CACHES (default "none,loose"), KOSA8_BIN.
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
                   cpu_seconds, BIN, GUEST)

N = int(os.environ.get("BENCH_N", "2"))
MIB = int(os.environ.get("BENCH_FS_MIB", "128"))
FILES = int(os.environ.get("BENCH_FS_FILES", "1000"))
CACHES = [c for c in os.environ.get("BENCH_9P_CACHES", "none,loose").split(",") if c]
MEM = 512
ENV = ["PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"]

SCRIPT = r'''
import os, sys, time
d, tag, mib, nfiles = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
fst = [l.split(" - ")[1].split()[0] for l in open("/proc/self/mountinfo")
       if l.split()[4] == "/data"]
r = {"fstype": fst[-1] if fst else None}
buf = bytes(range(256)) * 4096
t = time.monotonic()
fd = os.open("%s/w-%s.bin" % (d, tag), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for _ in range(mib):
    os.write(fd, buf)
os.fsync(fd)
os.close(fd)
r["write"] = time.monotonic() - t
b = bytearray(1 << 20)
n = 0
t = time.monotonic()
with open("%s/r-%s.bin" % (d, tag), "rb", buffering=0) as f:
    while True:
        got = f.readinto(b)
        if not got:
            break
        n += got
r["read"] = time.monotonic() - t
r["read_bytes"] = n
sd = "%s/small-%s" % (d, tag)
small = b"k" * 1024
t = time.monotonic()
os.mkdir(sd)
for i in range(nfiles):
    with open("%s/%d" % (sd, i), "wb") as f:
        f.write(small)
t1 = time.monotonic()
for i in range(nfiles):
    os.stat("%s/%d" % (sd, i))
t2 = time.monotonic()
r["create"], r["stat"], r["create_stat"] = t1 - t, t2 - t1, t2 - t
print(repr(r))
'''

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


def bench(home, shares, vms):
    k(home, "image", "load", test_image(), "--tag", "python:3.12-slim")
    k(home, "sandbox", "create", "fs", "--mount", shares["kosa8"] + ":/data",
      "--memory", str(MEM), "--cpus", "1", "--disk", "2")
    k(home, "sandbox", "pull", "fs", "python:3.12-slim")
    sb = json.loads(k(home, "sandbox", "inspect", "fs").stdout)
    sbj = json.load(open(os.path.join(sb["dir"], "sandbox.json")))
    fspid, sid = sbj["sidecars"]["fs"]["pid"], sbj["id"]
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
    print("bare 9p VMs: CPU quota %s" % ("1 CPU each, like the sandbox's QEMU"
                                         if all(v[3] for v in vms.values()) else "none"))

    seq = [0]

    def run(which, tag):
        d = shares[which]
        host_file(os.path.join(d, "r-%s.bin" % tag), MIB)
        argv = ["python3", "-c", SCRIPT, "/data", tag, str(MIB), str(FILES)]
        if which == "kosa8":
            c0, r0 = cpu_seconds(fspid), ctl(fsctl, {"op": "stats"})["requests"]
            out = k(home, "sandbox", "run", "fs", "python:3.12-slim", *argv).stdout
            extra = {"fs_cpu": cpu_seconds(fspid) - c0,
                     "requests": ctl(fsctl, {"op": "stats"})["requests"] - r0}
        else:
            seq[0] += 1
            proc, ag = vms[which][:2]
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
            out = o.decode()
            extra = {"qemu_cpu": cpu_seconds(proc.pid) - c0}
        r = ast.literal_eval(out.strip().splitlines()[-1])
        r.update(extra)
        want = "fuse" if which == "kosa8" else "9p"
        if r["fstype"] != want or r["read_bytes"] != MIB << 20:
            raise SystemExit("%s: /data is %s, read %d bytes" % (which, r["fstype"], r["read_bytes"]))
        # the next run starts from the same state: the folder empty
        for f in os.listdir(d):
            p = os.path.join(d, f)
            shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)
        return r

    sides = ["kosa8"] + CACHES
    res = {s: [] for s in sides}
    for i in range(N):
        for s in (sides if i % 2 == 0 else sides[::-1]):
            res[s].append(run(s, "%s%d" % (s, i)))

    def mbs(s, key):
        return med([(MIB << 20) / r[key] / 1e6 for r in res[s]])

    def secs(s, key):
        return med([r[key] for r in res[s]])

    print("shared folder, %d MiB sequential in 1 MiB ops, %d files of 1 KiB, %d runs each "
          "(medians; inside the guest)" % (MIB, FILES, N))
    print("  %-14s %10s %10s %12s %10s %10s" % ("", "write MB/s", "read MB/s", "create+stat s",
                                                "create s", "stat s"))
    for s in sides:
        print("  %-14s %10.1f %10.1f %12.2f %10.2f %10.2f" % (
            s if s == "kosa8" else "9p cache=" + s, mbs(s, "write"), mbs(s, "read"),
            secs(s, "create_stat"), secs(s, "create"), secs(s, "stat")))
    for c in CACHES:
        print("kosa8 vs 9p cache=%s: write %.2fx, read %.2fx, create+stat of %d files %.2fx "
              "(>1: kosa8 faster; goal >= 1)" % (
                  c, mbs("kosa8", "write") / mbs(c, "write"), mbs("kosa8", "read") / mbs(c, "read"),
                  FILES, secs(c, "create_stat") / secs("kosa8", "create_stat")))
    kr = res["kosa8"]
    print("kosa8-fs per run (median): %d requests, %.1f s CPU" % (
        med([r["requests"] for r in kr]), med([r["fs_cpu"] for r in kr])))


if __name__ == "__main__":
    main()
