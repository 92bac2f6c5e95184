# SPDX-License-Identifier: Apache-2.0
"""A tiny qwen2 model whose weights are set by hand so that greedy and sampled decoding
both follow a fixed script: a bigram chain.

One layer whose attention output and feed-forward down projections are zero, so the hidden
state entering the output norm is the current token's embedding. Each token of the chain
(the trigger, then each script piece) gets its own one-hot embedding slot; the output row of
the piece that follows it puts a logit of 80 on that slot and every other logit is 0, so the
next token is the script's with probability 1 - 1e-30 at temperature 2. Script pieces are
added to the vocabulary as whole tokens (so each appears once in the chain) unless they are
existing tokens such as <tool_call> or <|im_end|>. A script may end in a loop.

The trigger is "\\n", the last token of ChatML's generation prompt
"<|im_start|>assistant\\n", so any chat request starts the script.
"""
import numpy as np

import gguf_writer as gw

QWEN25_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}"
    "{{- messages[0]['content'] }}{%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You are "
    "a helpful assistant.' }}{%- endif %}{{- \"\\n\\n# Tools\\n\\nYou may call one or more functions "
    "to assist with the user query.\\n\\nYou are provided with function signatures within "
    "<tools></tools> XML tags:\\n<tools>\" }}{%- for tool in tools %}{{- \"\\n\" }}{{- tool | tojson }}"
    "{%- endfor %}{{- \"\\n</tools>\\n\\nFor each function call, return a json object with function "
    "name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": "
    "<function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}"
    "{%- else %}...{%- endif %}{%- for message in messages %}...<|im_start|>...<|im_end|>"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")

UNKNOWN_TEMPLATE = "{% for m in messages %}[[{{ m.role }}]] {{ m.content }}\n{% endfor %}"


LLAMA31_TEMPLATE = (
    "{{- bos_token }}{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" %}"
    "{%- endif %}{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}{{- \"Today Date: \" + date_string }}"
    "{{- system_message }}{{- \"<|eot_id|>\" }}...{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}")


def make_scripted(path, script, loop_from=None, template=QWEN25_TEMPLATE, n_embd=64, n_layer=1,
                  n_ff=64, vocab="bpe-qwen2"):
    """script: list of text pieces; after the last, the model says <|im_end|>, or, when
    loop_from is an index, goes back to that piece forever. Wider or deeper models say the
    same, only slower (to watch a generation in progress)."""
    b2u = gw.bytes_to_unicode()
    enc = lambda s: "".join(b2u[b] for b in s.encode())  # noqa: E731
    tokens, types, merges, specials = gw.bpe_vocab(vocab)
    index = {t: i for i, t in enumerate(tokens)}
    qwen = vocab == "bpe-qwen2"
    end = "<|im_end|>" if qwen else "<|eot_id|>"

    def tok_id(piece):
        if piece in index and types[index[piece]] in (3, 4):   # control / user-defined
            return index[piece]
        text = enc(piece)
        tokens.append(text)
        types.append(1)
        return len(tokens) - 1

    # the generation prompt's last token: ChatML's "\n", Llama 3's "\n\n" (one token when
    # the vocabulary merged it)
    trigger = enc("\n") if qwen or enc("\n\n") not in index else enc("\n\n")
    chain = [index[trigger]] + [tok_id(p) for p in script]
    nxt = {}
    for a, b in zip(chain, chain[1:]):
        assert a not in nxt, "a token appears twice in the chain"
        nxt[a] = b
    nxt[chain[-1]] = chain[1 + loop_from] if loop_from is not None else index[end]
    assert len(chain) < n_embd - 1

    w = gw.Writer()
    arch = "qwen2"
    w.add("general.architecture", "str", arch)
    w.add("general.name", "str", "kosa8-scripted")
    w.add("general.alignment", "u32", 32)
    n_head, hd = 2, n_embd // 2
    for k, v in [("context_length", 2048), ("embedding_length", n_embd), ("block_count", n_layer),
                 ("feed_forward_length", n_ff), ("attention.head_count", n_head),
                 ("attention.head_count_kv", n_head), ("rope.dimension_count", hd)]:
        w.add("%s.%s" % (arch, k), "u32", v)
    w.add(arch + ".attention.layer_norm_rms_epsilon", "f32", 1e-6)
    w.add(arch + ".rope.freq_base", "f32", 1000000.0)
    w.add("tokenizer.ggml.model", "str", "gpt2")
    w.add("tokenizer.ggml.pre", "str", "qwen2" if qwen else "llama-bpe")
    w.add("tokenizer.ggml.merges", "arr", merges, "str")
    w.add("tokenizer.ggml.eos_token_id", "u32", index["<|im_end|>" if qwen else "<|end_of_text|>"])
    w.add("tokenizer.ggml.bos_token_id", "u32", index["<|endoftext|>" if qwen else "<|begin_of_text|>"])
    w.add("tokenizer.ggml.add_bos_token", "bool", not qwen)
    w.add("tokenizer.ggml.tokens", "arr", tokens, "str")
    w.add("tokenizer.ggml.token_type", "arr", np.array(types, "<i4"), "i32")
    if template is not None:
        w.add("tokenizer.chat_template", "str", template)
    n_vocab = len(tokens)

    slot = {t: i for i, t in enumerate(chain)}
    embd = np.zeros((n_vocab, n_embd), np.float32)
    embd[:, n_embd - 1] = 1.0
    for t, i in slot.items():
        embd[t] = 0
        embd[t, i] = 1.0
    out = np.zeros((n_vocab, n_embd), np.float32)
    for a, b in nxt.items():
        out[b, slot[a]] = 10.0          # rmsnorm scales the one-hot to sqrt(n_embd) = 8
    rng = np.random.default_rng(7)

    def f32(name, shape, arr):
        w.tensor(name, shape, "F32", np.ascontiguousarray(arr, "<f4").tobytes())

    f32("token_embd.weight", [n_embd, n_vocab], embd)
    for layer in range(n_layer):
        p = "blk.%d." % layer
        f32(p + "attn_norm.weight", [n_embd], np.ones(n_embd))
        for n in ("attn_q", "attn_k", "attn_v"):
            f32(p + n + ".weight", [n_embd, n_embd], rng.standard_normal((n_embd, n_embd)) * 0.1)
            f32(p + n + ".bias", [n_embd], np.zeros(n_embd))
        f32(p + "attn_output.weight", [n_embd, n_embd], np.zeros((n_embd, n_embd)))
        f32(p + "ffn_norm.weight", [n_embd], np.ones(n_embd))
        f32(p + "ffn_gate.weight", [n_embd, n_ff], rng.standard_normal((n_ff, n_embd)) * 0.1)
        f32(p + "ffn_up.weight", [n_embd, n_ff], rng.standard_normal((n_ff, n_embd)) * 0.1)
        f32(p + "ffn_down.weight", [n_ff, n_embd], np.zeros((n_embd, n_ff)))
    f32("output_norm.weight", [n_embd], np.ones(n_embd))
    f32("output.weight", [n_embd, n_vocab], out)
    w.write(path)
