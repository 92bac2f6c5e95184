# SPDX-License-Identifier: Apache-2.0
# Daemon kill -9 and restart, a tampered guest image refused, audit tampering detected.
import json
import os
import shutil
import signal

from conftest import Home, TOP, daemon_pid, new_home, wait_for


def test_kill9_restart_adopts_running_vm(home, sandbox, loaded):
    cid = home("sandbox", "start", sandbox, loaded, "sleep", "infinity", check=True).stdout.strip()
    pid = daemon_pid(home.path)
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: not os.path.exists("/proc/%d" % pid), 10), "kill -9 did not end it"
    home.start()
    ls = home.json("sandbox", "ls")
    me = [s for s in ls if s["name"] == sandbox]
    assert me and me[0]["state"] == "running", ls
    ps = home.json("sandbox", "ps", sandbox)
    assert any(c["id"] == cid and c["running"] for c in ps), ps
    p = home("sandbox", "exec", sandbox, cid, "python3", "-c", "print('still here')")
    assert p.stdout == "still here\n", p.stderr
    home("sandbox", "stop", sandbox, cid)


def test_stopped_sandbox_boots_again_on_use(home, sandbox, loaded):
    home.stop()
    home.start()
    me = [s for s in home.json("sandbox", "ls") if s["name"] == sandbox]
    assert me and me[0]["state"] == "stopped"
    p = home("sandbox", "run", sandbox, loaded, "python3", "-c", "print('back')")
    assert p.stdout == "back\n", p.stderr
    me = [s for s in home.json("sandbox", "ls") if s["name"] == sandbox]
    assert me[0]["state"] == "running"
    assert any(r["action"] == "sandbox.boot" for r in home.json("audit", "ls", "--sandbox", sandbox))


def test_audit_records_actions_and_verifies(home, sandbox):
    recs = home.json("audit", "ls")
    actions = {r["action"] for r in recs}
    for a in ("daemon.start", "image.load", "sandbox.create", "sandbox.pull", "sandbox.run",
              "sandbox.exec", "sandbox.start"):
        assert a in actions, (a, actions)
    run = [r for r in recs if r["action"] == "sandbox.exec"]
    assert run and run[-1]["details"]["argv"]
    seqs = [r["seq"] for r in recs]
    assert seqs == sorted(seqs)
    p = home("audit", "verify")
    assert p.returncode == 0, p.stdout + p.stderr


def guest_dir():
    return os.path.join(TOP, "build", "guest")


def test_tampered_guest_image_is_refused():
    """Changed after the daemon started: status says so (its check is remembered only
    while the files keep their identity: a write in place changes their ctime), and no
    sandbox boots it."""
    bad = new_home("k8g-")
    gdir = os.path.join(bad, "guest")
    shutil.copytree(guest_dir(), gdir)
    h = Home(os.path.join(bad, "home"))
    from conftest import run
    try:
        run(["daemon", "start", "--accel", "tcg"], h.path, check=True, timeout=120,
            env_extra={"KOSA8_GUEST_DIR": gdir})
        for _ in range(2):      # hashed, then remembered
            g = h.json("daemon", "status")["guest"]
            assert g["verified"] and not g["error"], g
        with open(os.path.join(gdir, "initramfs.cpio"), "r+b") as f:   # same size, inode
            f.seek(1000)
            b = f.read(1)
            f.seek(1000)
            f.write(bytes([b[0] ^ 0xff]))
        g = h.json("daemon", "status")["guest"]
        assert not g["verified"] and "does not match its manifest" in g["error"], g
        p = h("sandbox", "create", "x", "--memory", "256")
        assert p.returncode != 0
        assert "does not match its manifest" in p.stderr
        recs = h.json("audit", "ls")
        assert any(r["action"] in ("sandbox.boot.refused", "sandbox.create.failed") for r in recs)
        assert not any(s["name"] == "x" for s in h.json("sandbox", "ls"))
    finally:
        h.stop()
        shutil.rmtree(bad, ignore_errors=True)


def test_audit_tampering_detected():
    h = Home(new_home("k8a-"))
    try:
        h.start("--accel", "tcg")
        for i in range(3):
            h("sandbox", "create", "bad name %d" % i)   # refused, but harmless
        h("image", "ls")
        h.stop()
        h.start("--accel", "tcg")
        h.stop()
        log = os.path.join(h.path, "audit.log")
        with open(log) as f:
            lines = f.read().splitlines()
        assert len(lines) >= 4
        original = list(lines)
        headf = os.path.join(h.path, "audit.head")
        with open(headf) as f:
            head = f.read()

        def verify_after(mutated):
            with open(log, "w") as f:
                f.write("".join(l + "\n" for l in mutated))
            h.start("--accel", "tcg")
            p = h("audit", "verify", "--json")
            h.stop()
            with open(log, "w") as f:
                f.write("".join(l + "\n" for l in original))
            with open(headf, "w") as f:
                f.write(head)
            return p

        edited = list(original)
        rec = json.loads(edited[1])
        rec["details"]["forged"] = True
        edited[1] = json.dumps(rec, separators=(",", ":"))
        p = verify_after(edited)
        assert p.returncode != 0 and json.loads(p.stdout)["first_bad"] == 2, p.stdout
        p = verify_after(original[:1] + original[2:])           # removed
        assert p.returncode != 0
        p = verify_after(original[:2] + [original[1]] + original[2:])   # inserted (duplicate)
        assert p.returncode != 0
        p = verify_after([original[0], original[2], original[1]] + original[3:])   # reordered
        assert p.returncode != 0
        p = verify_after(original[:-1])                          # cut-off tail
        assert p.returncode != 0
        h.start("--accel", "tcg")
        assert h("audit", "verify").returncode == 0
    finally:
        h.stop()
        shutil.rmtree(h.path, ignore_errors=True)


def test_rm_removes_everything(home, loaded):
    # --egress deny is the default and what the guide spells out: accepted as such
    home("sandbox", "create", "gone", "--cpus", "1", "--memory", "256", "--disk", "1",
         "--egress", "deny", check=True)
    assert [s for s in home.json("sandbox", "ls") if s["name"] == "gone"][0]["egress"] == "deny"
    d = os.path.join(home.path, "sandboxes", "gone")
    assert os.path.isdir(d)
    p = home("sandbox", "rm", "gone", "--wipe")
    assert p.returncode == 0, p.stderr
    assert not os.path.exists(d)
    assert not any(s["name"] == "gone" for s in home.json("sandbox", "ls"))
    assert home("sandbox", "inspect", "gone").returncode == 4
