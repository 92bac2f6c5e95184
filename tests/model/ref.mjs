// SPDX-License-Identifier: Apache-2.0
// ref.mjs - llama.cpp (through node-llama-cpp) as the reference for kosa8-model's tests and
// bench. Prints one JSON object.
//   node ref.mjs tokenize FILE           (stdin: JSON list of texts; both plain and special)
//   node ref.mjs run FILE TOKENS N       (greedy, N steps; log-probabilities per step)
//   node ref.mjs bench FILE TOKENS N     (prompt and generation speed, K8_THREADS threads;
//                                         each generated token is one controlledEvaluate)
// NODE_PATH or the module resolution from build/node-ref finds node-llama-cpp.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";

const require = createRequire(process.env.K8_NODE_REF + "/package.json");
const { getLlama, LlamaLogLevel } = await import(require.resolve("node-llama-cpp"));

const [cmd, file, toks, nArg] = process.argv.slice(2);
const rssBase = Math.round(process.memoryUsage().rss / 1024);   // node itself, before llama.cpp
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
const out = {};

if (cmd === "tokenize") {
  const texts = JSON.parse(readFileSync(0, "utf8"));
  out.plain = texts.map((t) => Array.from(model.tokenize(t, false)));
  out.special = texts.map((t) => Array.from(model.tokenize(t, true)));
} else {
  const prompt = toks.split(",").map(Number);
  const n = Number(nArg);
  const threads = Number(process.env.K8_THREADS || 2);
  const ctx = await model.createContext({ contextSize: Math.max(256, prompt.length + n + 8),
    threads, batchSize: 512, flashAttention: false });
  const seq = ctx.getSequence();
  const V = model.tokens ? undefined : undefined;
  if (cmd === "run") {
    const gen = { probabilities: true };
    const opts = { temperature: 1, topK: 0, topP: 1, minP: 0 };
    const items = prompt.map((t, i) => (i === prompt.length - 1 ? [t, { generateNext: { ...gen, options: opts } }] : t));
    out.tokens = [];
    out.logprobs = [];
    let res = await seq.controlledEvaluate(items);
    for (let step = 0; step < n; step++) {
      const probs = res[res.length - 1].next.probabilities;
      const lp = {};
      let best = -1, bestp = -1;
      for (const [t, p] of probs) {
        lp[t] = Math.log(p);
        if (p > bestp) { bestp = p; best = t; }
      }
      out.logprobs.push(lp);
      out.tokens.push(best);
      if (step + 1 === n) break;
      res = await seq.controlledEvaluate([[best, { generateNext: { ...gen, options: opts } }]]);
    }
  } else if (cmd === "bench") {
    let t0 = performance.now();
    const first = await seq.controlledEvaluate(prompt.map((t, i) => (i === prompt.length - 1 ? [t, { generateNext: { token: true, options: { temperature: 0 } } }] : t)));
    let t1 = performance.now();
    let tok = first[first.length - 1].next.token;
    out.prompt_tok_s = prompt.length / ((t1 - t0) / 1000);
    out.ttft_ms = t1 - t0;
    const t2 = performance.now();
    for (let i = 1; i < n; i++) {
      const r = await seq.controlledEvaluate([[tok, { generateNext: { token: true, options: { temperature: 0 } } }]]);
      tok = r[0].next.token;
    }
    out.gen_tok_s = (n - 1) / ((performance.now() - t2) / 1000);
    out.rss_kb = Math.round(process.memoryUsage().rss / 1024);
    out.rss_base_kb = rssBase;
  }
  await ctx.dispose();
}
await model.dispose();
await llama.dispose();
console.log(JSON.stringify(out));
