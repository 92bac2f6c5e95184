# SPDX-License-Identifier: Apache-2.0
# k8cli.py - what the benchmarks share: the CLI's path, running it, a process's RSS.
import os
import subprocess

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
KOSA8 = os.path.join(TOP, "build", "bin", "kosa8")


def k(home, *args, check=True):
    """Run kosa8 with KOSA8_HOME=home; exit on failure (a benchmark cannot go on)."""
    p = subprocess.run([KOSA8] + list(args), capture_output=True, text=True,
                       env=dict(os.environ, KOSA8_HOME=home))
    if check and p.returncode:
        raise SystemExit("kosa8 %s: %s" % (" ".join(args), p.stderr))
    return p


def out(home, *args):
    return k(home, *args).stdout


def test_image():
    """The python test image's OCI layout (built once, cached)."""
    return subprocess.run([os.path.join(TOP, "scripts", "test-image.sh")], capture_output=True,
                          text=True, check=True).stdout.strip()


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0
