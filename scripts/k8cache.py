#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""k8cache.py - the machine-wide build cache: guest kernels, test images, npm fixtures and
generated model files, shared by every clone on the machine (docs/testing.md, "Caches").

Theory of operation. The root is $KOSA8_CACHE, else /var/cache/kosa8 (root) or
~/.cache/kosa8. An entry is a directory NAME-KEY, where KEY is a hash of everything that
built it (the recipe's files and the versions it names), so a changed recipe is a new
entry and never a stale one. An entry is built in a fresh directory beside it
(.build-NAME-KEY-*), sealed with K8SUMS (the SHA-256 of every file and the target of
every symlink below it), then renamed into place in one step: a killed build leaves only
a .build-* directory, which nothing reads and the next build of that entry removes. Every
use checks the entry against its K8SUMS first (a file changed, added or removed fails the
check); a failed entry is moved aside (.bad-*) and built again. One build of an entry at
a time: NAME-KEY.lock is held while it is checked and built, so a second caller waits and
then uses the first one's result.

  k8cache.py root                      the cache root
  k8cache.py key [-f FILE]... [-s STR]...   a key from files' contents and strings
  k8cache.py get NAME KEY              the entry's path, checked; exit 1 when absent or bad
  k8cache.py build NAME KEY -- CMD...  the entry's path, built first when needed: CMD runs
                                       with K8CACHE_OUT=an empty directory to fill
  k8cache.py npm SET                   the entry holding node_modules for SET of
                                       scripts/npm-pins, installed first when needed
  k8cache.py ls                        entries, sizes, and whether each one checks
"""
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

SUMS = "K8SUMS"


def root():
    r = os.environ.get("KOSA8_CACHE")
    if not r:
        r = "/var/cache/kosa8" if os.geteuid() == 0 else \
            os.path.join(os.path.expanduser("~"), ".cache", "kosa8")
    os.makedirs(r, mode=0o755, exist_ok=True)
    return r


def key(files=(), strings=()):
    """16 hex digits of SHA-256 over each file's name and content and each string."""
    h = hashlib.sha256()
    for f in files:
        h.update(b"f\0" + os.path.basename(f).encode() + b"\0")
        with open(f, "rb") as fp:
            h.update(hashlib.sha256(fp.read()).digest())
    for s in strings:
        h.update(b"s\0" + s.encode() + b"\0")
    return h.hexdigest()[:16]


def _file_sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return h.hexdigest()
            h.update(b)


def _walk(top):
    """Sorted lines describing the tree below top (K8SUMS excluded): 'F sha path' for a
    regular file, 'L target path' for a symlink, 'D - path' for a directory. Anything else
    (a device, a fifo, a socket) makes the tree unsealable: ValueError."""
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        rel = os.path.relpath(dirpath, top)
        for d in list(dirnames):
            p = os.path.join(dirpath, d)
            r = os.path.normpath(os.path.join(rel, d))
            if os.path.islink(p):
                out.append("L %s %s" % (os.readlink(p), r))
                dirnames.remove(d)
            else:
                out.append("D - %s" % r)
        for f in filenames:
            p = os.path.join(dirpath, f)
            r = os.path.normpath(os.path.join(rel, f))
            if r == SUMS:
                continue
            if os.path.islink(p):
                out.append("L %s %s" % (os.readlink(p), r))
            elif os.path.isfile(p):
                out.append("F %s %s" % (_file_sha(p), r))
            else:
                raise ValueError("%s is neither a file, a directory nor a symlink" % p)
    return sorted(out)


def seal(path):
    lines = _walk(path)
    with open(os.path.join(path, SUMS), "w") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())


def check(path):
    """None when the entry at path matches its K8SUMS, else why not."""
    try:
        with open(os.path.join(path, SUMS)) as f:
            want = f.read().splitlines()
    except OSError as e:
        return "no %s (%s)" % (SUMS, e.strerror)
    try:
        have = _walk(path)
    except (OSError, ValueError) as e:
        return str(e)
    if have == want:
        return None
    extra = sorted(set(have) - set(want))
    missing = sorted(set(want) - set(have))
    first = (missing or extra)[0].split(" ", 2)[2]
    return "%d entries differ from %s (first: %s)" % (len(extra) + len(missing), SUMS, first)


def _entry(name, k):
    if not name or "/" in name or name.startswith(".") or not k or "/" in k:
        raise SystemExit("k8cache: bad entry name %r / key %r" % (name, k))
    return os.path.join(root(), "%s-%s" % (name, k))


def _set_aside(path, why):
    bad = os.path.join(os.path.dirname(path),
                       ".bad-%s-%d" % (os.path.basename(path), int(time.time())))
    print("k8cache: %s failed its check (%s); set aside as %s" % (path, why, bad),
          file=sys.stderr)
    os.rename(path, bad)
    shutil.rmtree(bad, ignore_errors=True)


def get(name, k):
    """The checked entry's path, or None (a failing entry is set aside)."""
    path = _entry(name, k)
    if not os.path.isdir(path):
        return None
    why = check(path)
    if why is None:
        return path
    _set_aside(path, why)
    return None


def build(name, k, fill):
    """The entry's path, built by fill(directory) when it is absent or bad. fill raises on
    failure; nothing is left but a .build-* directory that the next build removes."""
    path = _entry(name, k)
    with open(path + ".lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        if get(name, k):
            return path
        base = os.path.dirname(path)
        prefix = ".build-%s-" % os.path.basename(path)
        for old in os.listdir(base):
            if old.startswith(prefix):
                shutil.rmtree(os.path.join(base, old), ignore_errors=True)
        work = tempfile.mkdtemp(prefix=prefix, dir=base)
        try:
            os.chmod(work, 0o755)
            fill(work)
            seal(work)
            os.rename(work, path)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        return path


def generated(name, sources, make, **kw):
    """A file made by make(path, **kw) (a test's model file, say), once per machine: the
    entry NAME-<key of the SOURCES files and kw> holding it as `file`; its path."""
    import json
    k = key(sources, [name, json.dumps(kw, sort_keys=True, default=repr)])
    return os.path.join(build(name, k, lambda d: make(os.path.join(d, "file"), **kw)), "file")


PINS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "npm-pins")


_npm_checked = {}


def npm(name):
    """The checked entry npm-NAME-<key> whose node_modules holds the set NAME of
    scripts/npm-pins (key: that line, node's version), installed with `npm i -E` first.
    Checked once per process."""
    if name in _npm_checked:
        return _npm_checked[name]
    with open(PINS) as f:
        line = [ln.split() for ln in f if ln.split() and ln.split()[0] == name]
    if len(line) != 1:
        raise SystemExit("k8cache: %s names no set %r (or names it twice)" % (PINS, name))
    words = line[0][1:]
    node = subprocess.run(["node", "--version"], capture_output=True, text=True,
                          check=True).stdout.strip()

    def fill(work):
        with open(os.path.join(work, "package.json"), "w") as f:
            f.write('{"name": "k8-npm-%s", "private": true}\n' % name)
        p = subprocess.run(["npm", "i", "-E", "--no-audit", "--no-fund", "--omit=dev"] + words,
                           cwd=work, capture_output=True, text=True, timeout=1200)
        if p.returncode:
            raise RuntimeError("npm i %s failed: %s" % (" ".join(words), p.stderr[-800:]))
        # npm's own bookkeeping changes as it reads the tree: only the packages are sealed
        shutil.rmtree(os.path.join(work, "node_modules", ".cache"), ignore_errors=True)

    _npm_checked[name] = build("npm-" + name, key(strings=[" ".join(line[0]), node]), fill)
    return _npm_checked[name]


def _du(path):
    n = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                n += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return n


def main(argv):
    if len(argv) < 2:
        print(__doc__.split("\n\n", 2)[2], file=sys.stderr)
        return 2
    cmd = argv[1]
    if cmd == "root":
        print(root())
        return 0
    if cmd == "key":
        files, strings, i = [], [], 2
        while i + 1 < len(argv) and argv[i] in ("-f", "-s"):
            (files if argv[i] == "-f" else strings).append(argv[i + 1])
            i += 2
        if i != len(argv):
            print("k8cache: key takes -f FILE and -s STRING pairs", file=sys.stderr)
            return 2
        print(key(files, strings))
        return 0
    if cmd == "get" and len(argv) == 4:
        p = get(argv[2], argv[3])
        if p:
            print(p)
        return 0 if p else 1
    if cmd == "build" and len(argv) >= 6 and argv[4] == "--":
        def fill(work):
            subprocess.run(argv[5:], env=dict(os.environ, K8CACHE_OUT=work), check=True)
        try:
            print(build(argv[2], argv[3], fill))
        except subprocess.CalledProcessError as e:
            print("k8cache: building %s-%s failed (%s exited %d); nothing was cached"
                  % (argv[2], argv[3], argv[5], e.returncode), file=sys.stderr)
            return 1
        return 0
    if cmd == "npm" and len(argv) == 3:
        try:
            print(npm(argv[2]))
        except RuntimeError as e:
            print("k8cache: %s" % e, file=sys.stderr)
            return 1
        return 0
    if cmd == "ls":
        r = root()
        for e in sorted(os.listdir(r)):
            p = os.path.join(r, e)
            if e.startswith(".") or not os.path.isdir(p) or \
               not os.path.exists(os.path.join(p, SUMS)):
                continue
            why = check(p)
            print("%-48s %8.1f MiB  %s" % (e, _du(p) / 1048576.0, why or "ok"))
        return 0
    print("k8cache: usage: root | key | get | build NAME KEY -- CMD... | npm SET | ls",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
