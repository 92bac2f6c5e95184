// SPDX-License-Identifier: Apache-2.0
// e2b_run.mjs - runs the body of an async function, read from stdin, against E2B's
// official SDKs (e2b, @e2b/code-interpreter: scripts/npm-pins set "e2b") and prints its
// result as one JSON line. The tests (e2bkit.py's js()) write the body; the SDKs find
// kosa8d through E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY, as a user's program does.
// In scope: Sandbox (e2b's), CodeSandbox (the code interpreter's), V (the test's
// values, from K8_VARS), sleep(ms). An exception becomes {"thrown": {name, message, ...}}.
import { readFileSync } from 'node:fs'
import { Sandbox } from 'e2b'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'

const AsyncFunction = (async () => {}).constructor
const body = readFileSync(0, 'utf8')
const V = JSON.parse(process.env.K8_VARS || '{}')
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
let out
try {
  out = await new AsyncFunction('Sandbox', 'CodeSandbox', 'V', 'sleep', body)(Sandbox, CodeSandbox, V, sleep)
} catch (e) {
  out = { thrown: { name: e?.constructor?.name, message: String(e?.message ?? e), exitCode: e?.exitCode } }
}
process.stdout.write('\n' + JSON.stringify(out === undefined ? null : out) + '\n')
process.exit(0)
