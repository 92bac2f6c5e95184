// SPDX-License-Identifier: Apache-2.0
// client.mjs - drive kosa8-model serve with the official SDKs (openai, @anthropic-ai/sdk),
// installed by the test fixture into build/node-api (K8_NODE_API). One call per run:
//   node client.mjs BASE_URL '{"sdk": "openai"|"anthropic", "op": ..., "params": {...}}'
// prints one JSON line: what the SDK returned (streams are collected into events + final).
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.K8_NODE_API, "package.json"));
const OpenAI = require("openai").default ?? require("openai");
const AnthropicMod = require("@anthropic-ai/sdk");
const Anthropic = AnthropicMod.default ?? AnthropicMod;

const [base, spec] = process.argv.slice(2);
const { sdk, op, params } = JSON.parse(spec);

async function main() {
  if (sdk === "openai") {
    const c = new OpenAI({ baseURL: base + "/v1", apiKey: "unused", maxRetries: 0 });
    if (op === "chat") return await c.chat.completions.create(params);
    if (op === "completion") return await c.completions.create(params);
    if (op === "models") return await c.models.list();
    if (op === "chat_stream") {
      const chunks = [];
      const stream = await c.chat.completions.create({ ...params, stream: true });
      for await (const ch of stream) chunks.push(ch);
      let content = "", finish = null;
      const calls = {};
      for (const ch of chunks) {
        for (const choice of ch.choices) {
          if (choice.delta?.content) content += choice.delta.content;
          for (const tc of choice.delta?.tool_calls ?? []) {
            const k = calls[tc.index] ??= { id: "", name: "", arguments: "" };
            if (tc.id) k.id = tc.id;
            if (tc.function?.name) k.name += tc.function.name;
            if (tc.function?.arguments) k.arguments += tc.function.arguments;
          }
          if (choice.finish_reason) finish = choice.finish_reason;
        }
      }
      return { n_chunks: chunks.length, content, finish, tool_calls: Object.values(calls),
               usage: chunks.at(-1)?.usage ?? null };
    }
    if (op === "completion_stream") {
      const stream = await c.completions.create({ ...params, stream: true });
      let text = "", finish = null, n = 0;
      for await (const ch of stream) {
        n++;
        text += ch.choices[0]?.text ?? "";
        finish = ch.choices[0]?.finish_reason ?? finish;
      }
      return { n_chunks: n, text, finish };
    }
  } else {
    const c = new Anthropic({ baseURL: base, apiKey: "unused", maxRetries: 0 });
    if (op === "create") return await c.messages.create(params);
    if (op === "stream") {
      const events = [];
      const stream = c.messages.stream(params);
      stream.on("streamEvent", (e) => events.push(e.type));
      const text = [];
      stream.on("text", (t) => text.push(t));
      const final = await stream.finalMessage();
      return { events, text, final };
    }
  }
  throw new Error("unknown op " + op);
}

main().then(
  (r) => console.log(JSON.stringify(r)),
  (e) => console.log(JSON.stringify({ error: { status: e.status ?? null, message: String(e.message),
                                               body: e.error ?? null } })));
