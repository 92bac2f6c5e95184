// SPDX-License-Identifier: Apache-2.0
// dockerode_client.js - dockerode 5.0.1 (npm, scripts/npm-pins set "dockerode"), unmodified,
// as Node tools use it (testcontainers-node, agent frameworks), against a Docker socket.
//   node dockerode_client.js SOCKET SCENARIO [JSON ARGS]
// Prints one JSON line with what the scenario saw; exits 1 with {"failed": ...} when a call
// failed, and 2 when the scenario did not end within its time (ARGS.timeout_ms, 120 s): a
// client left waiting for an answer that never comes is a failure, not a hang.
// NODE_PATH must hold the set's node_modules (test_88_dockerode.py sets it).
"use strict";
const Docker = require("dockerode");
const tar = require("tar-stream");
const { PassThrough, Writable } = require("stream");

const [sockPath, scenario, argText] = process.argv.slice(2);
const args = argText ? JSON.parse(argText) : {};
const docker = new Docker({ socketPath: sockPath });
const IMG = args.image || "python:3.12-slim";

// A writable that keeps what it is given, as text.
function sink() {
  const w = new Writable({
    write(chunk, enc, cb) { w.text += chunk.toString(); cb(); },
  });
  w.text = "";
  return w;
}

// Everything a stream gives until it ends.
function collect(stream) {
  return new Promise((resolve, reject) => {
    const bufs = [];
    stream.on("data", (b) => bufs.push(Buffer.from(b)));
    stream.on("end", () => resolve(Buffer.concat(bufs)));
    stream.on("close", () => resolve(Buffer.concat(bufs)));
    stream.on("error", reject);
  });
}

// A multiplexed stream split into stdout and stderr text (dockerode's own demuxer).
async function demuxed(stream) {
  const out = sink(), err = sink();
  const ended = new Promise((resolve) => {
    stream.on("end", resolve);
    stream.on("close", resolve);
  });
  docker.modem.demuxStream(stream, out, err);
  await ended;
  return { stdout: out.text, stderr: err.text };
}

// A tar (Buffer) of {name: content}.
function tarOf(files) {
  return new Promise((resolve, reject) => {
    const pack = tar.pack();
    for (const [name, content] of Object.entries(files))
      pack.entry({ name, mode: 0o644 }, content);
    pack.finalize();
    collect(pack).then(resolve, reject);
  });
}

// The files of a tar (Buffer): {name: content}.
function untar(buf) {
  return new Promise((resolve, reject) => {
    const ex = tar.extract(), files = {};
    ex.on("entry", (h, stream, next) => {
      collect(stream).then((b) => {
        files[h.name] = h.type === "directory" ? null : b.toString();
        next();
      });
    });
    ex.on("finish", () => resolve(files));
    ex.on("error", reject);
    ex.end(buf);
  });
}

function followProgress(stream) {
  return new Promise((resolve, reject) => {
    docker.modem.followProgress(stream, (err, res) => (err ? reject(err) : resolve(res)));
  });
}

async function running(cmd, extra) {
  const c = await docker.createContainer(Object.assign({ Image: IMG, Cmd: cmd }, extra || {}));
  await c.start();
  return c;
}

const scenarios = {
  // docker.run: create, attach (no Upgrade header), start, wait.
  async run() {
    const out = sink(), err = sink();
    const [res, c] = await docker.run(IMG, args.cmd, [out, err],
      Object.assign({ Tty: false, HostConfig: { AutoRemove: true } }, args.create || {}));
    return { status: res.StatusCode, error: res.Error, stdout: out.text, stderr: err.text,
             id: c.id };
  },
  // docker.run as its defaults have it (Tty: true): one raw stream.
  async run_tty() {
    const out = new PassThrough();
    const got = collect(out);
    const [res] = await docker.run(IMG, args.cmd, out);
    out.end();
    return { status: res.StatusCode, output: (await got).toString() };
  },
  // attach before the start and after it; a hijacked attach (Upgrade) with stdin.
  async attach() {
    const c = await docker.createContainer({ Image: IMG, Cmd: args.cmd, Tty: false });
    const stream = await c.attach({ stream: true, stdout: true, stderr: true,
                                    hijack: !!args.hijack });
    const got = demuxed(stream);
    await c.start();
    const w = await c.wait();
    const r = await got;
    await c.remove();
    return { status: w.StatusCode, stdout: r.stdout, stderr: r.stderr };
  },
  async attach_after_start() {
    const c = await running(args.cmd, { Tty: false });
    const stream = await c.attach({ stream: true, stdout: true, stderr: true });
    const r = await demuxed(stream);
    const w = await c.wait();
    await c.remove();
    return { status: w.StatusCode, stdout: r.stdout, stderr: r.stderr };
  },
  async attach_stdin() {
    const c = await docker.createContainer({ Image: IMG, Cmd: args.cmd, Tty: false,
                                             OpenStdin: true, StdinOnce: true });
    const stream = await c.attach({ stream: true, stdin: true, stdout: true, stderr: true,
                                    hijack: true });
    const got = demuxed(stream);
    await c.start();
    stream.write(args.input);
    stream.end();      // half-close: stdin ends, output goes on
    const r = await got;
    const w = await c.wait();
    await c.remove();
    return { status: w.StatusCode, stdout: r.stdout, stderr: r.stderr };
  },
  // createContainer + start + wait + logs, and inspect.
  async lifecycle() {
    const c = await docker.createContainer({ Image: IMG, Cmd: args.cmd,
                                             Labels: args.labels || {} });
    await c.start();
    const w = await c.wait();
    const logs = await c.logs({ stdout: true, stderr: true, follow: false });
    const info = await c.inspect();
    const r = { status: w.StatusCode, logs: logs.toString("latin1"),
                state: info.State.Status, exit: info.State.ExitCode };
    if (!args.keep)
      await c.remove();
    else
      r.id = c.id;
    return r;
  },
  // exec without stdin (a plain 200 stream) and with stdin (hijacked, half-closed).
  async exec() {
    const c = await running(["sleep", "600"]);
    try {
      const ex = await c.exec({ Cmd: args.cmd, AttachStdout: true, AttachStderr: true });
      const stream = await ex.start({});
      const r = await demuxed(stream);
      const info = await ex.inspect();
      const ex2 = await c.exec({ Cmd: ["sh", "-c", "cat; echo done >&2"], AttachStdin: true,
                                 AttachStdout: true, AttachStderr: true });
      const s2 = await ex2.start({ hijack: true, stdin: true });
      const got2 = demuxed(s2);
      s2.write(args.input);
      s2.end();
      const r2 = await got2;
      const info2 = await ex2.inspect();
      return { stdout: r.stdout, stderr: r.stderr, code: info.ExitCode,
               stdin_out: r2.stdout, stdin_err: r2.stderr, stdin_code: info2.ExitCode };
    } finally {
      await c.remove({ force: true });
    }
  },
  // putArchive, then getArchive of what was put.
  async archive() {
    const c = await running(["sleep", "600"]);
    try {
      await c.putArchive(await tarOf(args.files), { path: args.path });
      const got = await collect(await c.getArchive({ path: args.get }));
      const check = await c.exec({ Cmd: ["cat", args.path + "/" + Object.keys(args.files)[0]],
                                   AttachStdout: true });
      const seen = await demuxed(await check.start({}));
      return { files: await untar(got), cat: seen.stdout };
    } finally {
      await c.remove({ force: true });
    }
  },
  async list() {
    const all = await docker.listContainers({ all: true, filters: args.filters });
    return { names: all.map((c) => c.Names[0]), states: all.map((c) => c.State) };
  },
  // stats: one sample (stream false), one-shot, and two samples of the stream.
  async stats() {
    const c = await running(["python3", "-c", "import time\nx = bytearray(24 << 20)\n" +
                             "while True: sum(range(20000)); time.sleep(0.05)"]);
    try {
      await new Promise((r) => setTimeout(r, args.settle_ms || 1500));
      const one = await c.stats({ stream: false });
      const shot = await c.stats({ stream: false, "one-shot": true });
      const stream = await c.stats({ stream: true });
      const samples = await new Promise((resolve, reject) => {
        const got = [];
        let buf = "";
        stream.on("data", (b) => {
          buf += b.toString();
          let i;
          while ((i = buf.indexOf("\n")) >= 0) {
            const line = buf.slice(0, i);
            buf = buf.slice(i + 1);
            if (line.trim())
              got.push(JSON.parse(line));
            if (got.length === 2) {
              stream.destroy();
              resolve(got);
            }
          }
        });
        stream.on("error", reject);
      });
      return { one, shot, samples };
    } finally {
      await c.remove({ force: true });
    }
  },
  async top() {
    const c = await running(["sh", "-c", "sleep 600 & exec sleep 601"]);
    try {
      await new Promise((r) => setTimeout(r, 500));
      const def = await c.top();
      const aux = await c.top({ ps_args: "aux" });
      let bad = null;
      try {
        await c.top({ ps_args: "--no-such-thing" });
      } catch (e) {
        bad = { status: e.statusCode, message: String(e.message) };
      }
      return { def, aux, bad };
    } finally {
      await c.remove({ force: true });
    }
  },
  async pull() {
    const events = await followProgress(await docker.pull(args.ref));
    const img = await docker.getImage(args.ref).inspect();
    return { events, id: img.Id };
  },
  async build() {
    const ctx = await tarOf(args.files);
    const stream = await docker.buildImage(ctx, { t: args.tag });
    const events = await followProgress(stream);
    const img = await docker.getImage(args.tag).inspect();
    const out = sink(), err = sink();
    const [res] = await docker.run(args.tag, args.cmd, [out, err],
                                   { Tty: false, HostConfig: { AutoRemove: true } });
    return { events, id: img.Id, status: res.StatusCode, stdout: out.text };
  },
};

const fn = scenarios[scenario];
if (!fn) {
  console.log(JSON.stringify({ failed: "no scenario " + scenario }));
  process.exit(1);
}
const timer = setTimeout(() => {
  console.log(JSON.stringify({ failed: "timeout: the scenario did not end", timeout: true }));
  process.exit(2);
}, args.timeout_ms || 120000);
fn().then((r) => {
  clearTimeout(timer);
  console.log(JSON.stringify(r));
  process.exit(0);
}, (e) => {
  clearTimeout(timer);
  console.log(JSON.stringify({ failed: String(e && e.stack || e), status: e && e.statusCode }));
  process.exit(1);
});
