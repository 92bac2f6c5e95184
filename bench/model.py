#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""model.py - kosa8-model against llama.cpp (node-llama-cpp 3.21.1) on Qwen2.5-0.5B-shaped
files (hidden 896, 24 layers, 14/2 heads, ffn 4864; vocab 8192 to keep the file small) at a
Q4_K_M-like mix and at Q8_0, 2 threads each, side by side: prompt tokens/s, generation
tokens/s, time to first token, resident memory against the file size.

    python3 bench/model.py            (needs build/bin/kosa8-model and build/node-ref)
"""
import json
import os
import subprocess
import sys

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(TOP, "tests", "model"))
import gguf_writer  # noqa: E402

B = os.path.join(TOP, os.environ.get("B", "build"))
BIN = os.path.join(os.environ.get("KOSA8_BIN", os.path.join(B, "bin")), "kosa8-model")
NODE_REF = os.path.join(TOP, "build", "node-ref")
N_PROMPT, N_GEN = 64, 32


def make(kind):
    d = os.path.join(B, "model-bench")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "qwen05-%s.gguf" % kind)
    if not os.path.exists(path):
        gguf_writer.make_model(path + ".tmp", "qwen2", "Q8_0", "bpe-qwen2", n_embd=896, n_layer=24,
                               n_head=14, n_head_kv=2, n_ff=4864, n_vocab_pad=8192,
                               types=gguf_writer.QWEN05_Q4KM if kind == "q4_k_m" else None,
                               tied=True)
        os.rename(path + ".tmp", path)
    return path


def main():
    if not os.path.isdir(os.path.join(NODE_REF, "node_modules", "node-llama-cpp")):
        print("model: build/node-ref has no node-llama-cpp; run tests/model first "
              "(it installs node-llama-cpp 3.21.1 there)")
        return 1
    toks = ",".join(str(300 + (i * 37) % 200) for i in range(N_PROMPT))
    print("%-8s %-10s %10s %10s %9s %9s %9s" % ("file", "engine", "prompt/s", "gen/s", "ttft ms",
                                                "rss MiB", "file MiB"))
    for kind in ("q4_k_m", "q8_0"):
        path = make(kind)
        size = os.path.getsize(path) / 2**20
        p = subprocess.run([BIN, "run", path, "--tokens", toks, "-n", str(N_GEN), "--greedy",
                            "--threads", "2"], capture_output=True, text=True, check=True)
        m = json.loads(p.stdout)
        t = m["timing"]
        mine = (t["prompt_tok_s"], t["gen_tok_s"], t["prompt_ms"], m["rss_kb"] / 1024)
        env = dict(os.environ, K8_NODE_REF=NODE_REF, K8_THREADS="2")
        p = subprocess.run(["node", os.path.join(TOP, "tests", "model", "ref.mjs"), "bench", path,
                            toks, str(N_GEN)], capture_output=True, text=True, check=True, env=env)
        r = json.loads(p.stdout.strip().splitlines()[-1])
        ref = (r["prompt_tok_s"], r["gen_tok_s"], r["ttft_ms"], r["rss_kb"] / 1024)
        for name, v in (("kosa8", mine), ("llama.cpp", ref)):
            print("%-8s %-10s %10.1f %10.1f %9.1f %9.0f %9.0f" % (kind, name, *v, size))
        print("%-8s ratio      prompt %.2fx  generation %.2fx (goal >= 0.5x)"
              % (kind, mine[0] / ref[0], mine[1] / ref[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
