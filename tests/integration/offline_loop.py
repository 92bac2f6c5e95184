# SPDX-License-Identifier: Apache-2.0
"""The guide's interpreter loop on a machine with no network (issue 13), run by
test_87_offline.py as `unshare -n python3 offline_loop.py BUNDLE HOME OUT.json`: a new
network namespace holds only a loopback interface, brought up here and nothing else.

Inside it: kosa8d --offline with an empty KOSA8_HOME imports the bundle (guest image,
python image, model), serves the model, and a plain-HTTP OpenAI client (urllib) asks it a
question with run_code as a tool. The model is scripted (tests/model/scripted.py: hand-set
weights that always answer with one tool call), so the tool call is real model output
parsed by the server, but its content was chosen by the test. The client runs the code
with `kosa8 sandbox exec` in an --egress deny sandbox (a container started from the
bundled image), sends the output back as the tool result (the scripted model then repeats
its call; only that the server takes the result is checked), and rewinds the sandbox to
its checkpoint from before the code ran. Everything seen goes to OUT.json for the test.
"""
import json
import os
import subprocess
import sys
import time
import urllib.request

KOSA8 = os.path.join(os.environ["KOSA8_BIN"], "kosa8")
PORT = 7434
TOOLS = [{"type": "function", "function": {
    "name": "run_code", "description": "Run Python code in a sealed sandbox",
    "parameters": {"type": "object", "properties": {"code": {"type": "string"}},
                   "required": ["code"]}}}]


def net_state():
    """Interfaces (up or down) with their byte counters, and the routes, of this namespace."""
    ifs = {}
    with open("/proc/net/dev") as f:
        for line in f.readlines()[2:]:
            name, _, rest = line.partition(":")
            v = rest.split()
            ifs[name.strip()] = {"rx": int(v[0]), "tx": int(v[8])}
    for name in ifs:
        with open("/sys/class/net/%s/operstate" % name) as f:
            ifs[name]["state"] = f.read().strip()
        with open("/sys/class/net/%s/flags" % name) as f:
            ifs[name]["up"] = bool(int(f.read(), 16) & 1)
    with open("/proc/net/route") as f:
        routes4 = [line.split()[:3] for line in f.readlines()[1:]]
    with open("/proc/net/ipv6_route") as f:
        routes6 = [line.split() for line in f if not line.split()[-1] == "lo"]
    return {"ifs": ifs, "routes4": routes4, "routes6": routes6}


def main():
    bundle, home, out = sys.argv[1:4]
    res = {"steps": []}
    env = dict(os.environ, KOSA8_HOME=home)
    env.pop("KOSA8_GUEST_DIR", None)

    def k(*args, timeout=600, check=True):
        t0 = time.monotonic()
        p = subprocess.run([KOSA8, *args], capture_output=True, text=True, timeout=timeout,
                           env=env)
        res["steps"].append({"args": list(args), "rc": p.returncode, "s": round(time.monotonic() - t0, 2),
                             "out": p.stdout[-2000:], "err": p.stderr[-2000:]})
        if check and p.returncode:
            raise RuntimeError("kosa8 %s: %d %s%s" % (" ".join(args), p.returncode, p.stdout, p.stderr))
        return p

    def chat(messages):
        body = json.dumps({"model": "tool", "messages": messages, "tools": TOOLS}).encode()
        req = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % PORT, data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())

    try:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        res["net_before"] = net_state()
        k("daemon", "start", "--offline", timeout=200)
        res["status"] = json.loads(k("daemon", "status", "--json").stdout)
        res["status_text"] = k("daemon", "status").stdout
        # What would need the network says so at once.
        res["image_pull"] = k("image", "pull", "python:3.13-slim", check=False, timeout=60).__dict__
        res["model_pull"] = k("model", "pull", "Qwen/Qwen2.5-0.5B-Instruct-GGUF:q4_k_m",
                              check=False, timeout=60).__dict__
        k("bundle", "import", bundle, timeout=900)
        res["status_after"] = json.loads(k("daemon", "status", "--json").stdout)
        res["models"] = json.loads(k("model", "ls", "--json").stdout)
        res["serve"] = json.loads(k("model", "serve", "tool", "--port", str(PORT), "--threads", "1",
                                    "--ctx", "2048", "--json", timeout=200).stdout)
        k("sandbox", "create", "interp", "--cpus", "1", "--memory", "512", "--disk", "2",
          "--egress", "deny", timeout=300)
        k("sandbox", "pull", "interp", "python:3.12-slim", timeout=900)
        cid = k("sandbox", "start", "interp", "python:3.12-slim", "sleep", "100000").stdout.strip()
        # An image that is not in the store: refused at once, by name, for the sandbox too.
        res["sandbox_pull_remote"] = k("sandbox", "pull", "interp", "python:3.13-slim",
                                       check=False, timeout=60).__dict__
        res["sandbox_run_remote"] = k("sandbox", "run", "interp", "python:3.13-slim", "true",
                                      check=False, timeout=60).__dict__
        k("checkpoint", "interp", "--label", "before-code", timeout=600)

        messages = [{"role": "user", "content": "What is six times seven? Use run_code."}]
        r1 = chat(messages)
        res["reply1"] = r1
        msg = r1["choices"][0]["message"]
        call = msg["tool_calls"][0]
        code = json.loads(call["function"]["arguments"])["code"]
        ran = k("sandbox", "exec", "interp", cid, "python3", "-c", code, check=False, timeout=300)
        res["ran"] = {"rc": ran.returncode, "out": ran.stdout, "err": ran.stderr}
        messages += [msg, {"role": "tool", "tool_call_id": call["id"], "content": ran.stdout}]
        res["reply2"] = chat(messages)
        res["egress"] = json.loads(k("sandbox", "egress", "interp", "--json").stdout)
        res["mark_before_rewind"] = k("sandbox", "exec", "interp", cid, "sh", "-c",
                                      "test -e /k8-mark; echo $?").stdout.strip()
        k("rewind", "interp", "--to", "before-code", "-y", timeout=600)
        res["mark_after_rewind"] = k("sandbox", "exec", "interp", cid, "sh", "-c",
                                     "test -e /k8-mark; echo $?").stdout.strip()
        res["net_after"] = net_state()
        res["ok"] = True
    except Exception as e:  # the test reads the steps to say what broke
        res["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        k("model", "stop", "tool", check=False, timeout=60)
        k("sandbox", "rm", "-f", "interp", check=False, timeout=300)
        k("daemon", "stop", check=False, timeout=120)
        with open(out, "w") as f:
            json.dump(res, f, indent=1, default=str)


if __name__ == "__main__":
    main()
