# SPDX-License-Identifier: Apache-2.0
# Container isolation inside one VM (docs/agent.md "Containers"), from the attacker's
# position: root in a container of the shared sandbox. The seccomp filter refuses the
# syscalls that reach the whole VM, the capabilities are exactly Docker's default set,
# /proc is masked and read-only where Docker's is, device nodes a container makes cannot
# be opened, and two containers of one sandbox neither see nor signal each other. After
# each attack the daemon and the sandbox still work and the VM's state is unchanged.
import ast
import os
import subprocess

import pytest

from conftest import KOSA8, daemon_pid

pytestmark = pytest.mark.hostile

# Docker's default capability set: CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID
# SETPCAP NET_BIND_SERVICE NET_RAW SYS_CHROOT MKNOD AUDIT_WRITE SETFCAP.
DOCKER_CAPS = 0x00000000a80425fb


def py(home, sandbox, image, code, *flags, timeout=300):
    """Run `code` with python3 in a fresh container; its stdout is a repr() of a dict (the
    test image's python3-minimal has no json or ctypes)."""
    p = home("sandbox", "run", *flags, sandbox, image, "python3", "-c", code, timeout=timeout)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    return ast.literal_eval(p.stdout)


def still_fine(home, sandbox, image, pid):
    """The daemon is the same process and the sandbox still runs a new container."""
    assert daemon_pid(home.path) == pid
    p = home("sandbox", "run", sandbox, image, "python3", "-c", "print('alive')", timeout=300)
    assert p.stdout == "alive\n", (p.returncode, p.stdout, p.stderr)


PROBE_C = r"""
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/syscall.h>
static void t(const char *name, long r) {
	if (r == 0 && !strncmp(name, "clone", 5)) _exit(0);   /* a child we must never have */
	printf("%s %s\n", name, r >= 0 ? "ok" : strerrorname_np(errno));
}
int main(void) {
	int fd = open("/proc/self/ns/net", O_RDONLY);
	t("mount", syscall(SYS_mount, "x", "/tmp", "tmpfs", 0, 0));
	t("umount2", syscall(SYS_umount2, "/proc", 2));
	t("unshare_user", syscall(SYS_unshare, 0x10000000));
	t("unshare_mnt", syscall(SYS_unshare, 0x00020000));
	t("unshare_net", syscall(SYS_unshare, 0x40000000));
	t("clone_newuser", syscall(SYS_clone, 0x10000000 | SIGCHLD, 0, 0, 0, 0));
	t("clone_newpid", syscall(SYS_clone, 0x20000000 | SIGCHLD, 0, 0, 0, 0));
	t("setns", syscall(SYS_setns, fd, 0));
	t("sethostname", syscall(SYS_sethostname, "pwned", 5));
	t("pivot_root", syscall(SYS_pivot_root, "/", "/"));
	t("keyctl", syscall(SYS_keyctl, 0, -3, 0, 0, 0));
	t("add_key", syscall(SYS_add_key, "user", "k", 0, 0, -3));
	t("request_key", syscall(SYS_request_key, 0, 0, 0, 0));
	t("bpf", syscall(SYS_bpf, 0, 0, 0));
	t("perf_event_open", syscall(SYS_perf_event_open, 0, 0, -1, -1, 0));
	t("kexec_load", syscall(SYS_kexec_load, 0, 0, 0, 0));
	t("kexec_file_load", syscall(SYS_kexec_file_load, -1, -1, 0, 0, 0));
	t("init_module", syscall(SYS_init_module, 0, 0, 0));
	t("finit_module", syscall(SYS_finit_module, -1, 0, 0));
	t("delete_module", syscall(SYS_delete_module, "x", 0));
	t("userfaultfd", syscall(SYS_userfaultfd, 0));
	t("swapoff", syscall(SYS_swapoff, "/dev/vda"));
	t("syslog", syscall(SYS_syslog, 3, 0, 0));
	t("open_by_handle_at", syscall(SYS_open_by_handle_at, -100, 0, 0));
	t("clock_settime", syscall(SYS_clock_settime, 0, 0));
	t("iopl", syscall(SYS_iopl, 3));
	t("socket_vsock", syscall(SYS_socket, 40, 1, 0));
	t("reboot", syscall(SYS_reboot, 0xfee1dead, 672274793, 0x1234567, 0));
	t("io_uring_setup", syscall(425, 1, 0));
	t("getpid", syscall(SYS_getpid));
	return 0;
}
"""

RUN_STDIN = ("import os, sys\n"
             "d = sys.stdin.buffer.read()\n"
             "open('/tmp/probe', 'wb').write(d)\n"
             "os.chmod('/tmp/probe', 0o755)\n"
             "os.execv('/tmp/probe', ['probe'])\n")


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    """The attacker's tool: a static binary, brought in on stdin like any download."""
    d = tmp_path_factory.mktemp("probe")
    src, exe = d / "probe.c", d / "probe"
    src.write_text(PROBE_C)
    subprocess.run(["cc", "-static", "-O1", "-D_GNU_SOURCE", "-o", str(exe), str(src)], check=True)
    return exe.read_bytes()


def test_dangerous_syscalls_are_refused(home, sandbox, loaded, probe):
    pid = daemon_pid(home.path)
    p = subprocess.run([KOSA8, "sandbox", "run", sandbox, loaded, "python3", "-c", RUN_STDIN],
                       input=probe, capture_output=True, timeout=300,
                       env=dict(os.environ, KOSA8_HOME=home.path))
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    r = dict(l.split() for l in p.stdout.decode().splitlines())
    assert r.pop("getpid") == "ok", r
    assert r.pop("io_uring_setup") in ("EPERM", "ENOSYS"), r
    assert len(r) == 28 and all(v == "EPERM" for v in r.values()), r
    st = py(home, sandbox, loaded, "st = dict(l.split(':\\t', 1) for l in open('/proc/self/status')"
            ".read().splitlines() if ':\\t' in l)\nprint(repr((st['Seccomp'], st['NoNewPrivs'])))")
    assert st == ("2", "0"), st
    still_fine(home, sandbox, loaded, pid)


CAPS = r'''
st = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
print(repr({k: int(st[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}))
'''


def test_capabilities_are_dockers_default_set(home, sandbox, loaded):
    r = py(home, sandbox, loaded, CAPS)
    assert r == {"CapInh": 0, "CapPrm": DOCKER_CAPS, "CapEff": DOCKER_CAPS,
                 "CapBnd": DOCKER_CAPS, "CapAmb": 0}, {k: hex(v) for k, v in r.items()}
    # another user: no capabilities at all, the same bounding set
    r = py(home, sandbox, loaded, CAPS, "-u", "1000:1000")
    assert r == {"CapInh": 0, "CapPrm": 0, "CapEff": 0, "CapBnd": DOCKER_CAPS, "CapAmb": 0}, r


PROC = r'''
import os
out = {}
for p in ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug"):
    try:
        with open(p, "rb") as f:
            out[p] = len(f.read(4096))
    except OSError as e:
        out[p] = e.strerror
for p, v in (("/proc/sys/vm/overcommit_memory", "1"), ("/proc/sys/kernel/hostname", "pwned"),
             ("/proc/sys/vm/drop_caches", "3"), ("/proc/sysrq-trigger", "s")):
    try:
        with open(p, "w") as f:
            f.write(v)
        out[p] = "written"
    except OSError as e:
        out[p] = e.strerror
out["overcommit"] = open("/proc/sys/vm/overcommit_memory").read()
print(repr(out))
'''


def test_proc_is_masked_and_read_only(home, sandbox, loaded):
    pid = daemon_pid(home.path)
    r = py(home, sandbox, loaded, PROC)
    for p in ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug"):
        assert r[p] == 0 or r[p] == "No such file or directory", (p, r)
    # (the guest kernel has no core dumps or modules: no core_pattern, no modprobe)
    for p in ("/proc/sys/vm/overcommit_memory", "/proc/sys/kernel/hostname", "/proc/sys/vm/drop_caches"):
        assert r[p] == "Read-only file system", (p, r)
    assert r["/proc/sysrq-trigger"] in ("Read-only file system", "No such file or directory"), r
    # the VM's setting is what it was, seen from a fresh container
    again = py(home, sandbox, loaded, PROC)
    assert again["overcommit"] == r["overcommit"] and r["overcommit"].strip() != "1", r
    still_fine(home, sandbox, loaded, pid)


MKNOD = r'''
import os, stat
out = {}
disk = None
for line in open("/proc/partitions").read().splitlines()[2:]:
    f = line.split()
    if len(f) == 4 and f[3].startswith("vd"):
        disk = (int(f[0]), int(f[1]))
        break
out["disk"] = disk
for where in ("/tmp/vd", "/dev/vd", "/dev/shm/vd", "/vd"):
    try:
        os.mknod(where, stat.S_IFBLK | 0o600, os.makedev(*disk))
        out["mknod " + where] = "ok"
    except OSError as e:
        out["mknod " + where] = e.strerror
    try:
        fd = os.open(where, os.O_RDONLY)
        out["open " + where] = os.read(fd, 512).hex()[:32]
        os.close(fd)
    except OSError as e:
        out["open " + where] = e.strerror
try:
    os.mknod("/dev/mem2", stat.S_IFCHR | 0o600, os.makedev(1, 1))
    out["open /dev/mem2"] = os.open("/dev/mem2", os.O_RDONLY) and "opened"
except OSError as e:
    out["open /dev/mem2"] = e.strerror
with open("/dev/null", "w") as f:
    out["devnull"] = f.write("x")
with open("/dev/urandom", "rb") as f:
    out["urandom"] = len(f.read(16))
print(repr(out))
'''


def test_device_nodes_made_in_a_container_cannot_be_opened(home, sandbox, loaded):
    pid = daemon_pid(home.path)
    r = py(home, sandbox, loaded, MKNOD)
    assert r["disk"], r
    for where in ("/tmp/vd", "/dev/vd", "/dev/shm/vd", "/vd"):
        # CAP_MKNOD, as in Docker: the node is made, but every writable mount is nodev
        assert r["mknod " + where] == "ok", r
        assert r["open " + where] == "Permission denied", r
    assert r["open /dev/mem2"] == "Permission denied", r
    assert r["devnull"] == 1 and r["urandom"] == 16, r
    still_fine(home, sandbox, loaded, pid)


NEIGHBOUR = r'''
import os, sys
marker = sys.argv[1]
out = {"pid": os.getpid(), "hostname": os.uname().nodename,
       "ns": {n: os.readlink("/proc/self/ns/" + n) for n in ("pid", "ipc", "uts", "mnt", "net")}}
seen = []
for d in os.listdir("/proc"):
    if d.isdigit():
        try:
            if marker.encode() in open("/proc/%s/cmdline" % d, "rb").read() and int(d) != os.getpid():
                seen.append(int(d))
        except OSError:
            pass
out["seen"] = seen
# signal every pid but our own: only our own namespace's processes can be reached
hit = []
for p in range(2, 4096):
    if p == os.getpid():
        continue
    try:
        os.kill(p, 0)
        hit.append(p)
    except OSError:
        pass
out["signalable"] = hit
print(repr(out))
'''

VICTIM = r'''
import os, time
print(os.uname().nodename, flush=True)
time.sleep(600)
'''


def test_two_containers_are_separated(home, sandbox, loaded):
    pid = daemon_pid(home.path)
    marker = "victim-3f9a1c"
    p = home("sandbox", "start", sandbox, loaded, "python3", "-c", VICTIM, marker, timeout=300)
    assert p.returncode == 0, p.stderr
    victim = p.stdout.strip()
    try:
        p = home("sandbox", "run", sandbox, loaded, "python3", "-c", NEIGHBOUR, marker, timeout=300)
        assert p.returncode == 0, (p.stdout, p.stderr)
        r = ast.literal_eval(p.stdout)
        # the attacker is pid 1 of its own namespace and sees and signals nothing else
        assert r["pid"] == 1 and r["seen"] == [] and r["signalable"] == [], r
        # the victim still runs, untouched, with its own namespaces and hostname
        p = home("sandbox", "exec", sandbox, victim, "python3", "-c",
                 "import os; print(repr({'cmd': open('/proc/1/cmdline','rb').read().decode(errors='replace'),"
                 " 'hostname': os.uname().nodename,"
                 " 'ns': {n: os.readlink('/proc/self/ns/' + n) for n in ('pid', 'ipc', 'uts', 'mnt', 'net')}}))",
                 timeout=300)
        assert p.returncode == 0, (p.stdout, p.stderr)
        v = ast.literal_eval(p.stdout)
        assert marker in v["cmd"], v
        assert v["hostname"] != r["hostname"], (v, r)
        for n in ("pid", "ipc", "uts", "mnt"):
            assert v["ns"][n] != r["ns"][n], (n, v, r)
        # today's default: containers share the VM's network (docs/agent.md, "netns")
        assert v["ns"]["net"] == r["ns"]["net"]
    finally:
        home("sandbox", "stop", "-t", "0", sandbox, victim, timeout=120)
    still_fine(home, sandbox, loaded, pid)


ORDINARY = r'''
import os, socket, subprocess, threading, sysconfig
out = {}
site = sysconfig.get_paths()["purelib"]
os.makedirs(site + "/k8pkg", exist_ok=True)
with open(site + "/k8pkg/__init__.py", "w") as f:
    f.write("V = 42\n")
import importlib; importlib.invalidate_caches()
import k8pkg
out["pkg"] = k8pkg.V
t = threading.Thread(target=lambda: out.__setitem__("thread", 1)); t.start(); t.join()
out["child"] = subprocess.run(["python3", "-c", "print(6*7)"], capture_output=True, text=True).stdout
out["pipe"] = subprocess.run("seq 1 100 | grep -c 1 | tr -d '\\n'", shell=True,
                             capture_output=True, text=True).stdout
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
out["raw"] = s.fileno() > 0
s.close()
os.chown("/tmp", 0, 0)
os.chroot("/")
out["uid"] = os.getuid()
print(repr(out))
'''


def test_ordinary_work_still_works(home, sandbox, loaded):
    r = py(home, sandbox, loaded, ORDINARY)
    assert r == {"pkg": 42, "thread": 1, "child": "42\n", "pipe": "20", "raw": True, "uid": 0}, r
