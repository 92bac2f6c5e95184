# SPDX-License-Identifier: Apache-2.0
# dockerapi.py - the Docker-compatible API (issue 12, docs/docker.md) against kosa8's own CLI
# doing the same in the same run, alternating, median of BENCH_N rounds:
#   docker run --rm IMG python -c 1      vs  kosa8 sandbox run docker-engine IMG python -c 1
#   docker exec C true (CLI), docker-py exec_run  vs  kosa8 sandbox exec docker-engine C true
#   with require_sandbox: docker run --rm IMG true  vs  sandbox create + run + rm
# Engine 512 MiB / 1 vCPU. The docker CLI's own start-up is part of its figure, as the
# kosa8 CLI's is of its own. (Not docker.py: that name would shadow docker-py.)
import json
import os
import shutil
import statistics
import subprocess
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


def timed(fn, *args):
    t0 = time.time()
    fn(*args)
    return time.time() - t0


def line(what, a, b, an, bn):
    ma, mb = statistics.median(a), statistics.median(b)
    print("  %-34s %7.3f s   %-28s %7.3f s   ratio %.2f" % (what + " " + an, ma, bn, mb, ma / mb))


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
        t0 = time.time()
        docker(home, cfgdir, "run", "--rm", IMG, "true")    # boots the engine
        print("engine 512 MiB / 1 vCPU; first docker run (engine boot): %.1f s; median of %d"
              % (time.time() - t0, N))
        d, kk = [], []
        for _ in range(N):
            d.append(timed(docker, home, cfgdir, "run", "--rm", IMG, "python", "-c", "1"))
            kk.append(timed(out, home, "sandbox", "run", "docker-engine", IMG, "python", "-c", "1"))
        line("run python -c 1", d, kk, "docker run --rm", "kosa8 sandbox run")
        d, kk = [], []
        for _ in range(N):
            d.append(timed(docker, home, cfgdir, "run", "--rm", IMG, "true"))
            kk.append(timed(out, home, "sandbox", "run", "docker-engine", IMG, "true"))
        line("run true", d, kk, "docker run --rm", "kosa8 sandbox run")
        cid = docker(home, cfgdir, "run", "-d", IMG, "sleep", "100000").strip()
        d, kk, py = [], [], []
        api = dockerpy.DockerClient(base_url="unix://" + os.path.join(home, "docker.sock"),
                                    version="auto") if dockerpy else None
        for _ in range(N):
            d.append(timed(docker, home, cfgdir, "exec", cid, "true"))
            kk.append(timed(out, home, "sandbox", "exec", "docker-engine", cid[:12], "true"))
            if api:
                py.append(timed(api.containers.get(cid).exec_run, ["true"]))
        line("exec true", d, kk, "docker exec", "kosa8 sandbox exec")
        if py:
            line("exec true", py, kk, "docker-py exec_run", "kosa8 sandbox exec")
        docker(home, cfgdir, "rm", "-f", cid)
        # require_sandbox: each container a VM of its own, made and removed with it
        with open(cfgp, "w") as f:
            json.dump(dict(cfg, require_sandbox=True), f)
        d, kk = [], []
        for i in range(NVM):
            d.append(timed(docker, home, cfgdir, "run", "--rm", IMG, "true"))

            def own_vm(n="b%d" % i):
                out(home, "sandbox", "create", n, "--cpus", "1", "--memory", "512", "--disk", "2")
                out(home, "sandbox", "run", n, IMG, "true")
                k(home, "sandbox", "rm", "-f", n)
            kk.append(timed(own_vm))
        print("  require_sandbox, median of %d:" % NVM)
        line("VM each: run true", d, kk, "docker run --rm", "create + run + rm")
    finally:
        end_home(home)
        shutil.rmtree(cfgdir, ignore_errors=True)


if __name__ == "__main__":
    main()
