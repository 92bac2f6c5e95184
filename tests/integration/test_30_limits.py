# SPDX-License-Identifier: Apache-2.0
# Limits hold: a fork bomb, a memory hog and a disk filler end inside their sandbox, and
# the daemon and the sandbox keep answering. A process printing without end does not
# grow the daemon's memory.
import os
import subprocess
import time

from conftest import KOSA8, daemon_pid, wait_for


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_memory_hog_is_oom_killed(home, sandbox, loaded):
    p = home("sandbox", "run", sandbox, loaded, "python3", "-c",
             "x = []\nwhile True: x.append(bytearray(16 << 20))", timeout=300)
    assert p.returncode == 137, (p.returncode, p.stderr)
    p = home("sandbox", "run", sandbox, loaded, "python3", "-c", "print('alive')")
    assert p.stdout == "alive\n"
    audit = home.json("audit", "ls", "--sandbox", sandbox)
    assert any(r["action"] == "sandbox.limit" and r["details"].get("limit") == "oom"
               for r in audit) or any(r["action"] == "sandbox.exit" and
                                      r["details"].get("oom") for r in audit)


def test_fork_bomb_ends_in_its_container(home, sandbox, loaded):
    bomb = ("import os, time\n"
            "n = 0\n"
            "try:\n"
            "    for i in range(100000):\n"
            "        if os.fork() == 0:\n"
            "            time.sleep(30); os._exit(0)\n"
            "        n += 1\n"
            "except OSError as e:\n"
            "    print('stopped after', n, e.errno)\n")
    t0 = time.time()
    p = home("sandbox", "run", sandbox, loaded, "timeout", "-s", "KILL", "60", "python3", "-c",
             bomb, timeout=300)
    assert "stopped after" in p.stdout, (p.returncode, p.stdout, p.stderr)
    # the daemon answers at once while the sandbox recovers
    t1 = time.time()
    assert home("sandbox", "ls").returncode == 0
    assert time.time() - t1 < 10
    p = home("sandbox", "run", sandbox, loaded, "python3", "-c", "print('alive')", timeout=300)
    assert p.stdout == "alive\n", p.stderr


def test_disk_filler_gets_enospc(home, sandbox, loaded):
    # All but the last 64 MiB of the free space is taken at once (fallocate: the blocks are
    # the container's, nothing is written through TCG), then written to the end: the
    # writes that meet the full disk get ENOSPC, and the sandbox lives on.
    p = home("sandbox", "run", sandbox, loaded, "python3", "-c",
             "import errno, os\n"
             "st = os.statvfs('/')\n"
             "pad = os.open('/pad', os.O_CREAT | os.O_WRONLY)\n"
             "os.posix_fallocate(pad, 0, max(1, st.f_bavail * st.f_frsize - (64 << 20)))\n"
             "f = open('/fill', 'wb')\n"
             "n = 0\n"
             "try:\n"
             "    while True: f.write(b'\\1' * (1 << 20)); f.flush(); n += 1\n"
             "except OSError as e:\n"
             "    print('errno', e.errno == errno.ENOSPC, n > 8)\n", timeout=600)
    assert p.stdout.strip() == "errno True True", (p.stdout, p.stderr)
    # the writable layer goes away with the container (deleted in the background by
    # the agent): space comes back within seconds
    def small_write_works():
        p = home("sandbox", "run", sandbox, loaded, "python3", "-c",
                 "open('/small','w').write('x'*1000000); print('ok')")
        return p.stdout == "ok\n"
    assert wait_for(small_write_works, timeout=120, step=2)


def test_endless_output_does_not_grow_the_daemon(home, sandbox, loaded):
    pid = daemon_pid(home.path)
    env = dict(os.environ, KOSA8_HOME=home.path)
    before = rss_kib(pid)
    proc = subprocess.Popen([KOSA8, "sandbox", "run", sandbox, loaded, "python3", "-c",
                             "import sys\nb = b'x' * 65536\nwhile True: sys.stdout.buffer.write(b)"],
                            stdout=subprocess.PIPE, env=env)
    # Read 64 MiB, then stop reading for a while: the daemon must not buffer the rest.
    got = 0
    while got < 64 << 20:
        chunk = proc.stdout.read(1 << 20)
        assert chunk
        got += len(chunk)
    # Back-pressure reached us: the CLI's pipe to us stopped filling (the writer is
    # blocked: a pipe is full before its nominal size when writes do not fill whole pages).
    # From then on the guest keeps trying to write; sample the daemon while it does.
    import array
    import fcntl
    import termios

    def pending():
        buf = array.array("i", [0])
        fcntl.ioctl(proc.stdout.fileno(), termios.FIONREAD, buf)
        return buf[0]
    seen = []

    def stalled():
        seen.append(pending())
        return len(seen) > 4 and seen[-1] > 0 and len(set(seen[-5:])) == 1
    assert wait_for(stalled, 60, 0.2), "the pipe never stopped filling: %s" % seen[-5:]
    during = max(rss_kib(pid) for _ in range(10) if time.sleep(0.3) is None)
    proc.kill()
    proc.wait()
    assert during - before < 64 * 1024, "daemon grew by %d KiB" % (during - before)
    p = home("sandbox", "run", sandbox, loaded, "python3", "-c", "print('alive')")
    assert p.stdout == "alive\n"
