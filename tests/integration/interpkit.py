# SPDX-License-Identifier: Apache-2.0
# interpkit.py - the interpreter's API for the end-to-end tests (docs/interpreter.md): a
# cell run over kosa8d.sock with each event's arrival time, and the contexts' routes.
import json
import os
import time

from conftest import UnixHTTP


def api(home, method, url, body=None, timeout=300):
    """(status, parsed JSON body) of one request on home's kosa8d.sock."""
    c = UnixHTTP(os.path.join(home.path, "kosa8d.sock"), timeout=timeout)
    data = json.dumps(body) if body is not None else None
    c.request(method, url, body=data, headers={"Expect": ""} if data else {})
    r = c.getresponse()
    raw = r.read()
    c.close()
    return r.status, (json.loads(raw) if raw.strip() else None)


def cell(home, sandbox, code, ctx="default", timeout=600, **fields):
    """Run one cell: (status, [(seconds since the request, event)]); an error answer gives
    (status, its error object)."""
    body = dict(fields, code=code)
    c = UnixHTTP(os.path.join(home.path, "kosa8d.sock"), timeout=timeout)
    t0 = time.monotonic()
    c.request("POST", "/v1/sandboxes/%s/contexts/%s/run" % (sandbox, ctx),
              body=json.dumps(body), headers={"Expect": ""})
    r = c.getresponse()
    if r.status != 200:
        err = json.loads(r.read())
        c.close()
        return r.status, err
    assert r.getheader("Content-Type") == "application/x-ndjson"
    events = []
    while True:
        line = r.readline()
        if not line:
            break
        events.append((time.monotonic() - t0, json.loads(line)))
    c.close()
    return r.status, events


def evs(events, type_=None):
    return [e for _, e in events if type_ is None or e["type"] == type_]


def main_result(events):
    """The text/plain of the cell's main result, or None."""
    for e in evs(events, "result"):
        if e["is_main_result"]:
            return e["data"]["text/plain"]
    return None


def stdout(events):
    return "".join(e["text"] for e in evs(events, "stdout"))


def ok_end(events):
    """The last event is kosa8d's end; returns it."""
    assert events, "no events"
    end = events[-1][1]
    assert end["type"] == "end", events
    assert [e for e in evs(events) if e["type"] == "end"] == [end], "more than one end"
    return end
