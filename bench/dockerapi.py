# SPDX-License-Identifier: Apache-2.0
# dockerapi.py - the Docker-compatible API (issue 12, docs/docker.md) against kosa8's own CLI
# doing the same in the same run, alternating, median of BENCH_N rounds:
#   docker run --rm IMG python -c 1      vs  kosa8 sandbox run docker-engine IMG python -c 1
#   docker run --rm [--network none] IMG true  vs  the same; docker version vs kosa8 version
#   docker-py containers.run(IMG, ["true"], remove=True)  vs  the same kosa8 sandbox run
#   docker --version vs kosa8 --version: each CLI's start-up alone (no daemon), and the
#     floor it sets under the `run true` ratio (a Docker path costing nothing of its own)
#   docker exec C true (CLI), docker-py exec_run  vs  kosa8 sandbox exec docker-engine C true
#   with require_sandbox: docker run --rm IMG true  vs  sandbox create + run + rm
#     (BENCH_ONLY=reqsb runs only this pair: BENCH_N_VM rounds, medians and p90;
#      BENCH_ONLY=run stops after the engine's run pairs)
#   BENCH_ONLY=clients (issue 26): the four clients' round trips, median of BENCH_N (20
#     for the table) each, taken in turn: docker run --rm IMG true, docker-py
#     containers.run, dockerode's docker.run (one node process, bench/dockerode_run.js;
#     "hung" when a run does not return in 30 s) and an exec round trip (docker-py
#     exec_run true, and the docker CLI's docker exec). KOSA8_BIN picks the build, so a
#     build of the old code gives the "before" column.
# Engine 512 MiB / 1 vCPU. The docker CLI's own start-up is part of its figure, as the
# kosa8 CLI's is of its own. Each timed call starts BENCH_SETTLE s (0.3) after the last
# one ended, so neither side pays for the other's leftovers in the guest.
# (Not docker.py: that name would shadow docker-py.)
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from k8cli import end_home, k, out, test_image

N = int(os.environ.get("BENCH_N", "5"))
NVM = int(os.environ.get("BENCH_N_VM", "3"))
IMG = "python:3.12-slim"

try:
    import docker as dockerpy
except ImportError:
    dockerpy = None


def docker(home, cfgdir, *args):
    env = dict(os.environ, DOCKER_HOST="unix://" + os.path.join(home, "docker.sock"),
               DOCKER_CONFIG=cfgdir)
    env.pop("DOCKER_CONTEXT", None)
    p = subprocess.run(["docker"] + list(args), capture_output=True, text=True, env=env)
    if p.returncode:
        raise SystemExit("docker %s: %s" % (" ".join(args), p.stderr))
    return p.stdout


SETTLE = float(os.environ.get("BENCH_SETTLE", "0.3"))


def timed(fn, *args):
    """One timed call, after SETTLE seconds untimed: whatever the last call left to the
    guest's idle time (a container's network namespace ending, its files going) is done
    before this one starts, whichever side left it."""
    time.sleep(SETTLE)
    t0 = time.time()
    fn(*args)
    return time.time() - t0


def line(what, a, b, an, bn):
    ma, mb = statistics.median(a), statistics.median(b)
    print("  %-34s %7.3f s   %-28s %7.3f s   ratio %.2f" % (what + " " + an, ma, bn, mb, ma / mb))


def p90(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.9 * len(xs) + 0.5) - 1)] if xs else 0.0


def uptime():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def sandboxes(home):
    """The VMs of this pair that `sandbox ls` still shows (not the shared engine)."""
    names = [l.split()[0] for l in out(home, "sandbox", "ls").splitlines()[1:] if l.strip()]
    return [n for n in names if n.startswith("dk-") or n == "bvm"]


def quiet(home):
    """Untimed, between two measured runs: no VM of the last one still going away, so
    neither side pays for the other's teardown."""
    for _ in range(300):
        if not sandboxes(home):
            return
        time.sleep(0.1)
    raise SystemExit("sandboxes left after a run: %s" % sandboxes(home))


def reqsb(home, cfgdir, cfgp, cfg):
    """require_sandbox: each container a VM of its own, made and removed with it, against
    sandbox create + run + rm of the same size, alternating which goes first."""
    with open(cfgp, "w") as f:
        json.dump(dict(cfg, require_sandbox=True), f)

    def docker_run():
        docker(home, cfgdir, "run", "--rm", IMG, "true")

    def own_vm(n="bvm"):
        out(home, "sandbox", "create", n, "--cpus", "1", "--memory", "512", "--disk", "2")
        out(home, "sandbox", "run", n, IMG, "true")
        k(home, "sandbox", "rm", "-f", n)
    quiet(home)
    docker_run()        # warm: the image's erofs and the first boot's page cache
    quiet(home)
    own_vm()
    d, kk = [], []
    load0 = uptime()
    for i in range(NVM):
        for which in ((0, 1) if i % 2 == 0 else (1, 0)):
            quiet(home)
            (d if which == 0 else kk).append(timed(docker_run if which == 0 else own_vm))
    print("  require_sandbox, %d each, alternating (load %s -> %s):" % (NVM, load0, uptime()))
    line("VM each: run true", d, kk, "docker run --rm", "create + run + rm")
    print("  %-34s %7.3f s   %-28s %7.3f s   ratio %.2f" % ("  p90", p90(d), "p90", p90(kk),
                                                          p90(d) / p90(kk)))
    print("    docker run --rm: " + " ".join("%.2f" % x for x in d))
    print("    create + run + rm: " + " ".join("%.2f" % x for x in kk))


def dockerode_runs(home, n):
    """n dockerode runs in one node process: their seconds, or None when one hung."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "scripts"))
    import k8cache
    nm = os.path.join(k8cache.npm("dockerode"), "node_modules")
    p = subprocess.run(["node", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                             "dockerode_run.js"),
                        os.path.join(home, "docker.sock"), IMG, str(n), "30000"],
                       capture_output=True, text=True, env=dict(os.environ, NODE_PATH=nm),
                       timeout=n * 60 + 60)
    r = json.loads(p.stdout.strip().splitlines()[-1])
    if "error" in r:
        raise SystemExit("dockerode run: " + r["error"])
    return None if "hung" in r else r["times"]


def clients(home, cfgdir):
    """issue 26: docker CLI, docker-py and dockerode runs, and exec round trips."""
    api = dockerpy.DockerClient(base_url="unix://" + os.path.join(home, "docker.sock"),
                                version="auto") if dockerpy else None
    docker(home, cfgdir, "run", "--rm", IMG, "true")        # boots the engine
    if api:
        api.containers.run(IMG, ["true"], remove=True)
    load0 = uptime()
    d, dp, dn, xp, xc = [], [], [], [], []
    node_hung = False
    for i in range(N):
        d.append(timed(docker, home, cfgdir, "run", "--rm", IMG, "true"))
        if api:
            dp.append(timed(lambda: api.containers.run(IMG, ["true"], remove=True)))
        if not node_hung and shutil.which("node"):
            t = dockerode_runs(home, 1)
            if t is None:
                node_hung = True
            else:
                dn += t
    cid = docker(home, cfgdir, "run", "-d", IMG, "sleep", "100000").strip()
    for i in range(N):
        if api:
            xp.append(timed(api.containers.get(cid).exec_run, ["true"]))
        xc.append(timed(docker, home, cfgdir, "exec", cid, "true"))
    docker(home, cfgdir, "rm", "-f", cid)
    print("  clients, median of %d (p90), load %s -> %s, build %s:" % (N, load0, uptime(),
                                                                      os.environ.get("KOSA8_BIN", "build/bin")))
    for what, xs in (("docker run --rm IMG true", d), ("docker-py containers.run", dp),
                     ("dockerode docker.run", dn), ("exec true, docker-py exec_run", xp),
                     ("exec true, docker exec (CLI)", xc)):
        if what.startswith("dockerode") and node_hung:
            print("  %-34s did not return in 30 s (hung)" % what)
        elif xs:
            print("  %-34s %7.3f s  (p90 %.3f)" % (what, statistics.median(xs), p90(xs)))


def main():
    if not shutil.which("docker"):
        print("  skipped: no docker CLI (scripts/deps.sh: docker.io)")
        return
    layout = test_image()
    home = tempfile.mkdtemp(prefix="k8bd-", dir="/tmp")
    cfgdir = tempfile.mkdtemp(prefix="k8bd-cfg-", dir="/tmp")
    cfgp = os.path.join(home, "config.json")
    cfg = {"docker_engine_memory_mib": 512, "docker_engine_cpus": 1, "docker_engine_disk_gb": 2}
    try:
        with open(cfgp, "w") as f:
            json.dump(cfg, f)
        out(home, "daemon", "start")
        out(home, "image", "load", layout, "--tag", IMG)
        if os.environ.get("BENCH_ONLY") == "reqsb":
            reqsb(home, cfgdir, cfgp, cfg)
            return
        if os.environ.get("BENCH_ONLY") == "clients":
            clients(home, cfgdir)
            return
        t0 = time.time()
        docker(home, cfgdir, "run", "--rm", IMG, "true")    # boots the engine
        print("engine 512 MiB / 1 vCPU; first docker run (engine boot): %.1f s; median of %d"
              % (time.time() - t0, N))
        d, kk = [], []
        for _ in range(N):
            d.append(timed(docker, home, cfgdir, "run", "--rm", IMG, "python", "-c", "1"))
            kk.append(timed(out, home, "sandbox", "run", "docker-engine", IMG, "python", "-c", "1"))
        line("run python -c 1", d, kk, "docker run --rm", "kosa8 sandbox run")
        d, kk, dn, dv, kv, ds, ks, dp = [], [], [], [], [], [], [], []
        api = dockerpy.DockerClient(base_url="unix://" + os.path.join(home, "docker.sock"),
                                    version="auto") if dockerpy else None
        for _ in range(N):
            d.append(timed(docker, home, cfgdir, "run", "--rm", IMG, "true"))
            if api:     # the frameworks' client: no process to start per call
                dp.append(timed(lambda: api.containers.run(IMG, ["true"], remove=True)))
            kk.append(timed(out, home, "sandbox", "run", "docker-engine", IMG, "true"))
            dn.append(timed(docker, home, cfgdir, "run", "--rm", "--network", "none", IMG, "true"))
            dv.append(timed(docker, home, cfgdir, "version"))
            kv.append(timed(out, home, "version"))
            ds.append(timed(docker, home, cfgdir, "--version"))
            ks.append(timed(out, home, "--version"))
        line("run true", d, kk, "docker run --rm", "kosa8 sandbox run")
        # what the gap is made of: the container's own network namespace (the engine's
        # `kosa8 sandbox run` shares the VM's), and each CLI's start-up with one request
        line("run true", dn, kk, "docker run --rm --network none", "kosa8 sandbox run")
        if dp:
            line("run true", dp, kk, "docker-py containers.run", "kosa8 sandbox run")
        line("CLI alone", dv, kv, "docker version", "kosa8 version")
        # and without any request: the process, its libraries, its runtime's start
        line("CLI start-up", ds, ks, "docker --version", "kosa8 --version")
        extra = statistics.median(ds) - statistics.median(ks)
        mk = statistics.median(kk)
        print("  the docker CLI starts %.0f ms slower than kosa8's: with a Docker path that "
              "cost nothing of its own, `run true` would be at %.2f; measured %.2f"
              % (extra * 1000, (mk + extra) / mk, statistics.median(d) / mk))
        if os.environ.get("BENCH_ONLY") == "run":
            return
        cid = docker(home, cfgdir, "run", "-d", IMG, "sleep", "100000").strip()
        d, kk, py = [], [], []
        for _ in range(N):
            d.append(timed(docker, home, cfgdir, "exec", cid, "true"))
            kk.append(timed(out, home, "sandbox", "exec", "docker-engine", cid[:12], "true"))
            if api:
                py.append(timed(api.containers.get(cid).exec_run, ["true"]))
        line("exec true", d, kk, "docker exec", "kosa8 sandbox exec")
        if py:
            line("exec true", py, kk, "docker-py exec_run", "kosa8 sandbox exec")
        docker(home, cfgdir, "rm", "-f", cid)
        reqsb(home, cfgdir, cfgp, cfg)
    finally:
        keep = os.environ.get("BENCH_KEEP_LOGS")       # a folder: the daemon's logs, to profile
        if keep:
            os.makedirs(keep, exist_ok=True)
            for n in os.listdir(home):
                if n.endswith(".log"):
                    shutil.copy(os.path.join(home, n), keep)
        end_home(home)
        shutil.rmtree(cfgdir, ignore_errors=True)


if __name__ == "__main__":
    main()
