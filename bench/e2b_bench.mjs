// SPDX-License-Identifier: Apache-2.0
// e2b_bench.mjs - the SDK side of bench/e2b.py: times, in seconds, as one JSON line.
//   create-run           Sandbox.create() to the end of the first commands.run('true'),
//                        then kills it (not timed)
//   runcode ID N CODE    N runCode(CODE) round trips in sandbox ID's default context
//                        (after one untimed cell that makes it)
import { Sandbox } from 'e2b'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'

const [mode, ...args] = process.argv.slice(2)
const now = () => performance.now() / 1000
let out
if (mode === 'create-run') {
  const t0 = now()
  const s = await Sandbox.create({ timeoutMs: 600000 })
  const t1 = now()
  await s.commands.run('true')
  const t2 = now()
  await s.kill()
  out = { total: t2 - t0, create: t1 - t0, run: t2 - t1 }
} else if (mode === 'runcode') {
  const [id, n, code] = args
  const s = await CodeSandbox.connect(id)
  await s.runCode(code)
  const times = []
  for (let i = 0; i < Number(n); i++) {
    const t0 = now()
    const ex = await s.runCode(code)
    times.push(now() - t0)
    if (ex.error) throw new Error(ex.error.name)
  }
  out = { times }
} else if (mode === 'create') {
  const s = await CodeSandbox.create({ timeoutMs: 600000 })
  out = { id: s.sandboxId }
} else {
  throw new Error('mode: create-run | runcode ID N CODE | create')
}
console.log(JSON.stringify(out))
