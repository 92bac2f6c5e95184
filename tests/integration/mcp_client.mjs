// SPDX-License-Identifier: Apache-2.0
// mcp_client.mjs - the official MCP client (@modelcontextprotocol/sdk, scripts/npm-pins set
// "mcp"), unmodified, driven by a test: one JSON command a line on stdin, one JSON answer
// a line on stdout.
//   {"op":"connect","transport":"stdio","command":"kosa8","args":[...],"env":{...}}
//   {"op":"connect","transport":"http","url":"http://127.0.0.1:P/mcp","token":"..."}
//   {"op":"list"}                       -> {"ok":true,"tools":[{name,description,...}]}
//   {"op":"call","name":N,"arguments":{...},"progress":bool,"abort_after_ms":MS,
//    "timeout_ms":MS}                   -> {"ok":true,"result":{...},"progress":[...]}
//                                          or {"ok":false,"error":{"code","message"}}
//   {"op":"close"}
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import readline from "node:readline";

let client = null;
let transport = null;
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const fail = (e) => ({ ok: false, error: { code: e?.code ?? null, message: String(e?.message ?? e) } });

async function run(cmd) {
  if (cmd.op === "connect") {
    client = new Client({ name: "kosa8-test", version: "1.0.0" });
    if (cmd.transport === "stdio") {
      transport = new StdioClientTransport({
        command: cmd.command, args: cmd.args, env: { ...process.env, ...(cmd.env ?? {}) },
        stderr: "inherit",
      });
    } else {
      const headers = cmd.token ? { Authorization: `Bearer ${cmd.token}` } : {};
      transport = new StreamableHTTPClientTransport(new URL(cmd.url), { requestInit: { headers } });
    }
    await client.connect(transport);
    return { ok: true, server: client.getServerVersion(), capabilities: client.getServerCapabilities(),
             protocol: transport.protocolVersion ?? null, session: transport.sessionId ?? null };
  }
  if (cmd.op === "list") {
    const r = await client.listTools();
    return { ok: true, tools: r.tools };
  }
  if (cmd.op === "call") {
    const progress = [];
    const ac = new AbortController();
    const opts = { timeout: cmd.timeout_ms ?? 300000, signal: ac.signal };
    if (cmd.progress) {
      opts.onprogress = (p) => progress.push(p);
      opts.resetTimeoutOnProgress = true;
    }
    if (cmd.abort_after_ms)
      setTimeout(() => ac.abort("the test cancels"), cmd.abort_after_ms);
    const t0 = Date.now();
    try {
      const result = await client.callTool({ name: cmd.name, arguments: cmd.arguments ?? {} },
                                           undefined, opts);
      return { ok: true, result, progress, ms: Date.now() - t0 };
    } catch (e) {
      return { ...fail(e), progress, ms: Date.now() - t0 };
    }
  }
  if (cmd.op === "close") {
    if (transport?.terminateSession)
      await transport.terminateSession().catch(() => {});
    await client.close();
    return { ok: true };
  }
  return { ok: false, error: { message: "unknown op " + cmd.op } };
}

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  if (!line.trim())
    continue;
  try {
    out(await run(JSON.parse(line)));
  } catch (e) {
    out(fail(e));
  }
}
process.exit(0);
