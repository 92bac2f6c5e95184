# SPDX-License-Identifier: Apache-2.0
# pull.py - images from a registry (issue 3), side by side in one run:
#  pull-and-prepare of the python test image from a local registry by kosa8 (image pull,
#  then the sandbox's read-only EROFS disk) against `skopeo copy` to an OCI layout +
#  `umoci unpack` + `mkfs.erofs` of the same image; and a second pull of a cached image.
import os
import shutil
import socket
import statistics
import subprocess
import tempfile

import time

from k8cli import TOP, k  # noqa: F401

N = int(os.environ.get("BENCH_N", "3"))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p




def main():
    layout = subprocess.run([os.path.join(TOP, "scripts", "test-image.sh")], capture_output=True,
                            text=True, check=True).stdout.strip()
    work = tempfile.mkdtemp(prefix="k8p-", dir="/tmp")
    port = free_port()
    cfg = os.path.join(work, "registry.yml")
    with open(cfg, "w") as f:
        f.write("version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: %s/reg\n"
                "http:\n  addr: 127.0.0.1:%d\n" % (work, port))
    reg = subprocess.Popen(["docker-registry", "serve", cfg], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        ref = "127.0.0.1:%d/library/python:3.12-slim" % port
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        subprocess.run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false",
                        "oci:%s:3.12-slim" % layout, "docker://" + ref], check=True)
        kt, st, cached = [], [], []
        for i in range(N):
            home = os.path.join(work, "home%d" % i)
            k(home, "daemon", "start", "--accel", "tcg")
            k(home, "sandbox", "create", "p", "--cpus", "1", "--memory", "256", "--disk", "1")
            t0 = time.time()
            k(home, "sandbox", "pull", "p", ref)     # registry pull + EROFS disk + attach
            kt.append(time.time() - t0)
            t0 = time.time()
            k(home, "image", "pull", ref)            # the same image again: cached
            cached.append(time.time() - t0)
            k(home, "daemon", "stop")
            shutil.rmtree(home)

            d = os.path.join(work, "sk%d" % i)
            os.makedirs(d)
            t0 = time.time()
            subprocess.run(["skopeo", "copy", "--quiet", "--src-tls-verify=false",
                            "docker://" + ref, "oci:%s/oci:x" % d], check=True)
            subprocess.run(["umoci", "unpack", "--rootless", "--image", "%s/oci:x" % d,
                            "%s/bundle" % d], check=True, capture_output=True)
            subprocess.run(["mkfs.erofs", "--quiet", "%s/img.erofs" % d, "%s/bundle/rootfs" % d],
                           check=True, capture_output=True)
            st.append(time.time() - t0)
            shutil.rmtree(d)
        km, sm = statistics.median(kt), statistics.median(st)
        print("pull and prepare: kosa8 %.2f s, skopeo copy + umoci unpack + mkfs.erofs %.2f s: "
              "ratio %.2fx (goal <= 1.5x)" % (km, sm, km / sm))
        print("second pull of a cached image: %.0f ms (goal < 100 ms; includes the CLI)"
              % (1000 * statistics.median(cached)))
    finally:
        reg.kill()
        reg.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
