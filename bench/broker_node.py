# SPDX-License-Identifier: Apache-2.0
# broker_node.py - issue 14's broker figures again, with the official openai npm client as
# the client inside a sandbox (brief broker4): what the broker adds to a real SDK call made
# from a VM, against the same SDK in the same VM talking to the same upstream directly.
#
# A daemon of its own (the accelerator it picks, printed; under TCG the guest's own CPU time hides
# the broker's fraction of a millisecond, and the figures say so), the tests' HTTPS upstream
# (tests/integration/broker_upstream.py, a netns of our own, test CA), scripts/node-image.sh's
# image. One sandbox, `--broker openai=openai --egress allow-all`, runs one node process that
# measures, with one kept-alive client each:
#   broker:  new OpenAI() from the environment (the placeholder, OPENAI_BASE_URL = the
#            broker inside the sandbox, plain HTTP; the broker does the TLS upstream)
#   direct:  new OpenAI({baseURL: "https://<upstream ip>/v1"}) over the sandbox's egress
#            (kosa8-net's NAT), TLS in node, certificate checks off (the name is not the IP's)
# Figures: chat.completions.create round trip (median, p90), time to the first streamed
# token, and requests/s with 32 concurrent calls for BENCH_BROKER_S seconds.
# Environment: BENCH_N (round trips per side, default 200), BENCH_BROKER_S (default 5).
# Needs root (netns, debootstrap for the image once).
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import brokerkit as bk  # noqa: E402
from k8cli import TOP, k  # noqa: E402

N = int(os.environ.get("BENCH_N", "200"))
SECS = float(os.environ.get("BENCH_BROKER_S", "5"))
KEY = "sk-bench-node-key-0123456789"
IMG = "k8-node-sdk:test"

# In the guest: node, ESM, the openai package of /app/node_modules.
SCRIPT = r"""
import OpenAI from "openai";
const [n, secs, direct] = [Number(process.argv[1]), Number(process.argv[2]), process.argv[3]];
const req = { model: "test", messages: [{ role: "user", content: "hi" }] };
const clients = {
  broker: new OpenAI({ maxRetries: 0 }),
  direct: new OpenAI({ maxRetries: 0, apiKey: "sk-direct", baseURL: direct }),
};
const now = () => Number(process.hrtime.bigint()) / 1e6;
const q = (a, p) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(p * (s.length - 1))]; };
const out = {};
for (const c of Object.values(clients)) for (let i = 0; i < 20; i++) await c.chat.completions.create(req);
const rt = { broker: [], direct: [] };
for (let r = 0; r < 4; r++)
  for (const [name, c] of Object.entries(clients))
    for (let i = 0; i < n / 4; i++) {
      const t = now(); await c.chat.completions.create(req); rt[name].push(now() - t);
    }
for (const name of ["broker", "direct"]) {
  const c = clients[name], fb = [];
  for (let i = 0; i < 40; i++) {
    const t = now();
    const s = await c.chat.completions.create({ ...req, stream: true });
    let first = null;
    for await (const ch of s) if (first === null) first = now() - t;
    fb.push(first);
  }
  let done = 0; const end = now() + secs * 1000;
  await Promise.all(Array.from({ length: 32 }, async () => {
    while (now() < end) { await c.chat.completions.create(req); done++; }
  }));
  out[name] = { rt_median: q(rt[name], 0.5), rt_p90: q(rt[name], 0.9), first_median: q(fb, 0.5),
                rps: done / secs };
}
console.log(JSON.stringify(out));
"""


def main():
    if os.geteuid() != 0:
        raise SystemExit("broker_node.py needs root (network namespace)")
    p = subprocess.run([os.path.join(TOP, "scripts", "node-image.sh")], capture_output=True,
                       text=True)
    if p.returncode:
        print("broker_node: skipped, the node image could not be built: " + p.stderr[-300:])
        return
    node_layout = p.stdout.strip().splitlines()[-1]
    tmp = tempfile.mkdtemp(prefix="k8bnb", dir="/tmp")
    up = bk.Upstream(tmp)
    home = tempfile.mkdtemp(prefix="k8bnh", dir="/tmp")
    try:
        with open(os.path.join(home, "config.json"), "w") as f:
            json.dump(bk.upstream_config(up), f)
        k(home, "daemon", "start")
        accel = json.loads(k(home, "daemon", "status", "--json").stdout).get("accel", "?")
        k(home, "image", "load", node_layout, "--tag", IMG)
        subprocess.run([os.path.join(TOP, "build", "bin", "kosa8"), "secret", "set", "openai",
                        "--stdin"], input=KEY, text=True, check=True,
                       env=dict(os.environ, KOSA8_HOME=home), capture_output=True)
        k(home, "sandbox", "create", "nb", "--cpus", "1", "--memory", "512", "--disk", "2",
          "--broker", "openai=openai", "--egress", "allow-all")
        k(home, "sandbox", "pull", "nb", IMG)
        r = k(home, "sandbox", "run", "-e", "NODE_TLS_REJECT_UNAUTHORIZED=0", "nb", IMG,
              "node", "--input-type=module", "-e", SCRIPT, str(N), str(SECS),
              "https://%s/v1" % up.ip)
        res = json.loads(r.stdout.strip().splitlines()[-1])
        b, d = res["broker"], res["direct"]
        print("node openai SDK in a sandbox (accel %s, N=%d): round trip median direct %.2f ms, "
              "broker %.2f ms (%+.2f ms); p90 direct %.2f, broker %.2f" % (
                  accel, N, d["rt_median"], b["rt_median"], b["rt_median"] - d["rt_median"],
                  d["rt_p90"], b["rt_p90"]))
        print("first streamed token median: direct %.2f ms, broker %.2f ms (%+.2f ms)" % (
            d["first_median"], b["first_median"], b["first_median"] - d["first_median"]))
        print("32 concurrent SDK calls: direct %.0f req/s, broker %.0f req/s (%.0f %%)" % (
            d["rps"], b["rps"], 100.0 * b["rps"] / max(d["rps"], 1e-9)))
    finally:
        k(home, "daemon", "stop", check=False)
        up.close()
        subprocess.run(["rm", "-rf", home, tmp])


if __name__ == "__main__":
    main()
