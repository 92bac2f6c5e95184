# SPDX-License-Identifier: Apache-2.0
"""Forks and rewinds do not share randomness (issue 34).

Two forks of one checkpoint start from the same memory. Each run of that memory gets a
generation of its own (the init's "generation", /dev/kosa8/generation in every
container) and a reseeded kernel RNG, so they read different /dev/urandom bytes, even a
process that was alive at the checkpoint. What such a process keeps is its own
userspace state: Python's `random` gives the same numbers in both forks, which is what
docs/design.md "Forks, rewinds and randomness" tells users to reseed."""
import re

import pytest

# Alive across the checkpoint: answers, on request, what it sees now.
HOLDER = ("import os, random, time\n"
          "random.seed(1234)\n"
          "while True:\n"
          "    if os.path.exists('/ask'):\n"
          "        ans = '%s %s %d' % (open('/dev/kosa8/generation').read().strip(),\n"
          "                            os.urandom(16).hex(), random.getrandbits(64))\n"
          "        open('/ans.tmp', 'w').write(ans)\n"
          "        os.rename('/ans.tmp', '/ans'); os.remove('/ask')\n"
          "    time.sleep(0.05)\n")

ASK = ("import os, time\n"
       "if os.path.exists('/ans'): os.remove('/ans')\n"
       "open('/ask', 'w').close()\n"
       "for i in range(400):\n"
       "    if os.path.exists('/ans'): print(open('/ans').read()); break\n"
       "    time.sleep(0.05)\n")

FRESH = ("import os; print(open('/dev/kosa8/generation').read().strip(), os.urandom(16).hex())")


def ask(home, sb, cid):
    p = home("sandbox", "exec", sb, cid, "python3", "-c", ASK, timeout=120)
    assert p.returncode == 0 and p.stdout.strip(), (sb, p.stdout, p.stderr)
    gen, rnd, prng = p.stdout.split()         # the image's python has no json module
    return {"gen": gen, "urandom": rnd, "prng": int(prng)}


def fresh(home, sb, image):
    p = home("sandbox", "run", sb, image, "python3", "-c", FRESH, timeout=120)
    assert p.returncode == 0, (sb, p.stderr)
    gen, rnd = p.stdout.split()
    return gen, rnd


@pytest.fixture
def holder(home, sandbox, loaded):
    cid = home("sandbox", "start", sandbox, loaded, "python3", "-c", HOLDER,
               check=True).stdout.strip()
    yield cid
    home("sandbox", "stop", "-t", "0", sandbox, cid, timeout=120)


def test_forks_and_rewinds_get_their_own_generation_and_randomness(home, sandbox, loaded, holder):
    cid = holder
    src_before = ask(home, sandbox, cid)
    assert re.fullmatch(r"[0-9a-f]{32}", src_before["gen"]), src_before
    home("checkpoint", sandbox, "--label", "gen34", check=True, timeout=300)
    forks = ["gen34-a", "gen34-b"]
    try:
        for f in forks:
            home("sandbox", "fork", sandbox, "--from", "gen34", "--name", f, check=True,
                 timeout=300)
        seen = {f: ask(home, f, cid) for f in forks}
        seen["source"] = ask(home, sandbox, cid)
        # the source's run goes on: same generation; each fork has one of its own
        assert seen["source"]["gen"] == src_before["gen"], seen
        gens = [seen[k]["gen"] for k in ("source", *forks)]
        assert len(set(gens)) == 3, seen
        # the kernel's RNG differs, even for the process alive at the checkpoint
        assert len({seen[k]["urandom"] for k in ("source", *forks)}) == 3, seen
        # what stays shared: that process's own PRNG state (docs say: reseed)
        assert seen[forks[0]]["prng"] == seen[forks[1]]["prng"], seen
        # a new process sees the same generation as the old one, and fresh bytes
        g_a, r_a = fresh(home, forks[0], loaded)
        g_b, r_b = fresh(home, forks[1], loaded)
        assert g_a == seen[forks[0]]["gen"] and g_b == seen[forks[1]]["gen"]
        assert r_a != r_b
    finally:
        for f in forks:
            home("sandbox", "rm", f, timeout=120)
    # a rewind is a new run of that memory too
    home("rewind", sandbox, "--to", "gen34", "-y", check=True, timeout=300)
    after = ask(home, sandbox, cid)
    assert after["gen"] not in gens and after["urandom"] not in {
        seen[k]["urandom"] for k in seen}, (after, seen)
    home("checkpoint", "rm", sandbox, "gen34", timeout=120)
