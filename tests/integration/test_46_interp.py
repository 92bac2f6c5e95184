# SPDX-License-Identifier: Apache-2.0
# test_46_interp.py - the stateful interpreter (docs/interpreter.md): Python contexts in a
# sandbox's container whose variables persist between cells, whose output streams as it
# is written, and which a checkpoint holds: a rewind brings a variable back, a fork goes
# on with it. Through the API (kosa8d.sock) and the CLI (sandbox cell, context, repl).
# One sandbox for the module; the checkpoint test rewinds it instead of booting another.
import json
import time

import pytest

from conftest import make_sandbox
from interpkit import api, cell, evs, main_result, ok_end, stdout

SB = "itp"


@pytest.fixture(scope="module")
def isb(home, loaded):
    make_sandbox(home, SB, image=loaded)
    yield SB
    home("sandbox", "rm", SB, timeout=120)


def test_state_persists_between_cells(home, isb):
    st, ev = cell(home, isb, "x = 41\ndef f(v):\n    return v + 1\nimport os")
    assert st == 200, ev
    end = ok_end(ev)
    assert end["ok"] is True and main_result(ev) is None
    first = evs(ev, "start")[0]
    assert first["context"].endswith("-default") and first["context"] == end["context"]
    st, ev = cell(home, isb, "f(x)")
    assert main_result(ev) == "42"
    assert ok_end(ev)["execution_count"] == end["execution_count"] + 1
    # the CLI shows the same context's value
    p = home("sandbox", "cell", isb, "os.path.basename(os.getcwd() + 'x')")
    assert p.returncode == 0 and p.stdout == "'x'\n", (p.stdout, p.stderr)


def test_output_streams_in_order(home, isb):
    code = ("import sys, time, subprocess\n"
            "print('a')\n"
            "print('b', file=sys.stderr)\n"
            "print('c')\n"
            "subprocess.run(['echo', 'from a child'])\n"
            "sys.stdout.flush(); time.sleep(3)\n"
            "print('late')\n"
            "'done'")
    st, ev = cell(home, isb, code)
    assert st == 200, ev
    kinds = [(e["type"], e.get("text")) for _, e in ev if e["type"] in ("stdout", "stderr")]
    text = "".join(t for _, t in kinds)
    assert text == "a\nb\nc\nfrom a child\nlate\n", kinds
    # stdout and stderr keep their order: a, then b on stderr, then c
    assert [k for k, t in kinds if t.strip() in ("a", "b", "c")] == ["stdout", "stderr", "stdout"]
    # streamed: what was printed before the sleep arrived seconds before what came after
    t_c = next(t for t, e in ev if e["type"] == "stdout" and "c" in e["text"])
    t_late = next(t for t, e in ev if e["type"] == "stdout" and "late" in e["text"])
    assert t_late - t_c >= 2.0, (t_c, t_late)
    assert main_result(ev) == "'done'"
    assert evs(ev)[-1]["type"] == "end"


def test_exception_shape(home, isb):
    st, ev = cell(home, isb, "print('before')\n1/0\nprint('never')")
    errs = evs(ev, "error")
    assert len(errs) == 1, ev
    e = errs[0]
    assert e["name"] == "ZeroDivisionError" and e["value"] == "division by zero"
    assert "Traceback (most recent call last)" in e["traceback"]
    assert "<cell-" in e["traceback"] and "1/0" in e["traceback"]
    assert "driver" not in e["traceback"], "kosa8's own frames leak into the traceback"
    assert "source" not in e, "the code's own error is marked as kosa8's"
    assert stdout(ev) == "before\n"
    assert ok_end(ev)["ok"] is False
    st, ev = cell(home, isb, "def f(:\n  pass")
    assert evs(ev, "error")[0]["name"] == "SyntaxError"
    # the CLI: the traceback on stderr, exit 1; the context goes on
    p = home("sandbox", "cell", isb, "raise ValueError('nope')")
    assert p.returncode == 1 and "ValueError: nope" in p.stderr, (p.returncode, p.stderr)
    assert main_result(cell(home, isb, "x")[1]) == "41"


def test_env_vars_for_one_cell(home, isb):
    st, ev = cell(home, isb, "import os\nos.environ.get('K8_ONE')", env={"K8_ONE": "yes"})
    assert main_result(ev) == "'yes'"
    st, ev = cell(home, isb, "repr(os.environ.get('K8_ONE'))")
    assert main_result(ev) == "'None'"
    st, err = cell(home, isb, "1", env={"1BAD": "x"})
    assert st == 400 and "not a variable name" in err["error"]["message"]


def test_rich_results_and_display(home, isb):
    code = ("class R:\n"
            "    def _repr_html_(self): return '<b>bold</b>'\n"
            "    def _repr_png_(self): return b'\\x89PNG fake'\n"
            "    def __repr__(self): return 'R()'\n"
            "display(R())\n"
            "R()")
    st, ev = cell(home, isb, code)
    res = evs(ev, "result")
    assert [r["is_main_result"] for r in res] == [False, True], res
    d = res[1]["data"]
    assert d["text/plain"] == "R()" and d["text/html"] == "<b>bold</b>"
    import base64
    assert base64.b64decode(d["image/png"]) == b"\x89PNG fake"


def test_timeout_interrupts_and_state_stays(home, isb):
    st, ev = cell(home, isb, "import time\nkept = 7\nprint('start', flush=True)\ntime.sleep(60)",
                  timeout_s=3)
    errs = evs(ev, "error")
    assert errs and errs[-1]["name"] == "TimeoutError" and errs[-1]["source"] == "kosa8", ev
    assert ok_end(ev)["ok"] is False and stdout(ev) == "start\n"
    assert ev[-1][0] < 40, "the timeout did not end the cell"
    # the cell was interrupted in the driver (KeyboardInterrupt), its state kept
    assert main_result(cell(home, isb, "kept")[1]) == "7"
    p = home("sandbox", "cell", isb, "--timeout", "2", "time.sleep(30)")
    assert p.returncode == 124, (p.returncode, p.stderr)


def test_contexts_create_list_restart_rm(home, isb):
    st, c = api(home, "POST", "/v1/sandboxes/%s/contexts" % isb,
                {"cwd": "/tmp", "env": {"CTX_VAR": "v1"}})
    assert st == 200, c
    cid = c["id"]
    assert c["cwd"] == "/tmp" and c["alive"] is True and c["language"] == "python"
    st, ev = cell(home, isb, "import os\ny = 5\n(os.getcwd(), os.environ['CTX_VAR'])", ctx=cid)
    assert main_result(ev) == "('/tmp', 'v1')"
    # the default context does not see y
    assert evs(cell(home, isb, "y")[1], "error")[0]["name"] == "NameError"
    st, lst = api(home, "GET", "/v1/sandboxes/%s/contexts" % isb)
    ids = [x["id"] for x in lst]
    assert cid in ids and any(i.endswith("-default") for i in ids), lst
    # restart: same id, folder and environment, no variables
    st, c2 = api(home, "POST", "/v1/sandboxes/%s/contexts/%s/restart" % (isb, cid))
    assert st == 200 and c2["id"] == cid and c2["pid"] != c["pid"], c2
    st, ev = cell(home, isb, "import os\n(os.getcwd(), os.environ['CTX_VAR'], 'y' in dir())",
                  ctx=cid)
    assert main_result(ev) == "('/tmp', 'v1', False)"
    # rm: gone from the list, its cells 404
    st, _ = api(home, "DELETE", "/v1/sandboxes/%s/contexts/%s" % (isb, cid))
    assert st == 200
    st, err = cell(home, isb, "1", ctx=cid)
    assert st == 404, err
    st, err = api(home, "DELETE", "/v1/sandboxes/%s/contexts/%s" % (isb, cid))
    assert st == 404
    st, err = cell(home, isb, "1", ctx="not-an-id")
    assert st == 404
    # the CLI's view
    p = home("sandbox", "context", isb)
    assert p.returncode == 0 and "-default" in p.stdout and cid not in p.stdout, p.stdout


def test_rewind_brings_variables_back_and_fork_keeps_them(home, isb):
    assert main_result(cell(home, isb, "x = 1\nx")[1]) == "1"
    home("checkpoint", isb, "--label", "x1", check=True, timeout=300)
    assert main_result(cell(home, isb, "x = 2\nx")[1]) == "2"
    home("rewind", isb, "--to", "x1", "-y", check=True, timeout=300)
    st, ev = cell(home, isb, "x")
    assert st == 200 and main_result(ev) == "1", ev
    # a fork continues with the same context and variables
    p = home("sandbox", "fork", isb, "--from", "x1", "--name", "itp-fork", "--json",
             timeout=300)
    assert p.returncode == 0, p.stderr
    try:
        st, ev = cell(home, "itp-fork", "x += 10\nx")
        assert st == 200 and main_result(ev) == "11", ev
        assert main_result(cell(home, isb, "x")[1]) == "1", "the fork changed the source"
    finally:
        home("sandbox", "rm", "itp-fork", timeout=120)


def test_repl_for_a_person(home, isb):
    code = "for i in range(2):\n    print('line', i)\n\nq = 3\nq * 3\n"
    p = home("sandbox", "repl", isb, input=code)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "line 0\nline 1\n9\n", p.stdout


def test_cells_are_audited(home, isb):
    p = home("audit", "ls", "--sandbox", isb, "--json", timeout=60)
    assert p.returncode == 0, p.stderr
    recs = json.loads(p.stdout)
    actions = [r["action"] for r in recs]
    for a in ("sandbox.context.create", "sandbox.cell", "sandbox.cell.end",
              "sandbox.context.restart", "sandbox.context.rm"):
        assert a in actions, (a, sorted(set(actions)))
    cellrec = next(r for r in recs if r["action"] == "sandbox.cell")
    assert len(cellrec["details"]["code_sha256"]) == 64
