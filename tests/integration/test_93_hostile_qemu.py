# SPDX-License-Identifier: Apache-2.0
# QEMU's jail, seen from the host's /proc and from QEMU's own position.
#
# The attacker here has already left the guest: root in the guest has a QEMU bug and
# runs code as the sandbox's QEMU. The tests look at what that process is (uid,
# capabilities, no_new_privs, seccomp, cgroup, mount namespace, root, descriptors) and
# then act as it (nsenter into its mount namespace with its uid and no capabilities)
# to show what it can reach: nothing of the host's files, no other process. Every
# attack is followed by a check that the daemon, the other sandbox and their files are
# as they were.
import hashlib
import json
import os
import socket
import subprocess

import pytest

from conftest import Home, daemon_pid, new_home, own_home

pytestmark = pytest.mark.hostile

JAIL_BASE = 720000      # the default jail_uids range starts here (docs/design.md)
ROOT_ENTRIES = {"usr", "lib", "lib64", "bin", "sbin", "etc", "dev", "proc"}
# A QEMU that maps a memory file (a restored VM) preloads one library more, read-only
# (src/preload/qemu_ram.c; test_93_hostile_memfile.py)
RESTORED_ENTRIES = ROOT_ENTRIES | {"kosa8-qemu-ram.so"}
CAP_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
TCG_WORDS = "TCG is not a security boundary"


def status(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def record(home, name):
    with open(os.path.join(home.path, "sandboxes", name, "sandbox.json")) as f:
        return json.load(f)


def qemu_pid(home, name):
    pid = record(home, name)["pid"]
    assert pid > 0 and os.path.exists("/proc/%d" % pid), "no QEMU for %s" % name
    return pid


def jail_uid(home, name):
    return JAIL_BASE + 4 * record(home, name)["jail_index"]


def fd_targets(pid):
    d = "/proc/%d/fd" % pid
    out = []
    for fd in os.listdir(d):
        try:
            out.append(os.readlink(os.path.join(d, fd)))
        except FileNotFoundError:
            pass
    return out


def home_digest(home, names):
    """What must not change: the sandboxes' records and the audit chain's head."""
    h = hashlib.sha256()
    for n in names:
        with open(os.path.join(home.path, "sandboxes", n, "sandbox.json"), "rb") as f:
            h.update(f.read())
    for p in ("audit.head", "config.json"):
        fp = os.path.join(home.path, p)
        if os.path.exists(fp):
            with open(fp, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


@pytest.fixture(scope="module")
def second(home, loaded):
    """A second sandbox in the same home: the neighbour QEMU must not reach."""
    p = home("sandbox", "create", "h93b", "--cpus", "1", "--memory", "256", "--disk", "1",
             timeout=300)
    assert p.returncode == 0, p.stderr
    yield "h93b"
    home("sandbox", "rm", "h93b", timeout=120)


def test_qemu_identity_is_the_sandbox_uid_with_nothing_else(home, sandbox):
    pid = qemu_pid(home, sandbox)
    st = status(pid)
    uid = jail_uid(home, sandbox)
    assert uid != 0
    assert st["Uid"].split() == [str(uid)] * 4, st["Uid"]
    # real gid nogroup (it grants nothing), so that exec left QEMU non-dumpable
    assert st["Gid"].split() == ["65534"] + [str(uid)] * 3, st["Gid"]
    assert st["Groups"] == ""
    for f in CAP_FIELDS:
        assert int(st[f], 16) == 0, (f, st[f])
    assert st["NoNewPrivs"] == "1"
    assert st["Seccomp"] == "2"
    # ours and QEMU's own (-sandbox on)
    assert int(st.get("Seccomp_filters", "2")) >= 2


def test_qemu_is_not_dumpable(home, sandbox):
    """Not dumpable: its /proc files are root's, so a process of its own uid (another
    thread of an escape, or a sandbox handed the same uid) cannot read its memory or
    trace it, and it leaves no core file (the guest's memory)."""
    pid = qemu_pid(home, sandbox)
    for f in ("environ", "mem", "maps"):
        assert os.stat("/proc/%d/%s" % (pid, f)).st_uid == 0, f
    with open("/proc/%d/limits" % pid) as f:
        core = [l for l in f if l.startswith("Max core file size")][0].split()
    assert core[4:6] == ["0", "0"], core
    # acting as its uid and gid (setpriv keeps real = effective), no capabilities
    uid = jail_uid(home, sandbox)
    p = subprocess.run(["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups",
                        "--inh-caps=-all", "--bounding-set=-all", "/usr/bin/python3", "-I", "-c",
                        "open('/proc/%d/mem', 'rb')" % pid], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0 and "PermissionError" in p.stderr, (p.returncode, p.stderr)


def test_qemu_is_in_the_sandbox_cgroup(home, sandbox):
    pid = qemu_pid(home, sandbox)
    with open("/proc/%d/cgroup" % pid) as f:
        lines = f.read().splitlines()
    cg = [l for l in lines if "/kosa8/" in l and l.endswith("/" + sandbox)]
    if not any(os.path.exists(p) for p in ("/sys/fs/cgroup/cgroup.controllers",
                                           "/sys/fs/cgroup/memory")):
        pytest.skip("host: this host has no usable cgroups")
    assert cg, lines
    # memory is the one that matters; v1 lists it by name, v2 has one line
    assert any(":memory:" in l or l.startswith("0::") for l in cg), cg


def test_qemu_root_holds_only_what_it_needs(home, sandbox):
    pid = qemu_pid(home, sandbox)
    for ns in ("mnt", "net", "ipc"):
        assert os.readlink("/proc/%d/ns/%s" % (pid, ns)) != os.readlink("/proc/self/ns/" + ns)
    # no new pid namespace: the daemon finds, adopts and kills QEMU by its host pid
    assert os.readlink("/proc/%d/ns/pid" % pid) == os.readlink("/proc/self/ns/pid")
    root = "/proc/%d/root" % pid
    top = set(os.listdir(root))
    assert top <= RESTORED_ENTRIES, top
    assert not os.path.exists(root + "/etc/shadow")
    assert not os.path.exists(root + "/etc/passwd")
    assert set(os.listdir(root + "/etc")) <= {"ld.so.cache", "ld.so.preload"}
    assert not os.path.exists(root + "/root")
    assert not os.path.exists(root + "/tmp")
    assert not os.path.exists(root + home.path)          # no $KOSA8_HOME at all
    accel = home.json("daemon", "status")["accel"]
    devs = set(os.listdir(root + "/dev"))
    assert devs <= {"null", "zero", "random", "urandom", "kvm"}, devs
    if accel == "tcg":
        assert "kvm" not in devs
    # the root itself is read-only
    assert "ro" in [l.split()[3].split(",") for l in open("/proc/%d/mounts" % pid)
                    if l.split()[1] == "/"][0]


def test_qemu_fds_are_its_own_files_only(home, sandbox, second):
    pid = qemu_pid(home, sandbox)
    mine = os.path.join(home.path, "sandboxes", sandbox) + "/"
    images = os.path.join(home.path, "images") + "/"
    guest = home.json("daemon", "status")["guest"]
    allowed_files = {guest["kernel"], guest["initramfs"], "/dev/null", "/dev/urandom",
                     "/dev/random", "/dev/kvm"}
    targets = fd_targets(pid)
    assert any(t.startswith(images) for t in targets), "the pulled image is not attached"
    for t in targets:
        if t.split(":")[0] in ("socket", "anon_inode", "pipe") or t in allowed_files:
            continue
        assert t.startswith(mine) or t.startswith(images), t
        assert not t.endswith(("sandbox.json", "config.json", "audit.log", "audit.head",
                               "kosa8d.lock", "layers.json", "meta.json")), t
    # never the neighbour's files
    other = os.path.join(home.path, "sandboxes", second) + "/"
    assert not [t for t in targets if t.startswith(other)]


def test_two_sandboxes_two_uids(home, sandbox, second):
    a, b = jail_uid(home, sandbox), jail_uid(home, second)
    assert a != b
    assert status(qemu_pid(home, second))["Uid"].split()[0] == str(b)


def as_qemu(home, name, script):
    """Run python `script` where a compromised QEMU would: its mount namespace (so its
    root), its uid and gid, no capabilities, no_new_privs. Returns the parsed JSON it
    prints."""
    pid, uid = qemu_pid(home, name), jail_uid(home, name)
    cmd = ["nsenter", "-t", str(pid), "-m", "-n", "-i", "--", "setpriv", "--reuid", str(uid), "--regid",
           str(uid), "--clear-groups", "--inh-caps=-all", "--bounding-set=-all",
           "--no-new-privs", "/usr/bin/python3", "-I", "-c", script]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


ATTACK = r'''
import errno, json, os, signal, sys
home, targets = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
out = {"root": sorted(os.listdir("/")), "proc": sorted(os.listdir("/proc")),
       "home": os.path.exists(home), "sys": os.path.exists("/proc/sys"),
       "kvm": os.path.exists("/dev/kvm")}
def tryit(name, f):
    try:
        f()
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
tryit("shadow", lambda: open("/etc/shadow").read())
tryit("write_root", lambda: open("/evil", "w").write("x"))
tryit("write_usr", lambda: open("/usr/bin/evil", "w").write("x"))
tryit("write_ldcache", lambda: open("/etc/ld.so.cache", "a").write("x"))
tryit("write_preload", lambda: open("/etc/ld.so.preload", "a").write("x"))
for t in targets:
    tryit("kill_%d" % t, lambda t=t: os.kill(t, signal.SIGKILL))
import socket
def connect():
    s = socket.create_connection(("127.0.0.1", PORT), timeout=2)
    s.close()
tryit("host_loopback", connect)
print(json.dumps(out))
'''


def test_escaped_qemu_reaches_nothing_on_the_host(home, sandbox, second, loaded):
    d = daemon_pid(home.path)
    other = qemu_pid(home, second)
    net = record(home, sandbox)["sidecars"]["net"]["pid"]
    victims = [d, other] + ([net] if net else [])
    before = home_digest(home, [sandbox, second])
    # a service on the host's loopback, which only kosa8-net's policy may open
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    script = ATTACK.replace("sys.argv[1]", repr(home.path)).replace(
        "sys.argv[2]", repr(",".join(map(str, victims)))).replace(
        "PORT", str(srv.getsockname()[1]))
    try:
        r = as_qemu(home, sandbox, script)
    finally:
        srv.close()
    assert r["host_loopback"] in ("ENETUNREACH", "ECONNREFUSED"), r
    assert set(r["root"]) <= RESTORED_ENTRIES, r["root"]
    assert not r["home"] and not r["sys"]
    pids = {p for p in r["proc"] if p.isdigit()}
    assert str(d) not in pids and str(other) not in pids, pids
    assert r["shadow"] == "ENOENT"
    assert r["write_root"] in ("EROFS", "EACCES")
    assert r["write_usr"] in ("EROFS", "EACCES")
    assert r["write_ldcache"] in ("EROFS", "EACCES")
    assert r["write_preload"] in ("ENOENT", "EROFS", "EACCES")   # a restored VM has one
    for v in victims:
        assert r["kill_%d" % v] == "EPERM", r
    if home.json("daemon", "status")["accel"] == "tcg":
        assert not r["kvm"]
    # nothing on the host lost or changed
    assert daemon_pid(home.path) == d and os.path.exists("/proc/%d" % d)
    assert qemu_pid(home, second) == other
    assert home_digest(home, [sandbox, second]) == before
    p = home("sandbox", "run", sandbox, loaded, "python3", "-c", "print('alive')")
    assert p.stdout == "alive\n", p.stderr
    assert home("audit", "verify").returncode == 0


def test_jail_holds_across_checkpoint_rewind_and_fork(home, second):
    home("checkpoint", second, "--label", "j1", check=True)
    src_dir = os.path.join(home.path, "sandboxes", second) + "/"
    home("rewind", second, "--to", "j1", "-y", check=True)
    assert status(qemu_pid(home, second))["Uid"].split()[0] == str(jail_uid(home, second))
    p = home("sandbox", "fork", second, "--from", "j1", "--name", "h93f", timeout=300)
    assert p.returncode == 0, p.stderr
    try:
        fpid = qemu_pid(home, "h93f")
        fuid = jail_uid(home, "h93f")
        assert fuid != jail_uid(home, second)
        assert status(fpid)["Uid"].split() == [str(fuid)] * 4
        # the fork reads its own hard links of the layers, never the source's names
        assert not [t for t in fd_targets(fpid) if t.startswith(src_dir)]
        # the frozen layer is shared (one inode): both QEMUs read it, and each
        # checkpoints on
        assert home("checkpoint", "h93f", "--label", "f1").returncode == 0
        assert home("checkpoint", second, "--label", "j2").returncode == 0
    finally:
        home("sandbox", "rm", "h93f", timeout=120)


def test_pause_resume_jailed(home, second):
    home("sandbox", "pause", second, check=True)
    assert record(home, second)["state"] in ("running", "paused")
    home("sandbox", "resume", second, check=True)
    assert status(qemu_pid(home, second))["NoNewPrivs"] == "1"


def test_tcg_is_said_plainly(home):
    st = home.json("daemon", "status")
    p = home("daemon", "status")
    s = home("daemon", "start")
    assert st["jail"] is True and st.get("jail_warning") is None
    if st["accel"] != "tcg":
        assert not st["tcg"] and TCG_WORDS not in p.stderr + s.stderr
        pytest.skip("the accelerator is %s: the TCG line is for TCG hosts" % st["accel"])
    assert st["tcg"] is True and TCG_WORDS in st["tcg_note"]
    assert p.stderr.count(TCG_WORDS) == 1 and TCG_WORDS not in p.stdout
    assert s.stderr.count(TCG_WORDS) == 1
    c = home("sandbox", "create", "h93t", "--cpus", "1", "--memory", "256", "--disk", "1",
             timeout=300)
    try:
        assert c.returncode == 0, c.stderr
        assert c.stderr.count(TCG_WORDS) == 1 and TCG_WORDS not in c.stdout
    finally:
        home("sandbox", "rm", "h93t", timeout=120)
    j = home("sandbox", "create", "h93u", "--cpus", "1", "--memory", "256", "--disk", "1",
             "--json", timeout=300)
    try:
        assert j.returncode == 0, j.stderr
        # progress lines first, the sandbox last
        assert TCG_WORDS in json.loads(j.stdout.splitlines()[-1])["tcg_note"]
    finally:
        home("sandbox", "rm", "h93u", timeout=120)


@pytest.fixture(scope="module")
def unjailed(python_layout):
    yield from own_home("k8j-", python_layout, config={"jail": False})


def test_jail_off_is_loud_and_audited(unjailed):
    h = unjailed
    st = h.json("daemon", "status")
    assert st["jail"] is False and "NOT jailed" in st["jail_warning"]
    p = h("daemon", "status")
    assert "WARNING" in p.stderr and "OFF" in p.stdout
    starts = [r for r in h.json("audit", "ls") if r["action"] == "daemon.start"]
    assert starts and starts[-1]["details"]["jail"] is False
    h("sandbox", "create", "nj", "--cpus", "1", "--memory", "256", "--disk", "1", check=True,
      timeout=300)
    assert status(qemu_pid(h, "nj"))["Uid"].split()[0] == "0"
    h("sandbox", "rm", "nj", timeout=120)
