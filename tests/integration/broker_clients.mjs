// SPDX-License-Identifier: Apache-2.0
// broker_clients.mjs - the official openai and @anthropic-ai/sdk clients, unmodified, as
// code in a sandbox would use them: the key and base URL from the usual variables.
//   node broker_clients.mjs openai|openai-stream|anthropic|anthropic-stream [CALLS]
// Prints one JSON line: {"text", "chunks": [[t_ms, text], ...]} of the last of CALLS calls
// (default 1; more: the first ones warm node up, so that a slow first parse on a small
// VM does not bunch the measured stream's tokens).
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";

const mode = process.argv[2];
const out = { text: "", chunks: [] };
const got = (t) => { out.text += t; out.chunks.push([Date.now(), t]); };
const slow = "slow please";

const calls = Number(process.argv[3] ?? 1);
for (let call = 0; call < calls; call++) {
  out.text = "";
  out.chunks = [];
  if (mode.startsWith("openai")) {
    const client = new OpenAI({ maxRetries: 0 });   // OPENAI_API_KEY, OPENAI_BASE_URL
    const req = { model: "test", messages: [{ role: "user", content: slow }] };
    if (mode === "openai-stream") {
      const stream = await client.chat.completions.create({ ...req, stream: true });
      for await (const ch of stream) got(ch.choices[0]?.delta?.content ?? "");
    } else {
      const r = await client.chat.completions.create(req);
      got(r.choices[0].message.content);
    }
  } else {
    const client = new Anthropic({ maxRetries: 0 });  // ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL
    const req = { model: "test", max_tokens: 16, messages: [{ role: "user", content: slow }] };
    if (mode === "anthropic-stream") {
      const stream = await client.messages.create({ ...req, stream: true });
      for await (const ev of stream)
        if (ev.type === "content_block_delta") got(ev.delta.text);
    } else {
      const r = await client.messages.create(req);
      got(r.content[0].text);
    }
  }
}
console.log(JSON.stringify(out));
