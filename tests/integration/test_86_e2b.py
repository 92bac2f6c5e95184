# SPDX-License-Identifier: Apache-2.0
# test_86_e2b.py - E2B's official npm clients (e2b 2.51.0, @e2b/code-interpreter 2.8.0),
# unmodified, against kosa8d's E2B-compatible API (docs/e2b.md): pointed at it by
# E2B_API_URL and E2B_SANDBOX_URL only.
#
# Three sandboxes for the whole file: `a` for commands, terminals, files and code (it is
# never paused), `b` for pause, resume, snapshots and forks, `c` for network rules and a
# timeout that runs out. Each is made once; tests connect to it by id, as a program
# reconnecting does.
import json
import os
import time

import pytest

import e2bkit
from conftest import wait_for
from e2bkit import js


@pytest.fixture(scope="module")
def e(python_layout):
    yield from e2bkit.e2b_home("k8e2b-", python_layout)


@pytest.fixture(scope="module")
def a(e):
    return e2bkit.create(e, "{ metadata: { role: 'a', 'k 1': 'v&2' }, envs: { SBX_VAR: 'from-create' }, "
                            "timeoutMs: 900000 }")[0]


@pytest.fixture(scope="module")
def b(e):
    return e2bkit.create(e, "{ metadata: { role: 'b' }, timeoutMs: 900000 }")[0]


def test_create_says_what_it_runs(e, a):
    out = js(e, """
const info = await Sandbox.getInfo(V.id)
const s = await Sandbox.connect(V.id)
return { info, running: await s.isRunning(), metrics: await s.getMetrics() }
""", id=a)
    info = out["info"]
    assert info["sandboxId"] == a and info["templateId"] == "base"
    assert info["state"] == "running" and info["envdVersion"] == "0.5.7"
    assert info["metadata"] == {"role": "a", "k 1": "v&2"}
    assert info["cpuCount"] == 1 and info["memoryMB"] == 512
    assert out["running"] is True
    m = out["metrics"][0]
    assert 0 < m["memUsed"] < m["memTotal"] and 0 < m["diskUsed"] < m["diskTotal"]
    # a kosa8 sandbox like any other, made for E2B
    sb = e.h.json("sandbox", "inspect", "e2b-" + a)
    assert sb["owner"]["kind"] == "e2b" and sb["owner"]["id"] == a
    assert sb["egress"] == "deny"       # kosa8's default, not E2B's


def test_commands_stream_as_they_happen(e, a):
    out = js(e, """
const s = await Sandbox.connect(V.id)
const seen = []
const t0 = Date.now()
const r = await s.commands.run('echo one; echo oops >&2; sleep 2; echo two "$SBX_VAR" "$X"; pwd', {
  envs: { X: 'per-call' }, cwd: '/tmp',
  onStdout: (d) => seen.push(['out', d, Date.now() - t0]),
  onStderr: (d) => seen.push(['err', d, Date.now() - t0]) })
let failed
try { await s.commands.run('echo nope; exit 3') } catch (err) {
  failed = { name: err.constructor.name, code: err.exitCode, stdout: err.stdout } }
return { r, seen, total: Date.now() - t0, failed }
""", id=a)
    assert out["r"]["exitCode"] == 0
    assert out["r"]["stdout"] == "one\ntwo from-create per-call\n/tmp\n"
    assert out["r"]["stderr"] == "oops\n"
    first = [s for s in out["seen"] if s[1] == "one\n"][0]
    two = [s for s in out["seen"] if s[1].startswith("two")][0]
    # "one" reached the callback while the command still slept: streamed, not buffered
    assert two[2] - first[2] >= 1500, out["seen"]
    assert out["failed"] == {"name": "CommandExitError", "code": 3, "stdout": "nope\n"}


def test_background_commands_stdin_and_kill(e, a):
    out = js(e, """
const s = await Sandbox.connect(V.id)
const ticks = []
const bg = await s.commands.run('i=0; while :; do i=$((i+1)); echo tick $i; sleep 1; done',
  { background: true, onStdout: (d) => ticks.push(d) })
for (let i = 0; i < 200 && ticks.length < 2; i++) await sleep(100)
const listed = (await s.commands.list()).map((p) => p.pid)
const killed = await bg.kill()
let end
try { await bg.wait() } catch (err) { end = { name: err.constructor.name, code: err.exitCode } }
const again = await s.commands.kill(bg.pid)
const listedAfter = (await s.commands.list()).map((p) => p.pid)
const rd = await s.commands.run('read a; read b; echo "got $a $b"; cat', { background: true, stdin: true })
await rd.sendStdin('first\\n')
await rd.sendStdin('second\\nrest')
await rd.closeStdin()
const r = await rd.wait()
// a command left running while its client went away, found again with connect
const lone = await s.commands.run('sleep 2; echo late', { background: true })
await lone.disconnect()
const back = await s.commands.connect(lone.pid)
const lr = await back.wait()
return { pid: bg.pid, ticks, listed, killed, end, again, listedAfter, stdin: r.stdout, late: lr.stdout }
""", id=a)
    assert out["pid"] in out["listed"]
    assert out["killed"] is True and out["again"] is False
    assert out["end"] == {"name": "CommandExitError", "code": -1}
    assert out["pid"] not in out["listedAfter"]
    assert len(out["ticks"]) >= 2
    assert out["stdin"] == "got first second\nrest"
    assert out["late"] == "late\n"


def test_command_timeout_kills_it(e, a):
    """`timeoutMs` (the Connect-Timeout-Ms header; the SDK sends 60000 unless told, 0 for
    none) is the command's life, as in envd: when it runs out the process is killed, even
    though the client is gone by then, and the SDK's call throws its TimeoutError."""
    out = js(e, """
const s = await Sandbox.connect(V.id)
const t0 = Date.now()
let err = null
try { await s.commands.run('sleep 300; echo late', { timeoutMs: 3000 }) } catch (x) { err = x.name }
const ms = Date.now() - t0
let left = 1
for (let i = 0; i < 100 && left; i++) {
  left = (await s.commands.list()).filter((p) => (p.args || []).join(' ').includes('sleep 300')).length
  if (left) await sleep(100)
}
const free = await s.commands.run('sleep 4; echo lived', { timeoutMs: 0 })
return { err, ms, left, free: free.stdout }
""", id=a)
    assert out["err"] == "TimeoutError" and out["ms"] < 30000, out
    assert out["left"] == 0, out
    assert out["free"] == "lived\n", out
    acts = [r["details"] for r in e.h.json("audit", "ls", "--sandbox", "e2b-" + a)
            if r["action"] == "sandbox.signal"]
    assert any(d.get("why") == "timeout" and d["signal"] == 9 for d in acts), acts


def test_pty(e, a):
    out = js(e, """
const s = await Sandbox.connect(V.id)
let text = ''
const dec = new TextDecoder()
const t = await s.pty.create({ cols: 80, rows: 24, onData: (d) => { text += dec.decode(d) } })
await s.pty.sendInput(t.pid, new TextEncoder().encode('stty size; tty\\n'))
for (let i = 0; i < 100 && !text.includes('/dev/pts'); i++) await sleep(100)
await s.pty.resize(t.pid, { cols: 100, rows: 30 })
await s.pty.sendInput(t.pid, new TextEncoder().encode('stty size; exit\\n'))
const r = await t.wait()
return { text, code: r.exitCode }
""", id=a)
    assert "24 80" in out["text"] and "30 100" in out["text"] and "/dev/pts/" in out["text"]
    assert out["code"] == 0


def test_files(e, a):
    out = js(e, """
const s = await Sandbox.connect(V.id)
const w = await s.files.write('/work/d/a.txt', 'hello file')
const multi = await s.files.write([{ path: '/work/d/b.bin', data: new Uint8Array([0, 1, 2, 255]) },
                                   { path: 'rel.txt', data: 'in home' }])
const big = 'x'.repeat(3 * 1024 * 1024 + 7)
await s.files.write('/work/big.txt', big)
await s.files.write('/work/octet.txt', 'as octet-stream', { useOctetStream: true })
const bigBack = await s.files.read('/work/big.txt')
const r = {
  w, multi,
  text: await s.files.read('/work/d/a.txt'),
  bytes: Array.from(await s.files.read('/work/d/b.bin', { format: 'bytes' })),
  home: await s.files.read('/root/rel.txt'),
  octet: await s.files.read('/work/octet.txt'),
  bigOk: bigBack.length === big.length && bigBack === big,
  list: (await s.files.list('/work/d')).map((x) => [x.name, x.type, x.size, x.path]).sort(),
  exists: [await s.files.exists('/work/d/a.txt'), await s.files.exists('/nope')],
  info: await s.files.getInfo('/work/d/a.txt'),
  mkdir: [await s.files.makeDir('/work/d/sub'), await s.files.makeDir('/work/d/sub')],
  moved: await s.files.rename('/work/d/a.txt', '/work/d/sub/c.txt'),
}
await s.files.remove('/work/d/b.bin')
r.deep = (await s.files.list('/work/d', { depth: 2 })).map((x) => x.path).sort()
try { await s.files.read('/work/nope.txt') } catch (err) { r.missing = err.constructor.name }
r.seenByCommand = (await s.commands.run('cat /work/d/sub/c.txt; wc -c < /work/big.txt')).stdout
return r
""", id=a)
    assert out["w"] == {"name": "a.txt", "type": "file", "path": "/work/d/a.txt"}
    assert [f["path"] for f in out["multi"]] == ["/work/d/b.bin", "/root/rel.txt"]
    assert out["text"] == "hello file" and out["bytes"] == [0, 1, 2, 255]
    assert out["home"] == "in home" and out["octet"] == "as octet-stream"
    assert out["bigOk"] is True
    assert out["list"] == [["a.txt", "file", 10, "/work/d/a.txt"],
                           ["b.bin", "file", 4, "/work/d/b.bin"]]
    assert out["exists"] == [True, False]
    info = out["info"]
    assert info["size"] == 10 and info["permissions"] == "-rw-r--r--" and info["owner"] == "root"
    assert out["mkdir"] == [True, False]
    assert out["moved"]["path"] == "/work/d/sub/c.txt"
    assert out["deep"] == ["/work/d/sub", "/work/d/sub/c.txt"]
    assert out["missing"] == "FileNotFoundError"
    assert out["seenByCommand"] == "hello file%d\n" % (3 * 1024 * 1024 + 7)


def test_watch_dir(e, a):
    out = js(e, """
const s = await Sandbox.connect(V.id)
await s.files.makeDir('/work/w')
const events = []
const h = await s.files.watchDir('/work/w', (ev) => events.push([ev.type, ev.name]))
await s.files.write('/work/w/new.txt', 'x')
// watchDir is polled (docs/e2b.md): a file made and removed between two polls is never
// seen, and a poll is an exec in the container, slow on a loaded host under ASan
for (let i = 0; i < 200 && events.length < 2; i++) await sleep(100)
await s.commands.run('mkdir /work/w/dir; rm /work/w/new.txt')
for (let i = 0; i < 200 && events.length < 4; i++) await sleep(100)
await h.stop()
return events
""", id=a)
    assert ["create", "new.txt"] in out and ["write", "new.txt"] in out
    assert ["create", "dir"] in out and ["remove", "new.txt"] in out


def test_run_code_keeps_state_across_cells(e, a):
    out = js(e, """
const s = await CodeSandbox.connect(V.id)
const t0 = Date.now()
const seen = []
const c1 = await s.runCode('import time\\nx = 6 * 7\\nprint("first", flush=True)\\ntime.sleep(2)\\nprint("second")\\nx',
  { onStdout: (m) => seen.push([m.line, Date.now() - t0]) })
const c2 = await s.runCode('def f(y):\\n    return x + y\\nf(1)')
const c3 = await s.runCode('f(2) * 10')
const err = await s.runCode('1 / 0')
const str = await s.runCode('"a string"')
const env = await s.runCode('import os; os.environ.get("ONLY_HERE")', { envs: { ONLY_HERE: 'cell' } })
const envAfter = await s.runCode('os.environ.get("ONLY_HERE")')
const fromCreate = await s.runCode('os.environ.get("SBX_VAR")')
await s.files.write('/work/shared.txt', 'written by files')
const shared = await s.runCode('open("/work/shared.txt").read()')
const html = await s.runCode('class H:\\n    def _repr_html_(self): return "<b>hi</b>"\\nH()')
return { c1: c1.toJSON(), seen, c2: c2.text, c3: c3.text, err: err.error, str: str.text, env: env.text,
         envAfter: envAfter.text ?? null, fromCreate: fromCreate.text, shared: shared.text,
         html: html.results[0].html, count: c3.executionCount }
""", id=a)
    c1 = out["c1"]
    assert c1["results"] == [{"text": "42"}] or c1["results"][0]["text"] == "42", c1
    assert c1["logs"]["stdout"] == ["first\n", "second\n"]
    first = [t for line, t in out["seen"] if line == "first\n"][0]
    second = [t for line, t in out["seen"] if line == "second\n"][0]
    assert second - first >= 1500, out["seen"]     # streamed while the cell ran
    assert out["c2"] == "43" and out["c3"] == "440"
    assert out["err"]["name"] == "ZeroDivisionError" and "1 / 0" in out["err"]["traceback"]
    assert out["str"] == "a string"
    assert out["env"] == "cell" and out["envAfter"] is None
    assert out["fromCreate"] == "from-create"
    assert out["shared"] == "written by files"
    assert out["html"] == "<b>hi</b>"


def test_code_contexts(e, a):
    out = js(e, """
const s = await CodeSandbox.connect(V.id)
const ctx = await s.createCodeContext({ cwd: '/tmp' })
await s.runCode('y = "in ctx"', { context: ctx })
const r = {
  ctx,
  cwd: (await s.runCode('import os; os.getcwd()', { context: ctx })).text,
  own: (await s.runCode('y', { context: ctx })).text,
  notInDefault: (await s.runCode('y')).error?.name,
  listed: (await s.listCodeContexts()).map((c) => c.id),
}
await s.restartCodeContext(ctx)
r.afterRestart = (await s.runCode('y', { context: ctx })).error?.name
await s.removeCodeContext(ctx)
r.afterRemove = (await s.listCodeContexts()).map((c) => c.id)
try { await s.runCode('1', { context: ctx }) } catch (err) { r.gone = err.constructor.name }
try { await s.runCode('1', { language: 'r' }) } catch (err) { r.lang = err.message }
return r
""", id=a)
    assert out["ctx"]["language"] == "python" and out["ctx"]["cwd"] == "/tmp"
    assert out["cwd"] == "/tmp" and out["own"] == "in ctx"
    assert out["notInDefault"] == "NameError"
    assert out["ctx"]["id"] in out["listed"] and out["afterRestart"] == "NameError"
    assert out["ctx"]["id"] not in out["afterRemove"]
    assert out["gone"] == "NotFoundError"
    assert "400" in out["lang"]


def test_pause_resume(e, b):
    out = js(e, """
const s = await Sandbox.connect(V.id)
await s.files.write('/tmp/state.txt', 'kept')
await s.commands.run('sleep 1000', { background: true, timeoutMs: 0 })
const paused = await s.pause()
const state = (await Sandbox.getInfo(V.id)).state
const listed = (await Sandbox.list({ query: { state: ['paused'] } }).nextItems()).map((x) => x.sandboxId)
let refused
try { await s.commands.run('true') } catch (err) { refused = err.constructor.name }
const again = await s.pause()
const back = await Sandbox.connect(V.id)
return { paused, state, listed, refused, again, after: (await Sandbox.getInfo(V.id)).state,
         file: await back.files.read('/tmp/state.txt'),
         sleeping: (await back.commands.run("cat /proc/[0-9]*/comm 2>/dev/null | grep -c '^sleep$' || true")).stdout.trim() }
""", id=b)
    assert out["paused"] is True and out["again"] is False
    assert out["state"] == "paused" and b in out["listed"]
    assert out["refused"] in ("SandboxNotFoundError", "TimeoutError", "SandboxError")
    assert out["after"] == "running"
    assert out["file"] == "kept"
    assert int(out["sleeping"]) >= 2    # the keep-alive's and ours: the memory came back
    acts = [r["action"] for r in e.h.json("audit", "ls", "--sandbox", "e2b-" + b)]
    assert "e2b.pause" in acts and "sandbox.pause" in acts and "e2b.resume" in acts


def test_snapshot_and_fork(e, b):
    out = js(e, """
const s = await CodeSandbox.connect(V.id)
await s.files.write('/tmp/gen.txt', 'at snapshot')
await s.runCode('gen = "at snapshot"')
const snap = await s.createSnapshot({ name: 'k8-snap-' + V.id })
await s.files.write('/tmp/gen.txt', 'later')
await s.runCode('gen = "later"')
const fromSnap = await CodeSandbox.create(snap.snapshotId, { timeoutMs: 300000 })
const byName = await Sandbox.create('k8-snap-' + V.id, { timeoutMs: 300000 })
const forks = await s.fork({ count: 2 })
const r = {
  snap, ids: [fromSnap.sandboxId, byName.sandboxId, ...forks.map((f) => f.sandboxId)],
  fromSnap: await fromSnap.files.read('/tmp/gen.txt'),
  byName: await byName.files.read('/tmp/gen.txt'),
  forks: await Promise.all(forks.map((f) => f.files.read('/tmp/gen.txt'))),
  varFromSnap: (await fromSnap.runCode('gen')).text,
  varInFork: (await (await CodeSandbox.connect(forks[0].sandboxId)).runCode('gen')).text,
  listed: (await Sandbox.listSnapshots({ sandboxId: V.id }).nextItems()).map((x) => x.snapshotId),
}
// forks are sandboxes of their own: a write in one is not in another
await forks[0].files.write('/tmp/gen.txt', 'fork 0')
r.fork1 = await forks[1].files.read('/tmp/gen.txt')
for (const x of [fromSnap, byName, ...forks]) await x.kill()
r.deleted = [await Sandbox.deleteSnapshot(snap.snapshotId), await Sandbox.deleteSnapshot(snap.snapshotId)]
return r
""", id=b)
    assert out["snap"]["names"] == ["k8-snap-" + b]
    assert out["fromSnap"] == "at snapshot" and out["byName"] == "at snapshot"
    assert out["forks"] == ["later", "later"] and out["fork1"] == "later"
    # the interpreter's variables are in the machine: a snapshot and a fork keep them
    assert out["varFromSnap"] == "at snapshot" and out["varInFork"] == "later"
    assert len(set(out["ids"])) == 4 and b not in out["ids"]
    assert out["listed"] == [out["snap"]["snapshotId"]]
    assert out["deleted"] == [True, False]


def test_list_filters_and_pages(e, a, b):
    out = js(e, """
const meta = (await Sandbox.list({ query: { metadata: { 'k 1': 'v&2' } } }).nextItems()).map((x) => x.sandboxId)
const none = (await Sandbox.list({ query: { metadata: { role: 'nobody' } } }).nextItems()).length
const running = (await Sandbox.list({ query: { state: ['running'] } }).nextItems()).map((x) => x.sandboxId)
const pages = []
const p = Sandbox.list({ limit: 1 })
while (p.hasNext && pages.length < 10) pages.push((await p.nextItems()).map((x) => x.sandboxId))
return { meta, none, running, pages }
""")
    assert out["meta"] == [a] and out["none"] == 0
    assert a in out["running"] and b in out["running"]
    seen = [x for page in out["pages"] for x in page]
    assert all(len(page) == 1 for page in out["pages"]) and len(out["pages"]) >= 2
    assert len(seen) == len(set(seen)) and {a, b} <= set(seen)


def test_network_rules_and_timeout_expiry(e):
    """allowOut and a header rule (kosa8's broker, the value a kosa8 secret), a live
    update, then the sandbox's own timeout kills it and takes its secret along."""
    cid = e2bkit.create(e, """{ timeoutMs: 600000, network: { allowOut: ['api.example.com', '1.1.1.1'],
      rules: { 'api.example.com': [{ transform: { headers: { 'X-Api-Key': 'sk-e2b-test-7f3a' } } }] } } }""")[0]
    name = "e2b-" + cid
    eg = e.h.json("sandbox", "egress", name)
    assert eg["mode"] == "allow-list" and set(eg["rules"]) == {"api.example.com", "1.1.1.1"}
    br = e.h.json("sandbox", "broker", name)
    assert br["rules"] == ["header:api.example.com:X-Api-Key=e2b-%s-0" % cid]
    secrets = [s["name"] for s in e.h.json("secret", "ls")["secrets"]]
    assert "e2b-%s-0" % cid in secrets
    with open(os.path.join(e.h.path, "sandboxes", name, "e2b.json")) as f:
        assert "sk-e2b-test-7f3a" not in f.read()
    out = js(e, """
const s = await Sandbox.connect(V.id)
const info = await s.getInfo()
await s.updateNetwork({ allowOut: ['example.org', 'api.example.com'], rules: { 'api.example.com': [{ transform: { headers: { 'X-Api-Key': 'sk-rotated-1' } } }] } })
let refused
try { await s.updateNetwork({ egressProxy: { address: 'p.example:1080' } }) } catch (err) { refused = err.message }
await s.setTimeout(3000)
return { net: info.network, refused }
""", id=cid)
    assert out["net"]["allowOut"] == ["api.example.com", "1.1.1.1"]
    assert "X-Api-Key" in json.dumps(out["net"]["rules"]) and "sk-e2b" not in json.dumps(out)
    assert "egressProxy is not supported by kosa8" in out["refused"]
    eg = e.h.json("sandbox", "egress", name)
    assert sorted(eg["rules"]) == ["api.example.com", "example.org"]
    # the timeout runs out: the sandbox and its secret go
    assert wait_for(lambda: e.h("sandbox", "inspect", name).returncode != 0, timeout=60)
    # the secret goes right after the sandbox (e2b_box_kill), not with it
    assert wait_for(lambda: "e2b-%s-0" % cid not in [
        s["name"] for s in e.h.json("secret", "ls")["secrets"]], timeout=30)
    gone = js(e, "return await Sandbox.getInfo(V.id).catch((err) => err.constructor.name)", id=cid)
    assert gone == "SandboxNotFoundError"


def test_autopause_on_timeout(e):
    cid = e2bkit.create(e, "{ timeoutMs: 2000, lifecycle: { onTimeout: 'pause', autoResume: true } }")[0]
    assert wait_for(lambda: e.h.json("sandbox", "inspect", "e2b-" + cid)["state"] == "paused",
                    timeout=60)
    out = js(e, """
const info = await Sandbox.getInfo(V.id)
const s = await Sandbox.connect(V.id)
const r = await s.commands.run('echo back')
await s.kill()
return { state: info.state, lifecycle: info.lifecycle, out: r.stdout }
""", id=cid)
    assert out == {"state": "paused", "lifecycle": {"onTimeout": "pause", "autoResume": True},
                   "out": "back\n"}


def test_audit_like_the_cli(e, a):
    js(e, """
const s = await Sandbox.connect(V.id)
await s.commands.run('echo audited-cmd')
await s.files.write('/work/audited.txt', 'abc')
await (await CodeSandbox.connect(V.id)).runCode('audited_cell = 1')
""", id=a)
    rec = e.h.json("audit", "ls", "--sandbox", "e2b-" + a)
    acts = [r["action"] for r in rec]
    assert "sandbox.create" in acts and "e2b.create" in acts
    ex = [r for r in rec if r["action"] == "sandbox.exec" and r["details"].get("via") == "e2b"]
    assert any("echo audited-cmd" in " ".join(r["details"]["argv"]) for r in ex)
    cp = [r["details"] for r in rec if r["action"] == "sandbox.container.cp"]
    assert any(d["direction"] == "in" and d["path"] == "/work/audited.txt" and d["bytes"] == 3
               and d["via"] == "e2b" for d in cp)
    # a cell, and its end, say they came through the E2B API
    for act in ("sandbox.cell", "sandbox.cell.end"):
        assert any(r["details"].get("via") == "e2b" for r in rec if r["action"] == act), act
    assert e.h.json("audit", "verify")["ok"] is True


def test_kill(e, b):
    out = js(e, """
const killed = await Sandbox.kill(V.id)
const again = await Sandbox.kill(V.id)
return { killed, again, listed: (await Sandbox.list().nextItems()).map((x) => x.sandboxId) }
""", id=b)
    assert out["killed"] is True and out["again"] is False and b not in out["listed"]
    assert e.h("sandbox", "inspect", "e2b-" + b).returncode != 0
    acts = [r["action"] for r in e.h.json("audit", "ls", "--sandbox", "e2b-" + b)]
    assert "e2b.kill" in acts and "sandbox.rm" in acts


def test_daemon_restart_and_removed_sandbox(e, a):
    """A daemon stopped (its VMs with it) and started again: the E2B sandbox was put away to
    disk and comes back whole on its next use, a background process and the interpreter's
    variables included. A VM that died boots again with a fresh container (what ran in the
    old one is gone). A kosa8 sandbox removed behind the E2B API's back leaves its list."""
    js(e, """
const s = await CodeSandbox.connect(V.id)
await s.files.write('/work/keep.txt', 'on disk')
await s.runCode('survivor = 7')
await s.commands.run('sleep 100000', { background: true, timeoutMs: 0 })
""", id=a)
    e.h.stop()
    e.h.start()
    e.url = e.h.json("daemon", "status")["e2b_api"]
    e.port = int(e.url.rsplit(":", 1)[1])
    out = js(e, """
const s = await CodeSandbox.connect(V.id)
const r = await s.commands.run("cat /work/keep.txt; cat /proc/[0-9]*/cmdline | tr '\\\\0' ' ' | grep -c 'sleep 100000' || true")
return { out: r.stdout, x: (await s.runCode('survivor')).text }
""", id=a)
    assert out["out"].startswith("on disk") and int(out["out"][len("on disk"):]) >= 1, out
    assert out["x"] == "7"
    # a VM that died under it: a fresh container, the file with the old one
    pid = e.h.json("sandbox", "inspect", "e2b-" + a)["pid"]
    os.kill(pid, 9)
    out = js(e, """
const s = await Sandbox.connect(V.id)
const r = await s.commands.run('echo fresh; test -e /work/keep.txt && echo kept || echo gone')
return r.stdout
""", id=a)
    assert out == "fresh\ngone\n"
    acts = [r["action"] for r in e.h.json("audit", "ls", "--sandbox", "e2b-" + a)]
    assert "e2b.revive" in acts
    e.h("sandbox", "rm", "-f", "e2b-" + a, check=True)
    gone = lambda: a not in js(e, "return (await Sandbox.list().nextItems()).map((x) => x.sandboxId)")
    assert wait_for(gone, timeout=30)
