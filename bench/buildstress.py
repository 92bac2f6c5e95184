# SPDX-License-Identifier: Apache-2.0
# buildstress.py - concurrent `docker build`s on docker.sock, to find builds that never end
# (the hang of a worker forked from a threaded kosa8d, src/common/worker.h). A daemon of
# its own (a fresh home, the python test image loaded) from KOSA8_BIN (default build/bin;
# scripts/test.sh's way for the ASan kosa8d: a folder of build/bin/* with build-san's
# kosa8d, and KOSA8_GUEST_DIR=build/guest); then BENCH_N small contexts (default 100,
# "FROM python:3.12-slim" and a COPY of a file of their own: the context's unpack and the
# base layers' read for COPY are workers, no VM boots) built by BENCH_BUILDERS threads
# (default 4) while BENCH_POLLERS threads (default 2) GET /containers/json in a loop.
# A build with no answer in BENCH_TIMEOUT s (default 180) is counted as hung, and the
# daemon's children are listed with where they wait (/proc/PID/wchan). Prints
# "builds N: ok A, failed F, hung H" and the time; exit 1 if one hung or failed.
import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from conftest import Home, UnixHTTP, daemon_pid, new_home, TOP  # noqa: E402

N = int(os.environ.get("BENCH_N", "100"))
BUILDERS = int(os.environ.get("BENCH_BUILDERS", "4"))
POLLERS = int(os.environ.get("BENCH_POLLERS", "2"))
TIMEOUT = float(os.environ.get("BENCH_TIMEOUT", "180"))


def context(i):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in (("Dockerfile", b"FROM python:3.12-slim\nCOPY f.txt /f.txt\n"),
                           ("f.txt", b"build %d %f\n" % (i, time.time()))):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def build(sock, i):
    """'ok', 'failed: ...' or 'hung'."""
    c = UnixHTTP(sock, TIMEOUT)
    try:
        body = context(i)
        c.request("POST", "/v1.47/build?t=stress-%d" % i, body=body,
                  headers={"Content-Type": "application/x-tar"})
        out = c.getresponse().read().decode(errors="replace")
    except (socket.timeout, TimeoutError):
        return "hung"
    finally:
        c.close()
    if "errorDetail" in out or "Successfully built" not in out:
        return "failed: " + out[-300:]
    return "ok"


def poll(sock, stop, counts):
    while not stop.is_set():
        c = UnixHTTP(sock, 60)
        try:
            c.request("GET", "/v1.47/containers/json?all=1")
            r = c.getresponse()
            r.read()
            counts[r.status] = counts.get(r.status, 0) + 1
        except OSError as e:
            counts[str(e)] = counts.get(str(e), 0) + 1
        finally:
            c.close()


def waiting_children(pid):
    """[(pid, comm, wchan)] of kosa8d's children."""
    kids = []
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                kids += [int(k) for k in f.read().split()]
        except OSError:
            pass
    out = []
    for k in kids:
        try:
            with open("/proc/%d/comm" % k) as f:
                comm = f.read().strip()
            with open("/proc/%d/wchan" % k) as f:
                out.append((k, comm, f.read().strip()))
        except OSError:
            pass
    return out


def main():
    layout = subprocess.run([os.path.join(TOP, "scripts", "test-image.sh")], capture_output=True,
                            text=True, timeout=1800, check=True).stdout.strip().splitlines()[-1]
    h = Home(new_home("k8bs-"))
    with open(os.path.join(h.path, "config.json"), "w") as f:
        json.dump({"docker_engine_memory_mib": 512, "docker_engine_cpus": 1,
                   "docker_engine_disk_gb": 2}, f)
    h.start()
    try:
        h("image", "load", layout, "--tag", "python:3.12-slim", check=True, timeout=600)
        sock = os.path.join(h.path, "docker.sock")
        stop, polls = threading.Event(), {}
        pollers = [threading.Thread(target=poll, args=(sock, stop, polls)) for _ in range(POLLERS)]
        results, lock, nxt = [], threading.Lock(), [0]

        def builder():
            while True:
                with lock:
                    i = nxt[0]
                    nxt[0] += 1
                if i >= N:
                    return
                r = build(sock, i)
                with lock:
                    results.append((i, r))
                    print("build %d: %s" % (i, r.splitlines()[0] if r else r), flush=True)

        t0 = time.time()
        for t in pollers:
            t.start()
        bs = [threading.Thread(target=builder) for _ in range(BUILDERS)]
        for t in bs:
            t.start()
        for t in bs:
            t.join()
        took = time.time() - t0
        stop.set()
        for t in pollers:
            t.join()
        hung = [i for i, r in results if r == "hung"]
        failed = [(i, r) for i, r in results if r.startswith("failed")]
        if hung:
            for k, comm, wchan in waiting_children(daemon_pid(h.path)):
                print("kosa8d's child %d %s waits in %s" % (k, comm, wchan))
        for i, r in failed[:5]:
            print("build %d %s" % (i, r))
        print("builds %d: ok %d, failed %d, hung %d (%s); in %.0f s; polls %s" % (
            len(results), len(results) - len(hung) - len(failed), len(failed), len(hung),
            " ".join(map(str, sorted(hung))) or "none", took, polls))
        return 1 if hung or failed else 0
    finally:
        h.stop()
        if os.environ.get("KOSA8_KEEP_HOME") is None:
            import shutil
            shutil.rmtree(h.path, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
