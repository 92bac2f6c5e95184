# SPDX-License-Identifier: Apache-2.0
# containerd-shim-kosa8-v2 under Debian's containerd 1.6 and ctr (docs/containerd.md): a
# containerd of the test's own (ctrkit.py) runs tasks with the kosa8 runtime against the
# session's kosa8d; every task is a real VM.
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import daemon_pid, wait_for, wait_or_fail
from ctrkit import IMAGE, RUNTIME, ctrd, owned, wait_task  # noqa: F401 (ctrd: a fixture)


class Events:
    """`ctr events` in the background: the topics containerd received, in order."""

    def __init__(self, c):
        self.p = subprocess.Popen(["ctr", "-a", c.sock, "events"], stdout=subprocess.PIPE,
                                  text=True)
        self.lines = []
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()
        time.sleep(0.5)

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line)

    def topics(self, needle):
        # "DATE TIME +0000 UTC NAMESPACE TOPIC EVENT"
        return [ln.split()[5] for ln in self.lines if needle in ln and len(ln.split()) > 5]

    def stop(self):
        self.p.terminate()
        self.p.wait()


def test_cri_config_is_loaded(ctrd):
    """The documented CRI runtime entry is accepted by containerd's CRI plugin."""
    p = ctrd.check("plugins", "ls")
    cri = [ln for ln in p.stdout.splitlines() if " cri " in ln and "grpc" in ln]
    assert cri and cri[0].split()[-1] == "ok", p.stdout
    assert "Type:io.containerd.kosa8.v2" in ctrd.log_text()


def test_run_output_exit_code_and_stdin(ctrd, home):
    p = ctrd.run("t-out", "python3", "-c",
                 "import sys; print(6*7); print('to-stderr', file=sys.stderr); sys.exit(3)")
    assert p.returncode == 3, p.stderr
    assert p.stdout == "42\n"
    assert "to-stderr" in p.stderr
    p = ctrd.run("t-in", "python3", "-c", "import sys; print(sys.stdin.read().upper())",
                 input="hello from ctr\n")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "HELLO FROM CTR\n\n"
    # --rm took the task's sandbox with it, and the audit log says who made it
    assert not owned(home, "t-out") and not owned(home, "t-in")
    recs = [r for r in home.json("audit", "ls", "--action", "sandbox.owner")
            if (r.get("details") or {}).get("id") == "t-out"]
    assert recs and recs[0]["details"]["kind"] == "containerd", recs


def test_exec_pause_resume_kill_and_events(ctrd, home):
    ev = Events(ctrd)
    try:
        ctrd.check("run", "-d", "--runtime", RUNTIME, IMAGE, "t-long", "sleep", "1000")
        wait_task(ctrd, "t-long", "RUNNING")
        sb = owned(home, "t-long")
        assert len(sb) == 1 and sb[0]["owner"] == {"kind": "containerd", "namespace": "default",
                                                   "id": "t-long"}, sb
        name = sb[0]["name"]
        st = home.json("daemon", "status")
        assert {"name": name, "owner": sb[0]["owner"]} in st["owned_sandboxes"], st
        assert "made by containerd-shim-kosa8-v2" in home("daemon", "status").stdout
        # exec: output, exit code, stdin
        p = ctrd.ctr("task", "exec", "--exec-id", "e1", "t-long", "sh", "-c",
                     "echo $((6*7)); exit 4")
        assert (p.returncode, p.stdout) == (4, "42\n"), p.stderr
        p = ctrd.ctr("task", "exec", "--exec-id", "e2", "t-long", "cat", input="piped\n")
        assert (p.returncode, p.stdout) == (0, "piped\n"), p.stderr
        # ps: the init's pid in the VM
        ps = ctrd.check("task", "ps", "t-long").stdout.splitlines()
        assert len(ps) == 2 and int(ps[1].split()[0]) > 1, ps
        # pause and resume: the VM's vCPUs stop and go on
        ctrd.check("task", "pause", "t-long")
        assert ctrd.tasks()["t-long"] == "PAUSED"
        assert owned(home, "t-long")[0]["state"] == "paused"
        ctrd.check("task", "resume", "t-long")
        assert ctrd.tasks()["t-long"] == "RUNNING"
        assert owned(home, "t-long")[0]["state"] == "running"
        p = ctrd.ctr("task", "exec", "--exec-id", "e3", "t-long", "echo", "after")
        assert p.stdout == "after\n", p.stderr
        # kill: the signal reaches the process (sleep as PID 1 ignores TERM: KILL)
        ctrd.check("task", "kill", "-s", "SIGKILL", "t-long")
        wait_task(ctrd, "t-long", "STOPPED", 60)
        p = ctrd.check("task", "rm", "t-long")
        assert "137" in p.stderr + p.stdout, p
        ctrd.check("container", "rm", "t-long")
        assert not owned(home, "t-long")
        assert not any(s["name"] == name for s in home.json("sandbox", "ls"))
        wait_for(lambda: "/tasks/delete" in ev.topics("t-long"), 10)
    finally:
        ev.stop()
    topics = [t for t in ev.topics("t-long") if t.startswith("/tasks/")]
    want = ["/tasks/create", "/tasks/start", "/tasks/exec-added", "/tasks/exec-started",
            "/tasks/paused", "/tasks/resumed", "/tasks/exit", "/tasks/delete"]
    for t in want:
        assert t in topics, (t, topics)
    # the contract's order: create, start, then an exit; the task's delete last
    assert topics.index("/tasks/create") < topics.index("/tasks/start") < \
        topics.index("/tasks/exit")
    assert topics[-1] == "/tasks/delete", topics


def test_tty(ctrd):
    """ctr run -t: the process gets a terminal in the VM (ctr needs one: script(1))."""
    p = subprocess.run(["script", "-qec", "ctr -a %s run --fifo-dir %s/fifo -t --rm --runtime "
                        "%s %s t-tty sh -c 'tty; exit 6'" % (ctrd.sock, ctrd.dir, RUNTIME, IMAGE),
                        "/dev/null"],
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert "/dev/pts/" in p.stdout, p.stdout + p.stderr
    assert p.returncode == 6, p.stdout + p.stderr


def test_two_tasks_at_once(ctrd, home):
    out = {}

    def one(name):
        out[name] = ctrd.run(name, "python3", "-c",
                             "import time, socket; time.sleep(4); print(socket.gethostname())")

    ts = [threading.Thread(target=one, args=(n,)) for n in ("t-a", "t-b")]
    for t in ts:
        t.start()
    both = wait_for(lambda: owned(home, "t-a") and owned(home, "t-b") and
                    owned(home, "t-a")[0]["name"] != owned(home, "t-b")[0]["name"], 240)
    for t in ts:
        t.join(300)
    assert both, "the two tasks never ran in two sandboxes at once"
    for n in ("t-a", "t-b"):
        assert out[n].returncode == 0, out[n].stderr
        assert len(out[n].stdout.strip()) == 12, out[n].stdout     # the container's id
    assert out["t-a"].stdout != out["t-b"].stdout
    assert not owned(home, "t-a") and not owned(home, "t-b")


def test_pod_containers_share_one_sandbox(ctrd, home):
    """What CRI does, spelled with ctr's annotations: a pod's sandbox container makes the
    VM, its containers run in it, one shim serves them all."""
    pod = ["--annotation", "io.kubernetes.cri.sandbox-id=pod-x"]
    ctrd.check("run", "-d", "--runtime", RUNTIME, *pod, "--annotation",
               "io.kubernetes.cri.container-type=sandbox", IMAGE, "pod-x", "/pause")
    wait_task(ctrd, "pod-x", "RUNNING")
    try:
        sb = owned(home, "pod-x")
        assert len(sb) == 1 and sb[0]["owner"].get("pod") is True, sb
        ctr = pod + ["--annotation", "io.kubernetes.cri.container-type=container"]
        a = ctrd.run("pod-x-a", "sh", "-c", "echo a > /tmp/a; hostname", flags=ctr)
        b = ctrd.run("pod-x-b", "sh", "-c", "hostname; ls /tmp", flags=ctr)
        assert a.returncode == 0 and b.returncode == 0, (a.stderr, b.stderr)
        assert a.stdout != b.stdout       # containers of their own in the one VM
        assert "a" not in b.stdout.split()[1:], b.stdout
        assert len(owned(home, "pod-x")) == 1 and not owned(home, "pod-x-a")
        assert len(ctrd.shim_pids()) == 1, ctrd.shim_pids()
        # one container of a pod does not pause the VM the others run in
        ctrd.check("run", "-d", "--runtime", RUNTIME, *ctr, IMAGE, "pod-x-c", "sleep", "100")
        wait_task(ctrd, "pod-x-c", "RUNNING")
        p = ctrd.ctr("task", "pause", "pod-x-c")
        assert p.returncode != 0 and "pause the pod" in p.stderr, p.stderr
        ctrd.check("task", "kill", "-s", "SIGKILL", "pod-x-c")
        wait_task(ctrd, "pod-x-c", "STOPPED")
        ctrd.check("task", "rm", "pod-x-c")
        ctrd.check("container", "rm", "pod-x-c")
    finally:
        ctrd.ctr("task", "kill", "-s", "SIGKILL", "pod-x")
        wait_task(ctrd, "pod-x", "STOPPED")
        ctrd.check("task", "rm", "pod-x")
        ctrd.check("container", "rm", "pod-x")
    assert not owned(home, "pod-x")


def test_containerd_restart_keeps_the_task(ctrd, home):
    """containerd reconnects to the running shim (the bundle's address file): the task
    runs on, and its exec, kill and delete work; its events reach the new containerd."""
    ctrd.check("run", "-d", "--runtime", RUNTIME, IMAGE, "t-cr", "sleep", "1000")
    wait_task(ctrd, "t-cr", "RUNNING")
    pids = ctrd.shim_pids()
    ctrd.restart()
    assert ctrd.tasks().get("t-cr") == "RUNNING"
    assert ctrd.shim_pids() == pids
    p = ctrd.ctr("task", "exec", "--exec-id", "e1", "t-cr", "echo", "after")
    assert p.stdout == "after\n", p.stderr
    ev = Events(ctrd)
    try:
        ctrd.check("task", "kill", "-s", "SIGKILL", "t-cr")
        wait_task(ctrd, "t-cr", "STOPPED")
        wait_or_fail(lambda: "/tasks/exit" in ev.topics("t-cr"), "the exit event", 30)
    finally:
        ev.stop()
    ctrd.check("task", "rm", "t-cr")
    ctrd.check("container", "rm", "t-cr")
    assert not owned(home, "t-cr")


def test_killed_shim_is_cleaned_up(ctrd, home):
    """kill -9 of the shim: containerd runs `delete`, which removes the task's sandbox."""
    ctrd.check("run", "-d", "--runtime", RUNTIME, IMAGE, "t-dead", "sleep", "1000")
    wait_task(ctrd, "t-dead", "RUNNING")
    assert owned(home, "t-dead")
    pids = ctrd.shim_pids()
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)
    wait_or_fail(lambda: "t-dead" not in ctrd.tasks() or ctrd.tasks()["t-dead"] == "STOPPED",
                 "containerd to notice the dead shim", 60)
    wait_or_fail(lambda: not owned(home, "t-dead"), "the task's sandbox to go", 60)
    ctrd.ctr("task", "rm", "t-dead")
    ctrd.check("container", "rm", "t-dead")
    assert "cleaning up dead shim" in ctrd.log_text()


def test_kosa8d_restart_fails_the_task_cleanly(ctrd, home):
    """kosa8d killed and started again: the task's stream is gone, so the shim stops its
    container and reports it exited 255; delete then removes its sandbox."""
    ev = Events(ctrd)
    try:
        ctrd.check("run", "-d", "--runtime", RUNTIME, IMAGE, "t-rs", "sh", "-c",
                   "while true; do sleep 1; done")
        wait_task(ctrd, "t-rs", "RUNNING")
        name = owned(home, "t-rs")[0]["name"]
        pid = daemon_pid(home.path)
        os.kill(pid, signal.SIGKILL)
        wait_or_fail(lambda: not os.path.exists("/proc/%d" % pid), "kosa8d to die", 10)
        home.start()
        wait_task(ctrd, "t-rs", "STOPPED", 180)
        assert home.json("sandbox", "ps", name) == [], "the container still runs"
        wait_for(lambda: "/tasks/exit" in ev.topics("t-rs"), 10)
        exits = [ln for ln in ev.lines if "/tasks/exit" in ln and "t-rs" in ln]
        assert exits and '"exit_status":255' in exits[0].replace(" ", ""), exits
        p = ctrd.check("task", "rm", "t-rs")
        ctrd.check("container", "rm", "t-rs")
        assert not owned(home, "t-rs"), p
    finally:
        ev.stop()
