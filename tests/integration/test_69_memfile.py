# SPDX-License-Identifier: Apache-2.0
"""Memory as a file (issue 27; docs/design.md "Memory as a file").

A checkpoint's memory is a file (`memory`, plus the devices' state, `devices`) that every
restore maps copy-on-write: forks of one checkpoint share the pages they have not written,
and each writes its own. What held before still holds: processes and values come back,
a checkpoint of before (one migration stream, config.json "checkpoint_memory": "stream")
still rewinds, a daemon killed mid-fork leaves nothing half-made, a VM adopted after a
restart is still checkpointed from its memory file, memory the guest frees goes back to
the host after a restore, and `rm --wipe` zeroes the memory files."""
import json
import os
import signal
import subprocess

import pytest

from conftest import KOSA8, daemon_pid, make_sandbox, own_home, wait_for
from memkit import file_sha, ram_vma, rss_mib

PY = "python:3.12-slim"

# Alive across the checkpoint: a value computed at its start, 16 MiB it touched, both told
# on request; /set changes the value (a write to the process's memory).
HOLDER = ("import hashlib, os, time\n"
          "pad = bytearray(os.urandom(1 << 20)) * 16\n"
          "x = hashlib.sha256(pad).hexdigest()[:16]\n"
          "while True:\n"
          "    if os.path.exists('/set'):\n"
          "        x = open('/set').read().strip(); os.remove('/set')\n"
          "    if os.path.exists('/ask'):\n"
          "        a = '%s %s' % (x, hashlib.sha256(pad).hexdigest()[:16])\n"
          "        open('/ans.tmp', 'w').write(a); os.rename('/ans.tmp', '/ans')\n"
          "        os.remove('/ask')\n"
          "    time.sleep(0.05)\n")

ASK = ("import os, time\n"
       "if os.path.exists('/ans'): os.remove('/ans')\n"
       "open('/ask', 'w').close()\n"
       "for i in range(600):\n"
       "    if os.path.exists('/ans'): print(open('/ans').read()); break\n"
       "    time.sleep(0.05)\n")


@pytest.fixture(scope="module")
def mh(python_layout):
    yield from own_home("k8m-", python_layout)


def set_config(h, cfg):
    with open(os.path.join(h.path, "config.json"), "w") as f:
        json.dump(cfg, f)


def ask(h, name, cid):
    """(value, hash of the 16 MiB) the holder keeps in memory."""
    p = h("sandbox", "exec", name, cid, "python3", "-c", ASK, timeout=300)
    assert p.returncode == 0 and len(p.stdout.split()) == 2, (name, p.stdout, p.stderr)
    return tuple(p.stdout.split())


def set_value(h, name, cid, v):
    # written aside and renamed: the holder must never read a half-written /set
    p = h("sandbox", "exec", name, cid, "sh", "-c", "echo %s > /set.tmp && mv /set.tmp /set" % v,
          timeout=120)
    assert p.returncode == 0, p.stderr
    assert wait_for(lambda: ask(h, name, cid)[0] == v, 60), "the holder never took " + v


def holder(h, name):
    p = h("sandbox", "start", name, PY, "python3", "-c", HOLDER, timeout=300)
    assert p.returncode == 0, p.stderr
    cid = p.stdout.strip()
    assert wait_for(lambda: len(h("sandbox", "exec", name, cid, "python3", "-c", ASK,
                                  timeout=300).stdout.split()) == 2, 120)
    return cid


def sbdir(h, name):
    return os.path.join(h.path, "sandboxes", name)


def qemu_pid(h, name):
    return h.json("sandbox", "inspect", name)["pid"]


SEEN = {}


def test_forks_share_the_checkpoint_and_write_their_own(mh):
    src = make_sandbox(mh, "msrc")
    cid = SEEN["cid"] = holder(mh, src)
    x0 = SEEN["x0"] = ask(mh, src, cid)
    info = mh.json("checkpoint", src, "--label", "c", timeout=300)
    assert info["memory"] == "file", info
    ck = os.path.join(sbdir(mh, src), "checkpoints", "c")
    assert sorted(os.listdir(ck)) == ["devices", "memory", "meta.json"], os.listdir(ck)
    assert json.load(open(os.path.join(ck, "meta.json")))["memory"] == "file"
    st = os.stat(os.path.join(ck, "memory"))
    # as large as the RAM, holding what the guest touched (the holder's 16 MiB at least)
    assert st.st_size == 512 << 20 and 16 << 20 < st.st_blocks * 512 < 512 << 20, st
    spid = qemu_pid(mh, src)
    for f in ("mfa", "mfb"):
        mh("sandbox", "fork", src, "--from", "c", "--name", f, check=True, timeout=300)
    try:
        for f in ("mfa", "mfb"):
            assert ask(mh, f, cid) == x0, f
        # Each fork's RAM is a private mapping of the one checkpoint file: pages both
        # read are the same page cache pages.
        va, vb = ram_vma(qemu_pid(mh, "mfa")), ram_vma(qemu_pid(mh, "mfb"))
        assert va and vb, "a fork's RAM does not map the memory file"
        print("fork a RAM: Rss %d KiB, Pss %d, Shared_Clean %d, Private_Dirty %d" % (
            va["Rss"], va["Pss"], va["Shared_Clean"], va["Private_Dirty"]))
        assert va["Shared_Clean"] > 4096 and vb["Shared_Clean"] > 4096, (va, vb)
        # A fork writes: its sibling and its source do not see it.
        set_value(mh, "mfa", cid, "only-in-a")
        assert ask(mh, "mfb", cid) == x0
        assert ask(mh, src, cid) == x0
        # The source kept running all along, and writes its own.
        assert qemu_pid(mh, src) == spid
        set_value(mh, src, cid, "only-in-src")
        assert ask(mh, "mfa", cid) == ("only-in-a", x0[1])
        assert ask(mh, "mfb", cid) == x0
        # and the checkpoint file is as it was written
        assert os.stat(os.path.join(ck, "memory")).st_blocks == st.st_blocks
    finally:
        for f in ("mfa", "mfb"):
            mh("sandbox", "rm", f, timeout=120)


def test_ten_forks_of_one_checkpoint(mh):
    src = "mten"
    p = mh("sandbox", "create", src, "--cpus", "1", "--memory", "256", "--disk", "1",
           timeout=300)
    assert p.returncode == 0, p.stderr
    names = ["mten%d" % i for i in range(10)]
    try:
        mh("sandbox", "pull", src, PY, check=True, timeout=300)
        cid = holder(mh, src)
        x0 = ask(mh, src, cid)
        mh("checkpoint", src, "--label", "t", check=True, timeout=300)
        mem = os.path.join(sbdir(mh, src), "checkpoints", "t", "memory")
        data = os.stat(mem).st_blocks * 512
        for n in names:
            mh("sandbox", "fork", src, "--from", "t", "--name", n, check=True, timeout=300)
        # Before they write: what the ten hold of their own (pages copied on write) is
        # small against the checkpoint they share.
        vmas = [ram_vma(qemu_pid(mh, n)) for n in names]
        assert all(vmas), "a fork's RAM does not map the memory file"
        own = sum(v["Private_Dirty"] for v in vmas) << 10
        pss = sum(v["Pss"] for v in vmas) << 10
        print("ten forks: checkpoint %d MiB of data; their RAM mappings Pss %d MiB in all, "
              "own pages %d MiB in all" % (data >> 20, pss >> 20, own >> 20))
        assert own < 100 << 20, own
        # Each is whole: the value computed before the checkpoint, a file written after.
        for n in names:
            assert ask(mh, n, cid) == x0, n
            mh("sandbox", "exec", n, cid, "sh", "-c", "echo %s > /after" % n, check=True)
        for n in names:
            p = mh("sandbox", "exec", n, cid, "cat", "/after")
            assert p.stdout.strip() == n, (n, p.stdout, p.stderr)
    finally:
        for n in names:
            mh("sandbox", "rm", n, timeout=120)
        mh("sandbox", "rm", src, timeout=120)


def test_a_checkpoint_of_before_still_rewinds(mh):
    src, cid, x0 = "msrc", SEEN["cid"], SEEN["x0"]
    x_now = ask(mh, src, cid)
    # The migration stream every checkpoint was before this change.
    set_config(mh, {"checkpoint_memory": "stream"})
    assert mh.json("daemon", "status")["idle"]["checkpoint_memory"] == "stream"
    info = mh.json("checkpoint", src, "--label", "old", timeout=300)
    assert info["memory"] == "stream", info
    ck = os.path.join(sbdir(mh, src), "checkpoints", "old")
    assert sorted(os.listdir(ck)) == ["meta.json", "state"], os.listdir(ck)
    assert "memory" not in json.load(open(os.path.join(ck, "meta.json")))
    set_config(mh, {})
    mh("sandbox", "exec", src, cid, "sh", "-c", "echo x > /dirty", check=True)
    set_value(mh, src, cid, "after-old")
    p = mh("rewind", src, "--to", "old", "-y", timeout=300)
    assert p.returncode == 0, p.stderr
    assert ask(mh, src, cid) == x_now
    assert mh("sandbox", "exec", src, cid, "test", "-e", "/dirty").returncode != 0
    # a fork of it, and a checkpoint of the VM it restored, now a memory file
    mh("sandbox", "fork", src, "--from", "old", "--name", "mold", check=True, timeout=300)
    try:
        assert ask(mh, "mold", cid) == x_now
    finally:
        mh("sandbox", "rm", "mold", timeout=120)
    assert mh.json("checkpoint", src, "--label", "new", timeout=300)["memory"] == "file"
    # A "memory" this kosa8 does not know is refused, and nothing changes.
    meta = os.path.join(ck, "meta.json")
    m = json.load(open(meta))
    m["memory"] = "tape"
    json.dump(m, open(meta, "w"))
    pid = qemu_pid(mh, src)
    p = mh("rewind", src, "--to", "old", "-y", timeout=300)
    assert p.returncode != 0 and "memory" in p.stderr and "damaged" in p.stderr, p.stderr
    assert qemu_pid(mh, src) == pid
    # back to where the other tests expect it
    mh("rewind", src, "--to", "c", "-y", check=True, timeout=300)
    assert ask(mh, src, cid) == x0


def test_a_stream_of_a_restored_vm_rewinds(mh):
    """A QEMU that loaded a devices' state runs with migration.send-configuration=off, so
    a stream it saves has no configuration section, nor does one saved by a QEMU that
    loaded such a stream; each restore must load its stream as it was written."""
    src, cid, x0 = "msrc", SEEN["cid"], SEEN["x0"]
    mh("rewind", src, "--to", "c", "-y", check=True, timeout=300)  # a memory file's VM
    set_config(mh, {"checkpoint_memory": "stream"})
    try:
        for label in ("old2", "old3"):      # old3: of the VM old2's stream restored
            set_value(mh, src, cid, "in-" + label)
            assert mh.json("checkpoint", src, "--label", label, timeout=300)["memory"] == \
                "stream"
            set_value(mh, src, cid, "after-" + label)
            p = mh("rewind", src, "--to", label, "-y", timeout=300)
            assert p.returncode == 0, (label, p.stderr)
            assert ask(mh, src, cid) == ("in-" + label, x0[1])
    finally:
        set_config(mh, {})
    mh("rewind", src, "--to", "c", "-y", check=True, timeout=300)
    assert ask(mh, src, cid) == x0


def test_memory_freed_after_a_restore_goes_back_and_the_file_stays(mh):
    src, cid = "msrc", SEEN["cid"]
    mem = os.path.join(sbdir(mh, src), "checkpoints", "c", "memory")
    before = file_sha(mem)
    mh("rewind", src, "--to", "c", "-y", check=True, timeout=300)
    pid = qemu_pid(mh, src)
    assert ram_vma(pid), "the rewound VM does not map the checkpoint's memory file"
    p = mh("sandbox", "start", src, PY, "python3", "-c",
           "import time\nb = bytearray(150 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\n"
           "time.sleep(3600)", timeout=300)
    assert p.returncode == 0, p.stderr
    hog = p.stdout.strip()
    last = [0]

    def steady():
        prev, last[0] = last[0], rss_mib(pid)
        return last[0] > 150 and abs(last[0] - prev) < 2
    assert wait_for(steady, 120, 1)
    peak = rss_mib(pid)
    mh("sandbox", "stop", "-t", "0", src, hog, timeout=120)
    # The guest reports the freed blocks; QEMU drops its private copies (the preloaded
    # library turns its punch into the file into a no-op), so they go back to the host.
    assert wait_for(lambda: rss_mib(pid) < peak - 75, 60), \
        "QEMU's RSS stayed at %d MiB (peak %d)" % (rss_mib(pid), peak)
    assert file_sha(mem) == before, "the checkpoint's memory file changed"
    assert ask(mh, src, cid) == SEEN["x0"]


def test_daemon_killed_during_a_fork_leaves_nothing_half_made(mh):
    src, cid, x0 = "msrc", SEEN["cid"], SEEN["x0"]
    env = dict(os.environ, KOSA8_HOME=mh.path)
    pid = daemon_pid(mh.path)
    log = os.path.join(sbdir(mh, "mcut"), "qemu.log")

    def fork_qemus():
        """The fork's QEMU processes (their stdout is its qemu.log)."""
        found = []
        for p in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.readlink("/proc/%s/fd/1" % p) == log:
                    found.append(int(p))
            except OSError:
                pass
        return found
    proc = subprocess.Popen([KOSA8, "sandbox", "fork", src, "--from", "c", "--name", "mcut"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The kill lands once the fork's QEMU process exists, before its init.
    assert wait_for(fork_qemus, 60, 0.002), "the fork never started its QEMU"
    os.kill(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0, "the fork finished before the kill: " + out
    assert wait_for(lambda: not os.path.exists("/proc/%d" % pid), 10)
    mh.start()
    # The fork's QEMU, which never had its init, is not left running for nobody; nor are
    # the sidecars started before it (kosa8-net names the fork's folder in its argv).
    assert wait_for(lambda: not fork_qemus(), 30), "a fork's QEMU outlived its daemon"

    def fork_sidecars():
        mine = os.path.join(sbdir(mh, "mcut"), "").encode()
        found = []
        for p in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    argv = f.read()
            except OSError:
                continue
            if b"kosa8-" in argv and any(a.startswith(mine) for a in argv.split(b"\0")):
                found.append((int(p), argv.split(b"\0")[0].decode()))
        return found
    assert wait_for(lambda: not fork_sidecars(), 30), \
        "a fork's sidecars outlived its daemon: %s" % fork_sidecars()
    listed = {s["name"]: s["state"] for s in mh.json("sandbox", "ls")}
    assert listed.get("mcut") in (None, "stopped"), listed
    # The checkpoint is whole: a rewind and another fork of it hold what it held.
    mh("rewind", src, "--to", "c", "-y", check=True, timeout=300)
    assert ask(mh, src, cid) == x0
    mh("sandbox", "fork", src, "--from", "c", "--name", "mcut2", check=True, timeout=300)
    try:
        assert ask(mh, "mcut2", cid) == x0
    finally:
        mh("sandbox", "rm", "mcut2", timeout=120)
    if "mcut" in listed:
        p = mh("sandbox", "run", "mcut", PY, "python3", "-c", "print('ok')", timeout=300)
        assert p.stdout == "ok\n", p.stderr
        mh("sandbox", "rm", "mcut", check=True, timeout=120)


def test_an_adopted_vm_is_checkpointed_from_its_memory_file(mh):
    src, cid = "msrc", SEEN["cid"]
    mh("rewind", src, "--to", "c", "-y", check=True, timeout=300)
    qpid = qemu_pid(mh, src)
    os.kill(daemon_pid(mh.path), signal.SIGKILL)
    mh.start()
    assert qemu_pid(mh, src) == qpid, "the VM was not adopted"
    set_value(mh, src, cid, "adopted")
    assert mh.json("checkpoint", src, "--label", "ad", timeout=300)["memory"] == "file"
    set_value(mh, src, cid, "later")
    mh("rewind", src, "--to", "ad", "-y", check=True, timeout=300)
    assert ask(mh, src, cid) == ("adopted", SEEN["x0"][1])


def test_a_resume_cut_before_its_qemu_leaves_the_sandbox_paused(mh):
    """A resume from disk records its sidecars before it spawns QEMU (so a daemon killed
    in between leaves nothing unknown): sandbox.json then says "booting" with no VM.
    The next daemon must see what that is, a sandbox still paused with paused/ whole,
    and resume it with its processes, not stop it."""
    src, cid = "msrc", SEEN["cid"]
    set_value(mh, src, cid, "before-pause")
    mh("sandbox", "pause", src, check=True, timeout=300)
    os.kill(daemon_pid(mh.path), signal.SIGKILL)
    path = os.path.join(sbdir(mh, src), "sandbox.json")
    with open(path) as f:
        rec = json.load(f)
    assert rec["state"] == "paused" and not rec["pid"], rec
    rec["state"] = "booting"        # what the daemon writes as the resume begins
    with open(path, "w") as f:
        json.dump(rec, f)
    mh.start()
    assert mh.json("sandbox", "inspect", src)["state"] == "paused"
    assert ask(mh, src, cid) == ("before-pause", SEEN["x0"][1])     # resumes it


def test_rm_wipe_zeroes_memory_files_a_fork_does_not_share(mh):
    src, cid = "msrc", SEEN["cid"]
    mh("sandbox", "fork", src, "--from", "c", "--name", "mwf", check=True, timeout=300)
    try:
        d = sbdir(mh, src)
        mh("sandbox", "pause", src, check=True, timeout=300)
        paused = os.path.join(d, "paused", "memory")
        assert os.path.exists(paused) and mh.json("sandbox", "inspect", src)["state"] == "paused"
        fds = {n: os.open(p, os.O_RDONLY) for n, p in (
            ("ad", os.path.join(d, "checkpoints", "ad", "memory")),
            ("c", os.path.join(d, "checkpoints", "c", "memory")),
            ("paused", paused))}
        try:
            shared = file_sha(fds["c"])
            assert os.fstat(fds["c"]).st_nlink == 2       # the fork's link to it
            mh("sandbox", "rm", "--wipe", src, check=True, timeout=300)
            for n in ("ad", "paused"):
                f = os.fdopen(os.dup(fds[n]), "rb")
                assert not f.read().strip(b"\0"), "%s's memory was not zeroed" % n
                f.close()
            # the file the fork maps is left: its memory, still in use
            assert file_sha(fds["c"]) == shared
        finally:
            for fd in fds.values():
                os.close(fd)
        assert ask(mh, "mwf", cid) == SEEN["x0"]
    finally:
        mh("sandbox", "rm", "mwf", timeout=120)
