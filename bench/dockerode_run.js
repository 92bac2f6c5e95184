// SPDX-License-Identifier: Apache-2.0
// dockerode_run.js - dockerode 5.0.1's docker.run(IMG, ["true"]) as Node tools call it
// (create, attach, start, wait), timed in one node process so that node's own start-up is
// not in the figure (as docker-py's is not in its own):
//   node dockerode_run.js SOCKET IMG N TIMEOUT_MS
// Prints one JSON line: the seconds of each run, or {"hung": i} when run i did not return
// within TIMEOUT_MS (what dockerode's run did before issue 26). NODE_PATH: the set's
// node_modules (scripts/k8cache.py npm dockerode).
"use strict";
const Docker = require("dockerode");
const { Writable } = require("stream");

const [sock, img, n, timeoutMs] = process.argv.slice(2);
const docker = new Docker({ socketPath: sock });
const drop = () => new Writable({ write(c, e, cb) { cb(); } });

(async () => {
  const times = [];
  for (let i = 0; i < Number(n); i++) {
    await new Promise((r) => setTimeout(r, 300));   // the bench's settle time
    const t0 = process.hrtime.bigint();
    let timer;
    const hung = new Promise((r) => { timer = setTimeout(() => r("hung"), Number(timeoutMs)); });
    const done = docker.run(img, ["true"], [drop(), drop()],
                            { Tty: false, HostConfig: { AutoRemove: true } });
    const r = await Promise.race([done, hung]);
    clearTimeout(timer);
    if (r === "hung") {
      console.log(JSON.stringify({ hung: i, times }));
      process.exit(0);
    }
    if (r[0].StatusCode !== 0)
      throw new Error("run true exited " + r[0].StatusCode);
    times.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  console.log(JSON.stringify({ times }));
})().catch((e) => { console.log(JSON.stringify({ error: String(e) })); process.exit(1); });
