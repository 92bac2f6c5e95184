# SPDX-License-Identifier: Apache-2.0
"""gguf_writer.py - write GGUF v3 files for the engine's tests: tiny llama / qwen2 models with
random weights in every tensor type the engine supports, and their tokenizers.

Quantized tensors are made as random blocks in the published ggml block layouts (scales
chosen so the weights have a sensible spread), so both engines read exactly the same bytes.

    python3 gguf_writer.py OUT.gguf --arch qwen2 --type Q4_K [--vocab bpe-qwen2|bpe-llama|spm]
"""
import argparse
import re
import struct
import sys

import numpy as np

GGUF_TYPES = {"u8": 0, "i8": 1, "u16": 2, "i16": 3, "u32": 4, "i32": 5, "f32": 6, "bool": 7,
              "str": 8, "arr": 9, "u64": 10, "i64": 11, "f64": 12}
GGML = {"F32": 0, "F16": 1, "Q4_0": 2, "Q5_0": 6, "Q8_0": 8, "Q4_K": 12, "Q5_K": 13,
        "Q6_K": 14, "BF16": 30}
BLOCK = {"F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "Q4_0": (32, 18), "Q5_0": (32, 22),
         "Q8_0": (32, 34), "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210)}


class Writer:
    def __init__(self, alignment=32):
        self.kv = []
        self.tensors = []
        self.alignment = alignment

    def add(self, key, vtype, value, arr_type=None):
        self.kv.append((key, vtype, value, arr_type))

    def tensor(self, name, shape, ttype, data):
        """shape is ggml order: shape[0] is the row length."""
        blk, size = BLOCK[ttype]
        assert shape[0] % blk == 0, (name, shape, ttype)
        n = int(np.prod(shape))
        assert len(data) == n // blk * size, (name, len(data), n // blk * size)
        self.tensors.append((name, shape, GGML[ttype], data))

    @staticmethod
    def _str(s):
        b = s.encode() if isinstance(s, str) else s
        return struct.pack("<Q", len(b)) + b

    def _val(self, vtype, v):
        t = GGUF_TYPES[vtype]
        if vtype == "str":
            return self._str(v)
        fmt = {"u8": "B", "i8": "b", "u16": "H", "i16": "h", "u32": "I", "i32": "i", "f32": "f",
               "bool": "?", "u64": "Q", "i64": "q", "f64": "d"}[vtype]
        del t
        return struct.pack("<" + fmt, v)

    def bytes(self):
        out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)))
        for key, vtype, value, arr_type in self.kv:
            out += self._str(key) + struct.pack("<I", GGUF_TYPES[vtype])
            if vtype == "arr":
                out += struct.pack("<IQ", GGUF_TYPES[arr_type], len(value))
                if arr_type in ("i32", "f32") and not isinstance(value, (list, tuple)):
                    out += value.tobytes()
                else:
                    for v in value:
                        out += self._val(arr_type, v)
            else:
                out += self._val(vtype, value)
        off = 0
        offsets = []
        for name, shape, t, data in self.tensors:
            offsets.append(off)
            off += (len(data) + self.alignment - 1) // self.alignment * self.alignment
        for (name, shape, t, data), o in zip(self.tensors, offsets):
            out += self._str(name) + struct.pack("<I", len(shape))
            out += b"".join(struct.pack("<Q", d) for d in shape)
            out += struct.pack("<IQ", t, o)
        out += b"\0" * (-len(out) % self.alignment)
        for name, shape, t, data in self.tensors:
            out += data
            out += b"\0" * (-len(out) % self.alignment)
        return bytes(out)

    def write(self, path):
        with open(path, "wb") as f:
            f.write(self.bytes())


# ---- random weights in each layout ----

def f16(x):
    return np.asarray(x, dtype=np.float16).view(np.uint16)


def rand_tensor(rng, ttype, n_rows, n_cols, std):
    """n_rows rows of n_cols elements of random weights with roughly the given std."""
    if ttype == "F32":
        return (rng.standard_normal((n_rows, n_cols)) * std).astype("<f4").tobytes()
    if ttype == "F16":
        return (rng.standard_normal((n_rows, n_cols)) * std).astype("<f2").tobytes()
    if ttype == "BF16":
        x = (rng.standard_normal((n_rows, n_cols)) * std).astype("<f4")
        return (x.view("<u4") >> 16).astype("<u2").tobytes()
    blk, size = BLOCK[ttype]
    nb = n_rows * n_cols // blk
    u8 = lambda n: rng.integers(0, 256, size=(nb, n), dtype=np.uint8)
    d = lambda s: np.full((nb, 1), 0, np.uint16) + f16(s * rng.uniform(0.5, 1.5, (nb, 1))).reshape(nb, 1)
    if ttype == "Q8_0":
        qs = rng.integers(-127, 128, size=(nb, 32), dtype=np.int8).view(np.uint8)
        parts = [d(std / 73).view(np.uint8).reshape(nb, 2), qs]
    elif ttype == "Q4_0":
        parts = [d(std / 4.6).view(np.uint8).reshape(nb, 2), u8(16)]
    elif ttype == "Q5_0":
        parts = [d(std / 9.2).view(np.uint8).reshape(nb, 2), u8(4), u8(16)]
    elif ttype in ("Q4_K", "Q5_K"):
        qmax = 15 if ttype == "Q4_K" else 31
        dd = std / (qmax * 0.29 * 32)
        parts = [d(dd).view(np.uint8).reshape(nb, 2), d(dd * qmax / 2).view(np.uint8).reshape(nb, 2),
                 u8(12)]
        if ttype == "Q5_K":
            parts.append(u8(32))
        parts.append(u8(128))
    elif ttype == "Q6_K":
        sc = rng.integers(-127, 128, size=(nb, 16), dtype=np.int8).view(np.uint8)
        parts = [u8(128), u8(64), sc, d(std / (18.5 * 73)).view(np.uint8).reshape(nb, 2)]
    else:
        raise ValueError(ttype)
    out = np.concatenate(parts, axis=1)
    assert out.shape == (nb, size)
    return out.tobytes()


# ---- tokenizers ----

TRAIN_TEXT = """The quick brown fox jumps over the lazy dog. It's 2024 and we're testing 12345 numbers.
def hello(name):\n    return f"Hello, {name}!"\n\nfor i in range(10):\n    print(i * 3.14)
Les élèves français écrivent des phrases; Grüße aus München! Привет, как дела? 你好世界，这是测试。
{"key": [1, 2, 3], "nested": {"a": true}}   tabs\tand  spaces   and newlines\n\n\r\n
I'll say they've done what you'd want: ALL CAPS and MiXeD case, emojis 🙂🚀 too.
""" * 3


def bytes_to_unicode():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def train_merges(words, n_merges):
    """Tiny BPE trainer: words is a list of symbol tuples; returns the merges in order."""
    vocab = {}
    for w in words:
        vocab[tuple(w)] = vocab.get(tuple(w), 0) + 1
    merges = []
    for _ in range(n_merges):
        pairs = {}
        for w, c in vocab.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        nv = {}
        for w, c in vocab.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            nv[tuple(out)] = nv.get(tuple(out), 0) + c
        vocab = nv
    return merges


def bpe_vocab(kind, n_merges=300):
    """(tokens, types, merges, specials) for a GPT-2 style byte-level BPE."""
    b2u = bytes_to_unicode()
    words = re.findall(r"'s|'t|'re|'ve|'m|'ll|'d| ?\w+| ?[^\s\w]+|\s+", TRAIN_TEXT)
    words = [tuple(b2u[b] for b in w.encode()) for w in words]
    merges = train_merges(words, n_merges)
    tokens = [b2u[b] for b in range(256)]
    seen = set(tokens)
    for a, b in merges:
        if a + b not in seen:
            tokens.append(a + b)
            seen.add(a + b)
    types = [1] * len(tokens)
    if kind == "bpe-qwen2":
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    else:
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                    "<|end_header_id|>", "<|eot_id|>"]
    for s in specials:
        tokens.append(s)
        types.append(3)
    tokens.append("<tool_call>")   # a user-defined token: matched even without special parsing
    types.append(4)
    return tokens, types, [a + " " + b for a, b in merges], specials


def spm_vocab(n_merges=300):
    """(tokens, types, scores) for a SentencePiece-style vocabulary with byte fallback."""
    text = TRAIN_TEXT.replace(" ", "\u2581")
    words = re.findall(r"\u2581?[^\u2581]+|\u2581", text)
    words = [tuple(w) for w in words]
    merges = train_merges(words, n_merges)
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0, 0.0, 0.0] + [0.0] * 256
    chars = sorted(set(TRAIN_TEXT.replace(" ", "\u2581")) - {"\n", "\r", "\t"})
    seen = set(tokens)
    for i, (a, b) in enumerate(merges):
        if a + b not in seen:
            tokens.append(a + b)
            types.append(1)
            scores.append(-float(i))
            seen.add(a + b)
    for c in chars:
        if c not in seen:
            tokens.append(c)
            types.append(1)
            scores.append(-1000.0 - len(tokens))
            seen.add(c)
    return tokens, types, scores


def add_tokenizer(w, kind, n_vocab_pad=0):
    if kind == "spm":
        tokens, types, scores = spm_vocab()
        w.add("tokenizer.ggml.model", "str", "llama")
        w.add("tokenizer.ggml.scores", "arr", np.array(scores, "<f4"), "f32")
        w.add("tokenizer.ggml.bos_token_id", "u32", 1)
        w.add("tokenizer.ggml.eos_token_id", "u32", 2)
        w.add("tokenizer.ggml.unknown_token_id", "u32", 0)
        w.add("tokenizer.ggml.add_bos_token", "bool", True)
    else:
        tokens, types, merges, specials = bpe_vocab(kind)
        w.add("tokenizer.ggml.model", "str", "gpt2")
        w.add("tokenizer.ggml.pre", "str", "qwen2" if kind == "bpe-qwen2" else "llama-bpe")
        w.add("tokenizer.ggml.merges", "arr", merges, "str")
        eos = tokens.index(specials[2] if kind == "bpe-qwen2" else specials[1])
        w.add("tokenizer.ggml.eos_token_id", "u32", eos)
        if kind == "bpe-qwen2":
            w.add("tokenizer.ggml.bos_token_id", "u32", tokens.index(specials[0]))
            w.add("tokenizer.ggml.add_bos_token", "bool", False)
        else:
            w.add("tokenizer.ggml.bos_token_id", "u32", tokens.index(specials[0]))
            w.add("tokenizer.ggml.add_bos_token", "bool", True)
    # Pad with unused-but-valid tokens to reach a requested vocabulary size.
    i = 0
    while len(tokens) < n_vocab_pad:
        tokens.append("<|pad_%d|>" % i)
        types.append(5)
        if kind == "spm":
            scores.append(-1e6)
        i += 1
    if kind == "spm":
        # keep scores as long as tokens after padding
        w.kv = [kv for kv in w.kv if kv[0] != "tokenizer.ggml.scores"]
        w.add("tokenizer.ggml.scores", "arr", np.array(scores, "<f4"), "f32")
    w.add("tokenizer.ggml.tokens", "arr", tokens, "str")
    w.add("tokenizer.ggml.token_type", "arr", np.array(types, "<i4"), "i32")
    return len(tokens)


def make_model(path, arch="qwen2", wtype="Q8_0", vocab="bpe-qwen2", n_embd=256, n_layer=2,
               n_head=4, n_head_kv=2, n_ff=512, n_vocab_pad=0, seed=1, types=None,
               rope_freqs=False, tied=False):
    """types: optional per-role type override, roles: embd, q, k, v, o, gate, up, down, out."""
    rng = np.random.default_rng(seed)
    w = Writer()
    w.add("general.architecture", "str", arch)
    w.add("general.name", "str", "kosa8-test-%s-%s" % (arch, wtype))
    w.add("general.alignment", "u32", 32)
    hd = n_embd // n_head
    w.add(arch + ".context_length", "u32", 4096)
    w.add(arch + ".embedding_length", "u32", n_embd)
    w.add(arch + ".block_count", "u32", n_layer)
    w.add(arch + ".feed_forward_length", "u32", n_ff)
    w.add(arch + ".attention.head_count", "u32", n_head)
    w.add(arch + ".attention.head_count_kv", "u32", n_head_kv)
    w.add(arch + ".rope.dimension_count", "u32", hd)
    w.add(arch + ".attention.layer_norm_rms_epsilon", "f32", 1e-6 if arch == "qwen2" else 1e-5)
    w.add(arch + ".rope.freq_base", "f32", 1000000.0 if arch == "qwen2" else 500000.0)
    w.add("general.file_type", "u32", 7)
    n_vocab = add_tokenizer(w, vocab, n_vocab_pad)
    t = dict(embd=wtype, q=wtype, k=wtype, v=wtype, o=wtype, gate=wtype, up=wtype, down=wtype,
             out=wtype)
    t.update(types or {})
    kvd = n_head_kv * hd

    def mat(name, role, n_in, n_out, std):
        w.tensor(name, [n_in, n_out], t[role], rand_tensor(rng, t[role], n_out, n_in, std))

    def vec(name, n, mean, std):
        w.tensor(name, [n], "F32", (mean + rng.standard_normal(n) * std).astype("<f4").tobytes())

    # Tied, the embedding is also the output matrix: at std 1 the logits would have a spread
    # of sqrt(n_embd) (30 at 896 wide) and every step would be one token for certain. The
    # input side does not care (RMS norm comes first).
    mat("token_embd.weight", "embd", n_embd, n_vocab, 3.0 / np.sqrt(n_embd) if tied else 1.0)
    for l in range(n_layer):
        p = "blk.%d." % l
        vec(p + "attn_norm.weight", n_embd, 1.0, 0.1)
        mat(p + "attn_q.weight", "q", n_embd, n_embd, 2.0 / np.sqrt(n_embd))
        mat(p + "attn_k.weight", "k", n_embd, kvd, 2.0 / np.sqrt(n_embd))
        mat(p + "attn_v.weight", "v", n_embd, kvd, 1.0 / np.sqrt(n_embd))
        if arch == "qwen2":
            vec(p + "attn_q.bias", n_embd, 0.0, 0.1)
            vec(p + "attn_k.bias", kvd, 0.0, 0.1)
            vec(p + "attn_v.bias", kvd, 0.0, 0.1)
        mat(p + "attn_output.weight", "o", n_embd, n_embd, 1.0 / np.sqrt(n_embd))
        vec(p + "ffn_norm.weight", n_embd, 1.0, 0.1)
        mat(p + "ffn_gate.weight", "gate", n_embd, n_ff, 1.0 / np.sqrt(n_embd))
        mat(p + "ffn_up.weight", "up", n_embd, n_ff, 1.0 / np.sqrt(n_embd))
        mat(p + "ffn_down.weight", "down", n_ff, n_embd, 1.0 / np.sqrt(n_ff))
    vec("output_norm.weight", n_embd, 1.0, 0.1)
    if rope_freqs:
        w.tensor("rope_freqs.weight", [hd // 2], "F32",
                 np.linspace(1.0, 8.0, hd // 2).astype("<f4").tobytes())
    if not tied:
        mat("output.weight", "out", n_embd, n_vocab, 3.0 / np.sqrt(n_embd))
    w.write(path)
    return n_vocab


QWEN05_Q4KM = dict(embd="Q8_0", q="Q5_0", k="Q5_0", v="Q8_0", o="Q5_0", gate="Q5_0", up="Q5_0",
                   down="Q4_K", out="Q8_0")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--arch", default="qwen2")
    ap.add_argument("--type", default="Q8_0")
    ap.add_argument("--vocab", default="bpe-qwen2")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--qwen05", choices=["q4_k_m", "q8_0"],
                    help="Qwen2.5-0.5B's shapes (vocab kept small), Q4_K_M-like or Q8_0")
    ap.add_argument("--vocab-size", type=int, default=0)
    a = ap.parse_args()
    if a.qwen05:
        types = QWEN05_Q4KM if a.qwen05 == "q4_k_m" else None
        make_model(a.out, "qwen2", "Q8_0", "bpe-qwen2", n_embd=896, n_layer=24, n_head=14,
                   n_head_kv=2, n_ff=4864, n_vocab_pad=a.vocab_size or 8192, seed=a.seed,
                   types=types, tied=True)
    else:
        make_model(a.out, a.arch, a.type, a.vocab, seed=a.seed,
                   rope_freqs=(a.arch == "llama" and a.vocab == "bpe-llama"))


if __name__ == "__main__":
    sys.exit(main())
