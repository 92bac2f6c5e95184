#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""model_drift.py - how far kosa8-model and llama.cpp (node-llama-cpp 3.21.1) are from each
other and from exact arithmetic as layers are added, on Qwen2.5-0.5B-shaped random files
(docs/model.md, "Depth"). Per depth, the mean |delta log p| over 16 teacher-forced steps
(the tokens llama.cpp gives log p > -10) between:
  kosa8 and llama.cpp; each and a float64 numpy pass of the same weights (tests/model/
  npref.py); float64 with 8-bit activations and an f16 KV cache and float64; kosa8's AVX2
  and scalar kernels (the same algorithm, another float summation order); llama.cpp at 1
  and 2 threads.

    python3 bench/model_drift.py [--layers 2,6,12,24] [--type q8_0|q4_k_m] [--steps 16]
    (needs build/bin/kosa8-model; installs node-llama-cpp once per machine: scripts/npm-pins)
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(TOP, "tests", "model"))
sys.path.insert(0, os.path.join(TOP, "scripts"))
import gguf_writer  # noqa: E402
import k8cache  # noqa: E402
import npref  # noqa: E402

B = os.path.join(TOP, os.environ.get("B", "build"))
BIN = os.path.join(os.environ.get("KOSA8_BIN", os.path.join(B, "bin")), "kosa8-model")
PROMPT = [281, 1007, 300, 415, 389]


def make(layers, kind):
    src = os.path.join(TOP, "tests", "model", "gguf_writer.py")
    return k8cache.generated("gguf-drift-qwen05-%s-%d" % (kind, layers), [src],
                             gguf_writer.make_model, arch="qwen2", wtype="Q8_0", vocab="bpe-qwen2",
                             n_embd=896, n_layer=layers, n_head=14, n_head_kv=2, n_ff=4864,
                             n_vocab_pad=8192, tied=True,
                             types=gguf_writer.QWEN05_Q4KM if kind == "q4_k_m" else None)


def logprobs(l):
    l = np.asarray(l, np.float64)
    m = l.max()
    return l - m - np.log(np.exp(l - m).sum())


def kosa8(path, n, force, scalar=False):
    env = dict(os.environ, KOSA8_MODEL_SCALAR="1" if scalar else "0")
    p = subprocess.run([BIN, "run", path, "--tokens", ",".join(map(str, PROMPT)), "-n", str(n),
                        "--greedy", "--dump-logits", "--force", ",".join(map(str, force)),
                        "--threads", "1"], capture_output=True, text=True, check=True, env=env)
    return [logprobs(x) for x in json.loads(p.stdout)["logits"]]


def llama(path, n, threads):
    env = dict(os.environ, K8_NODE_REF=k8cache.npm("llama"), K8_THREADS=str(threads))
    p = subprocess.run(["node", os.path.join(TOP, "tests", "model", "ref.mjs"), "run", path,
                        ",".join(map(str, PROMPT)), str(n)], capture_output=True, text=True,
                       check=True, env=env)
    return json.loads(p.stdout.strip().splitlines()[-1])


def dense(r, vocab):
    out = []
    for step in r["logprobs"]:
        a = np.full(vocab, -np.inf)
        for k, v in step.items():
            if v is not None:
                a[int(k)] = v
        out.append(a)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default="2,6,12,24")
    ap.add_argument("--type", default="q8_0", choices=["q8_0", "q4_k_m"])
    ap.add_argument("--steps", type=int, default=16)
    a = ap.parse_args()
    n = a.steps
    print("%-6s %8s %8s %8s %8s %8s %8s %8s" % ("layers", "k8/llama", "llama/ex", "k8/ex",
          "q8ex/ex", "avx/scal", "llama1/2", "step0"))
    for layers in [int(x) for x in a.layers.split(",")]:
        path = make(layers, a.type)
        r1, r2 = llama(path, n, 1), llama(path, n, 2)
        force = r1["tokens"]
        k = kosa8(path, n, force)
        ks = kosa8(path, n, force, scalar=True)
        ref1, ref2 = dense(r1, len(k[0])), dense(r2, len(k[0]))
        seq = PROMPT + force[:n - 1]
        ex = [logprobs(x) for x in npref.forward(path, seq, len(PROMPT))]
        exq = [logprobs(x) for x in npref.forward(path, seq, len(PROMPT), act_q8=True, kv_f16=True)]
        mask = [x > -10 for x in ref1]

        def dist(x, y, steps=n):
            return np.mean([np.abs(u[m] - v[m]).mean() for u, v, m in zip(x[:steps], y[:steps], mask)])
        print("%-6d %8.4f %8.4f %8.4f %8.4f %8.4f %8.4f %8.4f" % (
            layers, dist(k, ref1), dist(ref1, ex), dist(k, ex), dist(exq, ex), dist(k, ks),
            dist(ref1, ref2), dist(k, ref1, 1)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
