# SPDX-License-Identifier: Apache-2.0
"""npref.py - a float64 numpy forward pass of the qwen2/llama files gguf_writer.py makes: the
"exact arithmetic" a quantized engine approximates, to tell an engine's rounding from a real
difference between two engines (docs/model.md, "Depth").

Weights are dequantized from the file's own blocks (F32, F16, Q8_0, Q4_0, Q5_0, Q4_K), so the
model is the same one both engines run; only the arithmetic differs. Options emulate one
engine-side rounding at a time:
  act_q8: quantize each activation row to 8 bits before each quantized matmul, as llama.cpp
          and kosa8 do (per 32 with the scale rounded to half, for Q8_0/Q4_0/Q5_0; per 256
          for K-quants);
  kv_f16: round K and V to half floats (the KV cache).

    python3 npref.py FILE TOKENS N_FIRST   -> JSON: logits from position N_FIRST-1 on
"""
import json
import struct
import sys

import numpy as np


def _read(path):
    buf = np.memmap(path, dtype=np.uint8, mode="r")
    mv = memoryview(buf)
    pos = [0]

    def take(fmt):
        v = struct.unpack_from("<" + fmt, mv, pos[0])
        pos[0] += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        n = take("Q")
        s = bytes(mv[pos[0]:pos[0] + n]).decode("utf-8", "replace")
        pos[0] += n
        return s

    scal = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            at, n = take("I"), take("Q")
            return [value(at) for _ in range(n)] if at in (8, 9) else \
                [take(scal[at]) for _ in range(n)]
        return take(scal[t])

    assert bytes(mv[:4]) == b"GGUF"
    pos[0] = 4
    take("I")
    nt, nkv = take("Q"), take("Q")
    kv = {}
    for _ in range(nkv):
        k = string()
        t = take("I")
        if k in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
                 "tokenizer.ggml.scores"):
            at, n = take("I"), take("Q")
            if at == 8:
                for _ in range(n):
                    ln = take("Q")
                    pos[0] += ln
            else:
                pos[0] += n * struct.calcsize(scal[at])
            kv[k] = n
        else:
            kv[k] = value(t)
    infos = []
    for _ in range(nt):
        name = string()
        nd = take("I")
        dims = [take("Q") for _ in range(nd)]
        infos.append((name, dims, take("I"), take("Q")))
    al = kv.get("general.alignment", 32)
    base = (pos[0] + al - 1) // al * al
    return kv, {n: (d, t, base + o) for n, d, t, o in infos}, buf


def _f16(b):
    return b.copy().view(np.float16).astype(np.float64)


def dequant(buf, dims, ttype, off):
    n = int(np.prod(dims))
    if ttype == 0:
        return np.frombuffer(buf, np.float32, n, off).astype(np.float64).reshape(-1, dims[0])
    if ttype == 1:
        return np.frombuffer(buf, np.float16, n, off).astype(np.float64).reshape(-1, dims[0])
    blk, size = {8: (32, 34), 2: (32, 18), 6: (32, 22), 12: (256, 144)}[ttype]
    b = np.asarray(buf[off:off + n // blk * size]).reshape(-1, size)
    d = _f16(b[:, 0:2]).reshape(-1, 1)
    if ttype == 8:
        y = d * b[:, 2:].view(np.int8)
    elif ttype == 2:
        q = b[:, 2:]
        y = d * (np.concatenate([q & 15, q >> 4], axis=1).astype(np.int64) - 8)
    elif ttype == 6:
        qh = b[:, 2:6].copy().view("<u4").astype(np.int64)
        q = b[:, 6:]
        lo = np.concatenate([q & 15, q >> 4], axis=1).astype(np.int64)
        hi = (qh >> np.arange(32)) & 1
        y = d * ((lo | (hi << 4)) - 16)
    else:  # Q4_K
        dmin = _f16(b[:, 2:4]).reshape(-1, 1)
        s = b[:, 4:16].astype(np.int64)
        qs = b[:, 16:]
        sc, mn = np.zeros((len(b), 8), np.int64), np.zeros((len(b), 8), np.int64)
        sc[:, :4], mn[:, :4] = s[:, 0:4] & 63, s[:, 4:8] & 63
        sc[:, 4:] = (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)
        mn[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
        parts = []
        for j in range(4):
            q = qs[:, 32 * j:32 * j + 32].astype(np.int64)
            parts.append(d * sc[:, 2 * j:2 * j + 1] * (q & 15) - dmin * mn[:, 2 * j:2 * j + 1])
            parts.append(d * sc[:, 2 * j + 1:2 * j + 2] * (q >> 4) - dmin * mn[:, 2 * j + 1:2 * j + 2])
        y = np.concatenate(parts, axis=1)
    return y.reshape(-1, dims[0])


def _q8_0(x):
    """llama.cpp's quantize_row_q8_0: per 32, d = amax/127 stored as half, q = round(x/d)."""
    r = x.reshape(x.shape[0], -1, 32)
    d = np.abs(r).max(axis=2, keepdims=True) / 127
    idv = np.divide(1.0, d, out=np.zeros_like(d), where=d > 0)
    q = np.round(r * idv)
    return (q * d.astype(np.float16).astype(np.float64)).reshape(x.shape)


def _q8_k(x):
    r = x.reshape(x.shape[0], -1, 256)
    i = np.abs(r).argmax(axis=2)[..., None]
    mx = np.take_along_axis(r, i, axis=2)
    isc = np.divide(-127.0, mx, out=np.zeros_like(mx), where=mx != 0)
    q = np.minimum(np.round(r * isc), 127)
    return (q * np.divide(1.0, isc, out=np.zeros_like(isc), where=isc != 0)).reshape(x.shape)


def forward(path, tokens, n_first, act_q8=False, kv_f16=False):
    """Logits (float64) after each of tokens[n_first-1:], one row per position."""
    kv, ti, buf = _read(path)
    arch = kv["general.architecture"]
    g = lambda k, dflt=None: kv.get(arch + "." + k, dflt)
    E, L, H, HKV = g("embedding_length"), g("block_count"), g("attention.head_count"), \
        g("attention.head_count_kv", g("attention.head_count"))
    hd, eps, base = E // H, g("attention.layer_norm_rms_epsilon", 1e-5), g("rope.freq_base", 1e4)
    neox = arch == "qwen2"
    T = len(tokens)

    def W(name):
        d, t, o = ti[name]
        return dequant(buf, d, t, o), t

    def mm(x, name):
        w, t = W(name)
        if act_q8 and t not in (0, 1, 30):
            x = _q8_k(x) if t in (12, 13, 14) else _q8_0(x)
        return x @ w.T

    def vec(name):
        return W(name)[0].reshape(-1) if name in ti else None

    def rms(x, w):
        return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * w

    half = hd // 2
    inv = base ** (-2.0 * np.arange(half) / hd)
    if "rope_freqs.weight" in ti:
        inv = inv / vec("rope_freqs.weight")
    ang = np.arange(T)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(v):
        v = v.reshape(T, -1, hd).copy()
        a, b = (v[..., :half], v[..., half:]) if neox else (v[..., 0::2], v[..., 1::2])
        a2, b2 = a * cos - b * sin, a * sin + b * cos
        if neox:
            v[..., :half], v[..., half:] = a2, b2
        else:
            v[..., 0::2], v[..., 1::2] = a2, b2
        return v

    emb, _ = W("token_embd.weight")
    x = emb[np.asarray(tokens)]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(L):
        p = "blk.%d." % l
        xn = rms(x, vec(p + "attn_norm.weight"))
        q, k, v = mm(xn, p + "attn_q.weight"), mm(xn, p + "attn_k.weight"), mm(xn, p + "attn_v.weight")
        for t, bname in ((q, "attn_q.bias"), (k, "attn_k.bias"), (v, "attn_v.bias")):
            b = vec(p + bname)
            if b is not None:
                t += b
        q, k, v = rope(q), rope(k), v.reshape(T, HKV, hd)
        if kv_f16:
            k, v = k.astype(np.float16).astype(np.float64), v.astype(np.float16).astype(np.float64)
        out = np.empty((T, H, hd))
        for h in range(H):
            kh = h // (H // HKV)
            s = q[:, h, :] @ k[:, kh, :].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            out[:, h, :] = (s / s.sum(axis=1, keepdims=True)) @ v[:, kh, :]
        x = x + mm(out.reshape(T, H * hd), p + "attn_output.weight")
        xn = rms(x, vec(p + "ffn_norm.weight"))
        gt = mm(xn, p + "ffn_gate.weight")
        x = x + mm(gt / (1 + np.exp(-gt)) * mm(xn, p + "ffn_up.weight"), p + "ffn_down.weight")
    xn = rms(x[n_first - 1:], vec("output_norm.weight"))
    return mm(xn, "output.weight" if "output.weight" in ti else "token_embd.weight")


if __name__ == "__main__":
    toks = [int(t) for t in sys.argv[2].split(",")]
    print(json.dumps(forward(sys.argv[1], toks, int(sys.argv[3])).tolist()))
