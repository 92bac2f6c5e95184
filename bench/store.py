# SPDX-License-Identifier: Apache-2.0
# store.py - snapshot stores (issue 32), side by side in one run through one S3 server
# (s3rver on loopback, tests/integration/storekit.py):
#   push    `kosa8 checkpoint push` of a checkpoint to an empty store, against raw uploads
#           of the same files with the same S3 client (build/tools/k8s3: a PUT per file,
#           or a multipart upload in 8 MiB parts, as `aws s3 cp` does; holes are sent)
#   pull    the pull of `sandbox fork --from STORE:...` on a second daemon, against raw
#           downloads of the same files with k8s3
#   fork    fork from the store (pull and all) against a local fork of the same checkpoint
#   again   a second push of the sandbox after a small change: what part of it is sent
# MB/s are of the checkpoint's files as they are on disk (holes included: what a raw copy
# moves); "wire" is what went over the connection. BENCH_N runs (default 2), medians;
# BENCH_MEM (512) MiB sandbox with BENCH_MIB (192) MiB touched; BENCH_CHUNK_KIB (1024).
import json
import os
import statistics
import sys
import tempfile
import time

from k8cli import KOSA8, end_home, k, loadavg, out, test_image, touch_memory

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from storekit import ACCESS, SECRET, S3Server, k8s3  # noqa: E402

N = int(os.environ.get("BENCH_N", "2"))
MEM = int(os.environ.get("BENCH_MEM", "512"))
MIB = int(os.environ.get("BENCH_MIB", "192"))
CHUNK = os.environ.get("BENCH_CHUNK_KIB", "1024")


def kj(home, *args):
    """A command with progress and --json: its last line."""
    return json.loads(out(home, *args, "--json").strip().splitlines()[-1])


def add_store(home, s3):
    p = __import__("subprocess").run(
        [KOSA8, "store", "add", "s3", "bench", "--endpoint", s3.endpoint, "--bucket",
         s3.bucket, "--access-key-stdin", "--chunk-kib", CHUNK],
        input="%s\n%s\n" % (ACCESS, SECRET), capture_output=True, text=True,
        env=dict(os.environ, KOSA8_HOME=home))
    if p.returncode:
        raise SystemExit("store add: " + p.stderr)


def checkpoint_files(home, name, label):
    """The files a checkpoint is made of on disk: its saved machine, its layer chain, the
    images' disks (what a raw copy of it would copy)."""
    d = os.path.join(home, "sandboxes", name)
    meta = json.load(open(os.path.join(d, "checkpoints", label, "meta.json")))
    layers = json.load(open(os.path.join(d, "layers.json")))
    files = [os.path.join(d, "checkpoints", label, f) for f in ("devices", "memory", "state")
             if os.path.exists(os.path.join(d, "checkpoints", label, f))]
    l = meta["layer"]
    while l:
        files.append(os.path.join(d, l))
        l = layers.get(l)
    files += [i["disk"] for i in meta["images"]]
    return files


def raw_up(s3, files, tag):
    t0 = time.time()
    sent = 0
    for i, f in enumerate(files):
        r = json.loads(k8s3(s3, "put", "raw/%s/%d" % (tag, i), f, "8").stdout)
        sent += r["sent"]
    return time.time() - t0, sent


def raw_down(s3, files, tag, tmp):
    t0 = time.time()
    got = 0
    for i, f in enumerate(files):
        r = json.loads(k8s3(s3, "get", "raw/%s/%d" % (tag, i), os.path.join(tmp, "d%d" % i))
                       .stdout)
        got += r["bytes"]
    return time.time() - t0, got


def med(xs):
    return statistics.median(xs) if xs else 0


def main():
    layout = test_image()
    a = tempfile.mkdtemp(prefix="k8bsA-", dir="/tmp")
    b = tempfile.mkdtemp(prefix="k8bsB-", dir="/tmp")
    tmp = tempfile.mkdtemp(prefix="k8bst-", dir="/tmp")
    s3 = S3Server(bucket="bench")
    rows = {key: [] for key in ("raw_up", "push", "raw_down", "pull", "fork_store",
                                "fork_local", "again")}
    try:
        out(a, "daemon", "start")
        out(b, "daemon", "start")
        out(a, "image", "load", layout, "--tag", "python:3.12-slim")
        add_store(a, s3)
        add_store(b, s3)
        out(a, "sandbox", "create", "src", "--cpus", "1", "--memory", str(MEM), "--disk", "2")
        out(a, "sandbox", "pull", "src", "python:3.12-slim")
        touch_memory(a, "src", MIB)
        cid = out(a, "sandbox", "start", "src", "python:3.12-slim", "sleep", "1000000").strip()
        for run in range(N):
            label = "c%d" % run
            out(a, "checkpoint", "src", "--label", label)
            files = checkpoint_files(a, "src", label)
            size = sum(os.stat(f).st_size for f in files)
            # raw copies of the same files, then the push into an empty store
            t, sent = raw_up(s3, files, label)
            rows["raw_up"].append((size / t / 1e6, sent, t))
            k(a, "store", "rm", "bench:src/c%d" % (run - 1), check=False)
            kj(a, "store", "gc", "bench", "--grace", "0")
            p = kj(a, "checkpoint", "push", "src", label, "--to", "bench")
            rows["push"].append((size / (p["ms"] / 1000) / 1e6, p["sent"], p["ms"] / 1000,
                                 p["data"]))
            t, got = raw_down(s3, files, label, tmp)
            rows["raw_down"].append((size / t / 1e6, got, t))
            # fork from the store on B (its pull timed apart), and a local fork on A
            t0 = time.time()
            f = kj(b, "sandbox", "fork", "--from", "bench:src/" + label, "--name",
                   "fs%d" % run)
            rows["fork_store"].append(time.time() - t0)
            pl = f["pulled"]
            rows["pull"].append((size / (pl["ms"] / 1000) / 1e6, pl["sent"], pl["ms"] / 1000))
            t0 = time.time()
            out(a, "sandbox", "fork", "src", "--from", label, "--name", "fl%d" % run)
            rows["fork_local"].append(time.time() - t0)
            out(b, "sandbox", "rm", "fs%d" % run)
            out(a, "sandbox", "rm", "fl%d" % run)
            # a small change, checkpoint, push again: what part goes
            out(a, "sandbox", "exec", "src", cid, "sh", "-c", "date > /root/again-%d" % run)
            out(a, "checkpoint", "src", "--label", label + "b")
            p2 = kj(a, "checkpoint", "push", "src", label + "b", "--to", "bench")
            rows["again"].append((p2["chunks_sent"], p2["chunks"], p2["sent"], p["sent"]))
            k(a, "store", "rm", "bench:src/%sb" % label, check=False)
            out(a, "checkpoint", "rm", "src", label + "b")
            for i in range(len(files)):
                k8s3(s3, "rm", "raw/%s/%d" % (label, i))
            print("run %d done (load %s)" % (run + 1, loadavg()), flush=True)
        mb = lambda n: n / 1e6  # noqa: E731
        ru, pu = rows["raw_up"], rows["push"]
        rd, pd = rows["raw_down"], rows["pull"]
        print("snapshot stores: %d MiB sandbox, %d MiB touched, chunks of %s KiB, %d runs "
              "(medians), load %s" % (MEM, MIB, CHUNK, N, loadavg()))
        print("  the checkpoint's files: %.0f MB on disk (holes included), %.0f MB of data"
              % (mb(size), mb(med([r[3] for r in pu]))))
        print("  %-34s %9s %9s %11s" % ("", "MB/s", "s", "wire MB"))
        print("  %-34s %9.1f %9.2f %11.1f" % ("raw upload (k8s3, 8 MiB parts)",
                                             med([r[0] for r in ru]), med([r[2] for r in ru]),
                                             mb(med([r[1] for r in ru]))))
        print("  %-34s %9.1f %9.2f %11.1f" % ("checkpoint push (empty store)",
                                             med([r[0] for r in pu]), med([r[2] for r in pu]),
                                             mb(med([r[1] for r in pu]))))
        print("  %-34s %9.1f %9.2f %11.1f" % ("raw download (k8s3)", med([r[0] for r in rd]),
                                             med([r[2] for r in rd]),
                                             mb(med([r[1] for r in rd]))))
        print("  %-34s %9.1f %9.2f %11.1f" % ("pull of a fork from the store",
                                             med([r[0] for r in pd]), med([r[2] for r in pd]),
                                             mb(med([r[1] for r in pd]))))
        print("  push/raw upload time %.2fx, pull/raw download time %.2fx" %
              (med([r[2] for r in pu]) / med([r[2] for r in ru]),
               med([r[2] for r in pd]) / med([r[2] for r in rd])))
        print("  fork from the store %.2f s, local fork %.2f s (%.1fx)" %
              (med(rows["fork_store"]), med(rows["fork_local"]),
               med(rows["fork_store"]) / med(rows["fork_local"])))
        ag = rows["again"]
        print("  second push after a small change: %d of %d chunks, %.1f of %.1f MB on the "
              "wire (%.1f%%)" % (med([r[0] for r in ag]), med([r[1] for r in ag]),
                                mb(med([r[2] for r in ag])), mb(med([r[3] for r in ag])),
                                100 * med([r[2] / r[3] for r in ag])))
    finally:
        end_home(a)
        end_home(b)
        s3.stop()
        __import__("shutil").rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
