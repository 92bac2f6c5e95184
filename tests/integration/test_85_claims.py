# SPDX-License-Identifier: Apache-2.0
# What the docs promise and no other test checked: the API socket is 0600, no host
# environment variable reaches a sandbox, the guest kernel and initramfs are checked before
# every boot (not only the first), and `rm --wipe` overwrites what the guest wrote before
# the files go.
import os
import shutil
import stat

import pytest

from conftest import TOP, Home, make_sandbox, new_home, own_home, run, wait_for

CANARY = "k8-canary-7f3a9c"


@pytest.fixture(scope="module")
def ch(python_layout):
    yield from own_home("k8c-", python_layout)


def test_api_socket_is_0600_and_root_only(ch):
    st = os.stat(os.path.join(ch.path, "kosa8d.sock"))
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
    assert st.st_uid == os.geteuid()
    assert stat.S_IMODE(os.stat(ch.path).st_mode) == 0o700


def test_no_host_environment_reaches_a_sandbox(python_layout):
    """A variable in the daemon's environment and one in the CLI's: neither is in a
    container's environment, a process's environ in the VM, or the kernel command line."""
    h = Home(new_home("k8e-"))
    try:
        run(["daemon", "start"], h.path, check=True, timeout=200,
            env_extra={"K8_DAEMON_SIDE": CANARY + "-daemon"})
        h("image", "load", python_layout, "--tag", "python:3.12-slim", check=True, timeout=600)
        make_sandbox(h, "env")
        script = ("import os\n"
                  "seen = ' '.join('%%s=%%s' %% kv for kv in os.environ.items())\n"
                  "for p in os.listdir('/proc'):\n"
                  "    if p.isdigit():\n"
                  "        try: seen += open('/proc/%%s/environ' %% p, 'rb').read().decode('latin1')\n"
                  "        except OSError: pass\n"
                  "seen += open('/proc/cmdline').read()\n"
                  "print(len(seen), 'CANARY' if %r in seen else 'clean')\n" % CANARY)
        p = run(["sandbox", "run", "env", "python:3.12-slim", "python3", "-c", script],
                h.path, timeout=300, env_extra={"K8_CLI_SIDE": CANARY + "-cli"})
        assert p.returncode == 0, p.stderr
        n, verdict = p.stdout.split()
        assert int(n) > 20, p.stdout          # it did read an environment
        assert verdict == "clean", "a host variable reached the sandbox"
        # positive control: the same probe sees a variable passed on purpose
        p = run(["sandbox", "run", "--env", "PASSED=" + CANARY, "env", "python:3.12-slim",
                 "python3", "-c", script], h.path, timeout=300)
        assert p.returncode == 0 and p.stdout.split()[1] == "CANARY", p.stdout + p.stderr
    finally:
        h.stop()
        shutil.rmtree(h.path, ignore_errors=True)


def _flip(path, off):
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0xff]))


def test_guest_image_checked_before_every_boot(python_layout):
    """Tampering after the first boot is caught at the next: the kernel, then the
    initramfs; with both restored it boots again."""
    base = new_home("k8g-")
    gdir = os.path.join(base, "guest")
    shutil.copytree(os.path.join(TOP, "build", "guest"), gdir)
    h = Home(os.path.join(base, "home"))
    env = {"KOSA8_GUEST_DIR": gdir}

    def restart():
        h.stop()
        run(["daemon", "start"], h.path, check=True, timeout=200, env_extra=env)

    try:
        run(["daemon", "start"], h.path, check=True, timeout=200, env_extra=env)
        h("image", "load", python_layout, "--tag", "python:3.12-slim", check=True, timeout=600)
        make_sandbox(h, "g")
        for name in ("vmlinux", "initramfs.cpio"):
            path = os.path.join(gdir, name)
            keep = path + ".good"
            shutil.copyfile(path, keep)
            _flip(path, os.path.getsize(path) // 2)
            restart()                                 # the sandbox is stopped now
            p = h("sandbox", "run", "g", "python:3.12-slim", "true", timeout=300)
            assert p.returncode != 0, "booted a tampered %s" % name
            assert "does not match its manifest" in p.stderr, p.stderr
            os.replace(keep, path)
        restart()
        p = h("sandbox", "run", "g", "python:3.12-slim", "python3", "-c", "print(7)", timeout=300)
        assert p.stdout == "7\n", p.stderr
    finally:
        h.stop()
        shutil.rmtree(base, ignore_errors=True)


MARK = b"K8WIPE-" * 9362        # 64 KiB of a pattern the guest writes


def _disk_fds(sbdir):
    """Open every disk file of the sandbox now, so its bytes can be read after unlink."""
    fds = {}
    for n in os.listdir(sbdir):
        if n.endswith(".qcow2") and not n.startswith("slot"):
            fds[n] = os.open(os.path.join(sbdir, n), os.O_RDONLY)
    return fds


def _holds_mark(fd):
    size = os.fstat(fd).st_size
    off, tail = 0, b""
    while off < size:
        chunk = os.pread(fd, 1 << 20, off)
        if not chunk:
            break
        if MARK[:4096] in tail + chunk:
            return True
        tail = chunk[-4096:]
        off += len(chunk)
    return False


@pytest.mark.parametrize("wipe", [False, True])
def test_rm_wipe_overwrites_what_the_guest_wrote(ch, wipe):
    """The guest writes a pattern to its disk (after a checkpoint, so it lands in a later
    layer too); the test holds every disk file open, removes the sandbox, and reads the
    files' blocks after unlink. Without --wipe the pattern is there (the control), with
    --wipe it is not."""
    name = "w%d" % wipe
    make_sandbox(ch, name)
    info = ch.json("sandbox", "inspect", name)
    ch("checkpoint", name, "--label", "base", check=True, timeout=300)
    # A container that keeps running keeps its writable layer (and so the bytes) on disk.
    cid = ch("sandbox", "start", name, "python:3.12-slim", "python3", "-c",
             "import os, time\n"
             "f = open('/mark', 'wb')\n"
             "for _ in range(32): f.write(b'K8WIPE-' * 9362)\n"
             "f.flush(); os.fsync(f.fileno()); f.close(); os.sync()\n"
             "open('/done', 'w').close(); os.sync()\n"
             "time.sleep(3600)\n", check=True, timeout=300).stdout.strip()
    assert wait_for(lambda: ch("sandbox", "exec", name, cid, "cat", "/done").returncode == 0,
                    120), "the guest never finished writing"
    fds = _disk_fds(info["dir"])
    try:
        args = ["sandbox", "rm", name] + (["--wipe"] if wipe else [])
        ch(*args, check=True, timeout=300)
        assert not os.path.exists(info["dir"])
        found = [n for n, fd in fds.items() if _holds_mark(fd)]
        if wipe:
            assert not found, "rm --wipe left the guest's bytes in %s" % found
        else:
            assert found, "control: the guest's bytes were not on the disk at all"
    finally:
        for fd in fds.values():
            os.close(fd)
