#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# netfs_smoke.py - the agent's networking and shared folders, end to end without the
# daemon: boot the guest image under QEMU with a virtio-net NIC (QEMU's own user-mode
# network: traffic goes only to 10.0.2.2, i.e. this host's 127.0.0.1) and a second
# virtio-serial port "kosa8.fs" served by kosa8-fs, send `init` with "net" and "mounts",
# and check from inside containers.
#
#   tests/agent/netfs_smoke.py [-k net|fs|wait|bad] [--guest DIR] [--fs PATH] [--console]
#
# Needs what smoke.py needs, plus kosa8-fs (build/bin or build-fs/bin, or --fs) for the
# shared-folder groups (they skip without it).
import argparse
import hashlib
import http.server
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import smoke  # noqa: E402
from smoke import Agent, check, cid, results, timings  # noqa: E402

TOP = smoke.TOP
APPLETS = sorted(set(smoke.BUSYBOX_APPLETS + ["ip", "wget", "md5sum", "stat", "touch", "readlink"]))
IMG = "sha256:" + "cd" * 32
NET = {"ip": "10.0.2.15", "prefix": 24, "gateway": "10.0.2.2", "dns": ["10.0.2.3", "fec0::3"],
       "ip6": "fec0::15", "prefix6": 64, "gateway6": "fec0::2"}
MOUNTS = [{"index": 0, "guest": "/in", "ro": True}, {"index": 1, "guest": "/out", "ro": False}]


def make_image(work):
    root = os.path.join(work, "rootfs")
    os.makedirs(os.path.join(root, "bin"))
    os.makedirs(os.path.join(root, "etc"))
    os.makedirs(os.path.join(root, "tmp"), mode=0o1777)
    shutil.copy("/bin/busybox", os.path.join(root, "bin", "busybox"))
    for a in APPLETS:
        os.symlink("busybox", os.path.join(root, "bin", a))
    with open(os.path.join(root, "etc", "passwd"), "w") as f:
        f.write("root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n")
    with open(os.path.join(root, "etc", "group"), "w") as f:
        f.write("root:x:0:\napp:x:1000:\n")
    # Debian-style: resolv.conf a symlink into /run (must be replaced, not followed).
    os.symlink("../run/systemd/resolve/stub-resolv.conf", os.path.join(root, "etc", "resolv.conf"))
    img = os.path.join(work, "img.erofs")
    subprocess.run(["mkfs.erofs", "--quiet", "--all-root", img, root], check=True,
                   stdout=subprocess.DEVNULL)
    return img


class VM:
    def __init__(self, work, guest, console=False):
        self.work = work
        self.sock = os.path.join(work, "agent.sock")
        self.fs_sock = os.path.join(work, "fs.sock")
        self.console = os.path.join(work, "console.log")
        raw = os.path.join(work, "scratch.raw")
        scratch = os.path.join(work, "scratch.qcow2")
        with open(raw, "wb") as f:
            f.truncate(1 << 30)
        subprocess.run(["mkfs.ext4", "-q", "-F", raw], check=True)
        subprocess.run(["qemu-img", "convert", "-O", "qcow2", raw, scratch], check=True)
        os.unlink(raw)
        img = make_image(work)
        slot = os.path.join(work, "slot0.qcow2")
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", img, "-F", "raw", slot, "1G"],
                       check=True)
        self.cmd = ["qemu-system-x86_64", "-M", smoke.MACHINE, "-accel", "tcg", "-cpu", "max",
                    "-m", "512", "-smp", "1", "-nodefaults", "-no-user-config", "-nographic",
                    "-kernel", os.path.join(guest, "vmlinux"),
                    "-initrd", os.path.join(guest, "initramfs.cpio"),
                    "-append", "console=ttyS0 quiet panic=-1 reboot=t",
                    "-serial", "stdio" if console else "file:" + self.console,
                    "-device", "virtio-serial-device,max_ports=3",
                    "-chardev", "socket,id=agent,path=%s,server=on,wait=off" % self.sock,
                    "-device", "virtserialport,chardev=agent,name=kosa8.agent",
                    "-chardev", "socket,id=fs,path=%s,server=on,wait=off" % self.fs_sock,
                    "-device", "virtserialport,chardev=fs,name=kosa8.fs",
                    "-blockdev", "driver=file,node-name=scratch-file,filename=" + scratch,
                    "-blockdev", "driver=qcow2,node-name=scratch,file=scratch-file",
                    "-device", "virtio-blk-device,drive=scratch,serial=scratch",
                    "-blockdev", "driver=file,node-name=slot0-file,filename=%s,read-only=on" % slot,
                    "-blockdev", "driver=qcow2,node-name=slot0,file=slot0-file,read-only=on",
                    "-device", "virtio-blk-device,drive=slot0,serial=slot0",
                    "-netdev", "user,id=net0,ipv6-net=fec0::/64",
                    "-device", "virtio-net-device,netdev=net0,mac=52:54:00:12:34:56",
                    "-device", "virtio-rng-device", "-no-reboot"]
        self.t0 = time.time()
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def console_text(self):
        try:
            with open(self.console, errors="replace") as f:
                return f.read()
        except OSError:
            return ""


class FsServer:
    """kosa8-fs on the VM's fs port; start/stop at will (it reconnects by itself)."""

    def __init__(self, binary, work, mounts):
        self.binary, self.work, self.mounts, self.proc, self.n = binary, work, mounts, None, 0

    def start(self):
        self.n += 1
        cmd = [self.binary, "--id", "netfs", "--port", os.path.join(self.work, "fs.sock"),
               "--control", os.path.join(self.work, "fsctl%d.sock" % self.n)]
        for m in self.mounts:
            cmd += ["--mount", m]
        self.log = open(os.path.join(self.work, "kosa8-fs.log"), "a")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def find_fs(opt):
    for p in [opt, os.path.join(TOP, "build", "bin", "kosa8-fs"), os.path.join(TOP, "build-fs", "bin", "kosa8-fs")]:
        if p and os.access(p, os.X_OK):
            return p
    return None


def boot(work, opts):
    vm = VM(work, opts.guest, console=opts.console)
    try:
        ag = Agent(vm.sock)
        ag.wait(lambda: ag.hellos, 120, "HELLO")
    except BaseException:
        vm.stop()
        print("guest console:\n" + vm.console_text()[-4000:])
        raise
    return vm, ag


def init(ag, **kw):
    return ag.call("init", time_ns=time.time_ns(), hostname="netfs", seed="5a" * 32, **kw)


def sh(ag, n, script, timeout=120, **kw):
    ident, r = ag.request("run", container=cid(n), image=IMG, argv=["sh", "-c", script],
                          env=["PATH=/bin", "HOME=/"], rm=True, **kw)
    if not r.get("ok"):
        return r, None
    return r, ag.collect(ident, timeout)


def out(res):
    return (res["out"] + res["err"]).decode(errors="replace") if res else ""


def t_bad(work, opts):
    """Validation of init's net and mounts: every bad one is refused, nothing applied."""
    vm, ag = boot(work, opts)
    try:
        bad = [
            ("mounts", [{"index": 0, "guest": "in", "ro": True}]),
            ("mounts", [{"index": 0, "guest": "/proc/x"}]),
            ("mounts", [{"index": 0, "guest": "/run/kosa8/fs/0"}]),
            ("mounts", [{"index": 0, "guest": "/scratch/x"}]),
            ("mounts", [{"index": 0, "guest": "/images"}]),
            ("mounts", [{"index": 0, "guest": "/"}]),
            ("mounts", [{"index": 0, "guest": "/a/../etc"}]),
            ("mounts", [{"index": 0, "guest": "/a//b"}]),
            ("mounts", [{"index": 0, "guest": "/a/"}]),
            ("mounts", [{"index": 0, "guest": "/a\u0000b"}]),
            ("mounts", [{"index": 0, "guest": "/a"}, {"index": 1, "guest": "/a/b"}]),
            ("mounts", [{"index": 0, "guest": "/a"}, {"index": 0, "guest": "/b"}]),
            ("mounts", [{"index": 16, "guest": "/a"}]),
            ("mounts", [{"index": "0", "guest": "/a"}]),
            ("mounts", [{"index": 0, "guest": "/a", "ro": "yes"}]),
            ("mounts", [{"index": i, "guest": "/m%d" % i} for i in range(17)]),
            ("mounts", {"index": 0}),
            ("net", {"ip": "10.0.2.300"}),
            ("net", {"ip": "10.0.2.15", "prefix": 33}),
            ("net", {"ip": "10.0.2.15", "gateway": "fec0::2"}),
            ("net", {"ip": "10.0.2.15", "dns": ["a.b.c.d"]}),
            ("net", {"ip": "10.0.2.15", "dns": ["1.1.1.1"] * 4}),
            ("net", {"ip": "10.0.2.15", "ip6": "10.0.2.15"}),
            ("net", {"gateway": "10.0.2.2"}),
            ("net", "10.0.2.15"),
        ]
        got = []
        for key, val in bad:
            r = init(ag, **{key: val})
            got.append((key, json.dumps(val)[:60], r.get("ok"), r.get("errno"), r.get("error", "")[:90]))
        check("bad net/mounts fields are refused (EINVAL/E2BIG/ENAMETOOLONG)",
              all(g[2] is False and g[3] in (22, 7, 36) for g in got), "\n    ".join(map(repr, got)))
        r = init(ag)
        st = ag.call("stat")
        check("init without net and mounts still answers {}", r.get("ok") and "mounts" not in r and
              "net" not in r and st.get("ok"), json.dumps(r))
    finally:
        vm.stop()
        if opts.verbose:
            print(vm.console_text())


class Http(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello from the host\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def t_net(work, opts):
    """eth0 address and routes, resolv.conf/hosts in the VM and in containers, a TCP
    connection to 10.0.2.2 (QEMU's slirp: this host's 127.0.0.1)."""
    srv = http.server.HTTPServer(("127.0.0.1", 0), Http)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    vm, ag = boot(work, opts)
    try:
        t = time.time()
        r = init(ag, net=NET)
        check("init with net", r.get("ok") and r.get("net", {}).get("ifname") == "eth0",
              "%s in %.2f s" % (json.dumps(r), time.time() - t))
        r = ag.call("image.mount", slot=0, digest=IMG)
        assert r.get("ok"), r
        r, res = sh(ag, 1, "cat /proc/net/route; ip -4 addr show dev eth0; ip -6 addr show dev eth0;"
                    "ip -6 route; echo ---; cat /etc/resolv.conf; echo ---; cat /etc/hosts; echo ---;"
                    "readlink /etc/resolv.conf || echo notalink; wget -q -O - http://10.0.2.2:%d/" % port)
        o = out(res)
        parts = o.split("---\n")
        route = [l.split() for l in o.splitlines() if l.startswith("eth0")]
        default = [x for x in route if x[1] == "00000000" and x[2] == "0202000A"]  # 10.0.2.2, LE hex
        check("eth0 has 10.0.2.15/24 and a default route via 10.0.2.2 (/proc/net/route)",
              default and "inet 10.0.2.15/24" in o, o[:1500])
        check("eth0 has fec0::15/64 and an IPv6 default route via fec0::2",
              "inet6 fec0::15/64" in o and "default via fec0::2 dev eth0" in o, o[:1500])
        check("container /etc/resolv.conf (the image's symlink replaced, not followed)",
              len(parts) > 3 and parts[1] == "nameserver 10.0.2.3\nnameserver fec0::3\n"
              "options timeout:2 attempts:2\n" and parts[3].startswith("notalink"), repr(parts[1:4]))
        check("container /etc/hosts: localhost and its own name", len(parts) > 2 and
              "127.0.0.1\tlocalhost" in parts[2] and "10.0.2.15\t%s" % cid(1) in parts[2], repr(parts[2:3]))
        check("TCP from a container to 10.0.2.2 (host 127.0.0.1) works", "hello from the host" in o,
              o[-300:])
        r = init(ag, net=NET)
        r2 = init(ag, net=dict(NET, ip="10.0.2.16"))
        check("repeated init: same net ok, different net EBUSY", r.get("ok") and r2.get("errno") == 16,
              "%s %s" % (json.dumps(r), json.dumps(r2)))
    finally:
        srv.shutdown()
        vm.stop()
        if opts.verbose:
            print(vm.console_text())


def t_fs(work, opts):
    """Shared folders through kosa8-fs: ro and rw, big files, the host going away and
    coming back with requests in flight."""
    fsbin = find_fs(opts.fs)
    if not fsbin:
        print("SKIP fs: no kosa8-fs binary (build/bin, build-fs/bin or --fs)")
        return
    hin, hout = os.path.join(work, "hin"), os.path.join(work, "hout")
    os.makedirs(hin)
    os.makedirs(hout)
    with open(os.path.join(hin, "hello.txt"), "w") as f:
        f.write("hello from the host folder\n")
    fs = FsServer(fsbin, work, [hin + ":ro", hout + ":rw"])
    fs.start()
    vm, ag = boot(work, opts)
    try:
        t = time.time()
        r = init(ag, net=NET, mounts=MOUNTS)
        check("init with mounts", r.get("ok") and r.get("mounts") in ("pending", "ready"),
              "%s in %.2f s" % (json.dumps(r), time.time() - t))
        r = ag.call("image.mount", slot=0, digest=IMG)
        assert r.get("ok"), r
        t = time.time()
        r, res = sh(ag, 1, "cat /in/hello.txt; echo hi > /out/new.txt && echo WROTE; "
                    "echo x > /in/nope || echo ROFS; mkdir -p /out/d/e && echo deep > /out/d/e/f; "
                    "ls -la /out; grep -E ' /(in|out) ' /proc/mounts")
        o = out(res)
        timings["first run with mounts (REQ -> EXIT)"] = "%.2f s" % (time.time() - t)
        check("read a host file through /in", "hello from the host folder" in o, o[:1500])
        try:
            new = open(os.path.join(hout, "new.txt")).read()
            deep = open(os.path.join(hout, "d", "e", "f")).read()
        except OSError as e:
            new = deep = repr(e)
        check("a write to /out appears on the host at once", "WROTE" in o and new == "hi\n" and
              deep == "deep\n", "%r %r" % (new, deep))
        check("/in is read-only in the container (EROFS), nothing reaches the host",
              "ROFS" in o and "Read-only file system" in o and not os.path.exists(os.path.join(hin, "nope")),
              o[:1500])
        check("container mounts: /in ro, /out rw, nosuid,nodev", any(
            l.split()[1] == "/in" and l.split()[3].startswith("ro,") and "nosuid" in l and "nodev" in l
            for l in o.splitlines() if " /in " in l) and any(
            l.split()[1] == "/out" and l.split()[3].startswith("rw,") for l in o.splitlines() if " /out " in l),
            "\n".join(l for l in o.splitlines() if "fuse" in l))

        # 6 MiB through the port both ways (messages far above one 32 KiB driver write).
        data = os.urandom(6 << 20)
        with open(os.path.join(hin, "big"), "wb") as f:
            f.write(data)
        want = hashlib.md5(data).hexdigest()
        t = time.time()
        r, res = sh(ag, 2, "md5sum /in/big; cat /in/big > /out/big.copy; md5sum /out/big.copy")
        o = out(res)
        dt = time.time() - t
        try:
            back = hashlib.md5(open(os.path.join(hout, "big.copy"), "rb").read()).hexdigest()
        except OSError as e:
            back = repr(e)
        check("6 MiB read from /in and written to /out, intact", o.count(want) == 2 and back == want,
              "%s host %s in %.2f s" % (o.strip(), back, dt))
        timings["6 MiB in + 6 MiB out through the FUSE shuttle"] = "%.2f s" % dt

        # The host goes away with a container waiting on it, and comes back.
        fs.stop()
        ident, r = ag.request("run", container=cid(3), image=IMG,
                              argv=["sh", "-c", "cat /in/hello.txt; ls /out; echo back > /out/after"],
                              env=["PATH=/bin"], rm=True)
        check("run while the file server is away starts", r.get("ok"), json.dumps(r))
        time.sleep(3)
        done_early = ag.stream_done(ident)
        t = time.time()
        fs.start()
        res = ag.collect(ident, 60)
        o = out(res)
        check("its requests are resent after the host's RESYNC and complete",
              not done_early and "hello from the host folder" in o and "new.txt" in o and
              os.path.exists(os.path.join(hout, "after")) and res["exit"]["code"] == 0,
              "%r, %.2f s after the restart" % (o, time.time() - t))
        r, res = sh(ag, 4, "cat /in/hello.txt")
        check("and later runs work", "hello from the host folder" in out(res), out(res))

        ident, r = ag.request("run", container=cid(5), image=IMG, argv=["sleep", "1000"], env=["PATH=/bin"],
                              detach=True)
        ident, r = ag.request("exec", container=cid(5), argv=["sh", "-c", "cd /out && pwd && cat new.txt"],
                              env=["PATH=/bin"])
        res = ag.collect(ident) if r.get("ok") else None
        check("exec sees the mounts too", "/out\nhi" in out(res), out(res) or json.dumps(r))
        ident, r = ag.request("run", container=cid(6), image=IMG, argv=["pwd"], env=["PATH=/bin"], rm=True,
                              cwd="/out/d/e")
        res = ag.collect(ident) if r.get("ok") else None
        check("cwd inside a shared folder", out(res) == "/out/d/e\n", out(res) or json.dumps(r))
        r = init(ag, mounts=MOUNTS)
        r2 = init(ag, mounts=MOUNTS[:1])
        r3 = init(ag)
        check("repeated init: same mounts ok, other mounts EBUSY, none ok",
              r.get("ok") and r.get("mounts") == "ready" and r2.get("errno") == 16 and r3.get("ok"),
              "%s %s %s" % (json.dumps(r), json.dumps(r2), json.dumps(r3)))
    finally:
        vm.stop()
        fs.stop()
        if opts.verbose:
            print(vm.console_text())
            print(open(os.path.join(work, "kosa8-fs.log")).read()[-3000:])


def t_wait(work, opts):
    """run waits for the folders (bounded), and fails clearly without a file server."""
    fsbin = find_fs(opts.fs)
    if not fsbin:
        print("SKIP wait: no kosa8-fs binary")
        return
    hin = os.path.join(work, "hin")
    os.makedirs(hin)
    with open(os.path.join(hin, "hello.txt"), "w") as f:
        f.write("late host\n")
    fs = FsServer(fsbin, work, [hin + ":rw"])
    vm, ag = boot(work, opts)
    try:
        r = init(ag, mounts=[{"index": 0, "guest": "/data", "ro": False}])
        check("init with mounts and no file server answers at once: pending", r.get("ok") and
              r.get("mounts") == "pending", json.dumps(r))
        ag.call("image.mount", slot=0, digest=IMG)
        t = time.time()
        r = ag.call("run", container=cid(1), image=IMG, argv=["true"], env=["PATH=/bin"], rm=True)
        dt = time.time() - t
        check("run without a file server fails after ~10 s with a clear error",
              not r.get("ok") and "shared folders are not ready" in r.get("error", "") and 9 < dt < 20,
              "%s after %.1f s" % (json.dumps(r), dt))
        st = ag.call("stat")
        check("the agent kept serving meanwhile", st.get("ok"), json.dumps(st))
        ident = ag.next_id  # request() would wait for the answer
        ag.next_id += 1
        ag.send(smoke.REQ, ident, json.dumps({"op": "run", "container": cid(2), "image": IMG,
                                              "argv": ["cat", "/data/hello.txt"], "env": ["PATH=/bin"],
                                              "rm": True}))
        end = time.time() + 2
        while time.time() < end:
            ag.pump(0.2)
        check("... it waits", ident not in ag.resps, json.dumps(ag.resps.get(ident)))
        fs.start()
        t = time.time()
        ag.wait(lambda: ident in ag.resps, 30, "RESP to the waiting run")
        res = ag.collect(ident) if ag.resps[ident].get("ok") else None
        check("a run waiting for the folders starts once the file server answers",
              out(res) == "late host\n", "%s %r, %.2f s after kosa8-fs started" %
              (json.dumps(ag.resps[ident]), out(res), time.time() - t))
    finally:
        vm.stop()
        fs.stop()
        if opts.verbose:
            print(vm.console_text())


class FakeFs:
    """A minimal FUSE answerer on the fs port (INIT, LOOKUP, GETATTR), to check the
    shuttle's framing: resync after garbage, after an incomplete message, resends."""
    IN_HDR = struct.Struct("<IIQQIIII")
    OUT_HDR = struct.Struct("<IiQ")
    RESYNC = 0x4b38
    HELLO = 0x4b39

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        deadline = time.time() + 30
        while True:
            try:
                self.sock.connect(path)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)
        self.buf = b""
        self.seen = []  # opcodes, in order
        self.hellos = 0

    def resync(self):
        nonce = os.urandom(16)
        self.sock.sendall(self.OUT_HDR.pack(32, self.RESYNC, 0) + nonce)
        sync = self.IN_HDR.pack(56, self.RESYNC, 0, 0, 0, 0, 0, 0) + nonce
        deadline = time.time() + 30
        while sync not in self.buf:  # the host discards everything before SYNC
            if time.time() > deadline:
                raise TimeoutError("no SYNC with our nonce")
            self._recv(deadline)
        self.buf = self.buf[self.buf.index(sync) + len(sync):]

    def _recv(self, deadline):
        self.sock.settimeout(max(0.1, deadline - time.time()))
        d = self.sock.recv(1 << 20)
        if not d:
            raise EOFError("fs port closed")
        self.buf += d

    def request(self, timeout=30):
        """The next FUSE request. The agent's HELLO after each SYNC (src/fs/proto.h) is
        answered ENOSYS here, as a kosa8-fs without the RAM data path does, so the
        payloads keep coming through the port."""
        deadline = time.time() + timeout
        while True:
            while len(self.buf) < 40 or len(self.buf) < self.IN_HDR.unpack_from(self.buf)[0]:
                self._recv(deadline)
            h = self.IN_HDR.unpack_from(self.buf)
            msg, self.buf = self.buf[:h[0]], self.buf[h[0]:]
            if h[1] == self.HELLO:
                self.hellos += 1
                self.reply(h, error=-38)
                continue
            self.seen.append(h[1])
            return h, msg[40:]

    @staticmethod
    def attr(ino):
        # ino size blocks atime mtime ctime (ns x3) mode nlink uid gid rdev blksize flags
        return struct.pack("<QQQQQQIIIIIIIIII", ino, 4096, 8, 0, 0, 0, 0, 0, 0, 0o40755, 2, 0, 0, 0,
                           4096, 0)

    def reply(self, h, body=b"", error=0):
        self.sock.sendall(self.OUT_HDR.pack(16 + len(body), error, h[2]) + body)

    def answer(self, h, body):
        op = h[1]
        if op == 26:  # INIT: 7.31, 1 MiB writes
            self.reply(h, struct.pack("<IIIIHHIIHHI28x", 7, 31, 1 << 20, 0, 16, 12, 1 << 20, 1, 256, 0, 0))
        elif op == 1:  # LOOKUP "0"
            self.reply(h, struct.pack("<QQQQII", 2, 0, 60, 60, 0, 0) + self.attr(2))
        elif op == 3:  # GETATTR
            self.reply(h, struct.pack("<QII", 60, 0, 0) + self.attr(h[3]))
        elif op in (2, 36, 42):  # FORGET, INTERRUPT, BATCH_FORGET: no reply
            pass
        else:
            self.reply(h, error=-38)  # ENOSYS


def t_framing(work, opts):
    """The shuttle against a hostile-ish host: garbage, a message cut short, resends."""
    vm, ag = boot(work, opts)
    try:
        fake = FakeFs(vm.fs_sock)
        fake.sock.sendall(b"\xff" * 64)  # not a header: the agent must find its way back
        r = init(ag, mounts=[{"index": 0, "guest": "/x", "ro": True}])
        check("init with mounts against a fake file server", r.get("ok"), json.dumps(r))
        fake.resync()
        h, body = fake.request()
        check("after garbage + RESYNC: SYNC with our nonce, then FUSE_INIT", h[1] == 26, repr(h))
        fake.answer(h, body)
        h, body = fake.request()
        while h[1] == 3:  # the kernel may GETATTR the root first: answer, wait for the LOOKUP
            fake.answer(h, body)
            h, body = fake.request()
        check("then the mounter's LOOKUP of \"0\"", h[1] == 1 and body.rstrip(b"\0") == b"0", repr((h, body)))
        # A reply cut short (a host that died mid-write), then a new host's RESYNC on the
        # same stream, as when the agent did not see the reconnect.
        fake.sock.sendall(FakeFs.OUT_HDR.pack(4096, 0, h[2]) + b"\0" * 100)
        t = time.time()
        fake.resync()
        dt = time.time() - t
        h2, body2 = fake.request()
        check("an incomplete message: RESYNC found after ~1 s, the LOOKUP is resent",
              h2[1] == 1 and h2[2] == h[2] and 0.8 < dt < 5, "%r after %.2f s" % (h2, dt))
        fake.answer(h2, body2)
        t = time.time()
        r = None
        while time.time() - t < 30:
            try:
                h, body = fake.request(timeout=0.3)
                fake.answer(h, body)
            except (socket.timeout, TimeoutError):
                pass
            r = init(ag)
            if r.get("mounts") != "pending":
                break
        check("mounts become ready", r and r.get("mounts") == "ready", json.dumps(r))
        ag.call("image.mount", slot=0, digest=IMG)
        ident = ag.next_id
        ag.next_id += 1
        ag.send(smoke.REQ, ident, json.dumps({"op": "run", "container": cid(1), "image": IMG,
                                              "argv": ["stat", "-c", "%F %a", "/x"], "env": ["PATH=/bin"],
                                              "rm": True}))
        deadline = time.time() + 60
        while ident not in ag.resps and time.time() < deadline:
            try:
                h, body = fake.request(timeout=0.2)
                fake.answer(h, body)
            except (socket.timeout, TimeoutError):
                pass
            ag.pump(0.1)
        res = ag.collect(ident) if ag.resps.get(ident, {}).get("ok") else None
        check("a container sees the folder", out(res).strip() == "directory 755",
              "%s %r" % (json.dumps(ag.resps.get(ident)), out(res)))
        con = vm.console_text()
        check("the agent said what happened", "looking for a resync" in con and "bad header" in con,
              "\n".join(l for l in con.splitlines() if "shared folders" in l))
    finally:
        vm.stop()
        if opts.verbose:
            print(vm.console_text())


TESTS = {"bad": t_bad, "net": t_net, "fs": t_fs, "wait": t_wait, "framing": t_framing}


def main():
    import signal
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", action="append", help="run only these groups: " + ", ".join(TESTS))
    ap.add_argument("--guest", default=os.environ.get("KOSA8_GUEST", os.path.join(TOP, "build", "guest")))
    ap.add_argument("--fs", help="kosa8-fs binary")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--console", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    opts = ap.parse_args()
    for tool in ("qemu-system-x86_64", "qemu-img", "mkfs.ext4", "mkfs.erofs"):
        if not shutil.which(tool):
            print("SKIP: %s not installed" % tool)
            return 0
    if not os.path.exists("/bin/busybox"):
        print("SKIP: /bin/busybox missing (apt-get install busybox-static)")
        return 0
    if not os.path.exists(os.path.join(opts.guest, "initramfs.cpio")):
        print("SKIP: %s missing (make guest)" % opts.guest)
        return 0
    for name in opts.k or list(TESTS):
        work = tempfile.mkdtemp(prefix="kosa8-netfs-")
        try:
            TESTS[name](work, opts)
        except Exception as e:
            import traceback
            traceback.print_exc()
            check(name + " (harness)", False, repr(e))
        finally:
            if opts.keep:
                print("work directory kept:", work)
            else:
                shutil.rmtree(work, ignore_errors=True)
    print("\ntimings:")
    for k, v in timings.items():
        print("  %-50s %s" % (k, v))
    failed = [r for r in results if not r[1]]
    print("\n%d checks, %d failed" % (len(results), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
