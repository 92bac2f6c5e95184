#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""model.py - kosa8-model against llama.cpp (node-llama-cpp 3.21.1) on Qwen2.5-0.5B-shaped
files (hidden 896, 24 layers, 14/2 heads, ffn 4864; vocab 8192 to keep the file small) at a
Q4_K_M-like mix and at Q8_0: prompt tokens/s, generation tokens/s, time to first token,
resident memory against the file size.

Like with like: both engines get the same file, the same 64 prompt tokens in one batch and
the same thread count; both are timed as a client sees them: time to first token = the
prompt evaluated and the first token sampled; generation = each further token evaluated
and sampled, one call per token (llama.cpp: one controlledEvaluate each, its JavaScript
binding included; kosa8: model_eval + sample_next). Each figure is the median of --repeat
runs, the two engines alternating so that a change in the machine's load hits both.
1 thread measures the kernels alone; 2 threads adds each engine's thread synchronisation,
where a busy machine hurts llama.cpp's spinning workers far more than kosa8's parked ones:
the load average is printed, and only figures from a quiet machine (load well under the
core count) compare the engines. RSS: kosa8's whole process; llama.cpp's less node's own
(measured before llama.cpp loads).

    python3 bench/model.py [--threads 1,2] [--repeat 3] [--gen 32] [--json]
    (needs build/bin/kosa8-model; installs node-llama-cpp once per machine: scripts/npm-pins)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(TOP, "tests", "model"))
sys.path.insert(0, os.path.join(TOP, "scripts"))
import gguf_writer  # noqa: E402
import k8cache  # noqa: E402

B = os.path.join(TOP, os.environ.get("B", "build"))
BIN = os.path.join(os.environ.get("KOSA8_BIN", os.path.join(B, "bin")), "kosa8-model")
N_PROMPT = 64


def make(kind):
    src = os.path.join(TOP, "tests", "model", "gguf_writer.py")
    return k8cache.generated("gguf-bench-qwen05-" + kind, [src], gguf_writer.make_model,
                             arch="qwen2", wtype="Q8_0", vocab="bpe-qwen2", n_embd=896, n_layer=24,
                             n_head=14, n_head_kv=2, n_ff=4864, n_vocab_pad=8192,
                             types=gguf_writer.QWEN05_Q4KM if kind == "q4_k_m" else None,
                             tied=True)


def run_kosa8(path, toks, n, threads):
    p = subprocess.run([BIN, "run", path, "--tokens", toks, "-n", str(n), "--greedy",
                        "--threads", str(threads)], capture_output=True, text=True, check=True)
    m = json.loads(p.stdout)
    t = m["timing"]
    return {"prompt_tok_s": t["prompt_tok_s"], "gen_tok_s": t["gen_tok_s"], "ttft_ms": t["ttft_ms"],
            "rss_mib": m["rss_kb"] / 1024}


def run_ref(path, toks, n, threads):
    env = dict(os.environ, K8_NODE_REF=k8cache.npm("llama"), K8_THREADS=str(threads))
    p = subprocess.run(["node", os.path.join(TOP, "tests", "model", "ref.mjs"), "bench", path,
                        toks, str(n)], capture_output=True, text=True, check=True, env=env)
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return {"prompt_tok_s": r["prompt_tok_s"], "gen_tok_s": r["gen_tok_s"], "ttft_ms": r["ttft_ms"],
            "rss_mib": (r["rss_kb"] - r.get("rss_base_kb", 0)) / 1024}


def load():
    return os.getloadavg()[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    k8cache.npm("llama")     # installed once per machine, before anything is timed
    toks = ",".join(str(300 + (i * 37) % 200) for i in range(N_PROMPT))
    cores = os.cpu_count()
    results = {"cores": cores, "load_start": load(), "rows": []}
    if not a.json:
        print("load average %.1f on %d cores%s" % (results["load_start"], cores,
              "  (busy: the 2-thread figures do not compare the engines)"
              if results["load_start"] > cores / 2 else ""))
        print("%-7s %2s %-10s %9s %8s %9s %8s %8s" % ("file", "th", "engine", "prompt/s", "gen/s",
                                                      "ttft ms", "rss MiB", "file MiB"))
    for kind in ("q4_k_m", "q8_0"):
        path = make(kind)
        size = os.path.getsize(path) / 2**20
        for th in [int(x) for x in a.threads.split(",")]:
            runs = {"kosa8": [], "llama.cpp": []}
            for i in range(a.repeat):
                order = (("kosa8", run_kosa8), ("llama.cpp", run_ref))
                for name, fn in (order if i % 2 == 0 else order[::-1]):
                    runs[name].append(fn(path, toks, a.gen, th))
            med = {}
            for name, rs in runs.items():
                med[name] = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
                med[name]["gen_spread"] = [min(r["gen_tok_s"] for r in rs), max(r["gen_tok_s"] for r in rs)]
                results["rows"].append(dict(file=kind, threads=th, engine=name, file_mib=size,
                                            **med[name]))
                if not a.json:
                    m = med[name]
                    print("%-7s %2d %-10s %9.1f %8.1f %9.0f %8.0f %8.0f" % (
                        kind, th, name, m["prompt_tok_s"], m["gen_tok_s"], m["ttft_ms"],
                        m["rss_mib"], size))
            if not a.json:
                k, r = med["kosa8"], med["llama.cpp"]
                print("%-7s %2d ratio      prompt %.2fx  generation %.2fx  ttft %.2fx "
                      "(kosa8/llama.cpp; goal: generation >= 0.5x)" % (
                          kind, th, k["prompt_tok_s"] / r["prompt_tok_s"],
                          k["gen_tok_s"] / r["gen_tok_s"], k["ttft_ms"] / r["ttft_ms"]))
    results["load_end"] = load()
    if a.json:
        print(json.dumps(results, indent=1))
    else:
        print("load average at the end %.1f" % results["load_end"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
