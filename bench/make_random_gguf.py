#!/usr/bin/env python3
"""Writes a GGUF file of a real model's shape with random weights, for measuring speed and
memory against other engines on the same bytes (bench/vs_llamacpp.sh). Nothing is downloaded
and the file must not be committed: it is hundreds of MB to GB.

    bench/make_random_gguf.py --shape qwen2.5-0.5b --type q8_0 --out /tmp/qwen-q8_0.gguf

Shapes are those of kvscope's synthetic models (engine/synthetic_model.cpp), written with the
"llama" architecture (no QKV bias) and a filler SentencePiece vocabulary of the model's size
(byte tokens included), so llama.cpp and kvscope both load it. Weights are uniform-ish on
+-sqrt(3/inputs); block types get random codes under one scale per tensor. Only the Python
standard library is used.
"""
import argparse
import random
import struct
import sys

SHAPES = {  # layers, dim, heads, kv heads, hidden, vocab, tied embeddings
    "qwen2.5-0.5b": (24, 896, 14, 2, 4864, 151936, True),
    "llama-3.2-1b": (16, 2048, 32, 8, 8192, 128256, True),
    "llama-3-8b": (32, 4096, 32, 8, 14336, 128256, False),
    "mistral-7b": (32, 4096, 32, 8, 14336, 32000, False),
}
TYPES = {"f32": (0, 1, 4), "f16": (1, 1, 2), "q4_0": (2, 32, 18), "q8_0": (8, 32, 34)}
ALIGN = 32


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value):
    out = gguf_string(key) + struct.pack("<I", vtype)
    if vtype == 4:
        return out + struct.pack("<I", value)
    if vtype == 6:
        return out + struct.pack("<f", value)
    if vtype == 8:
        return out + gguf_string(value)
    raise ValueError(vtype)


def kv_array(key, etype, values):
    out = gguf_string(key) + struct.pack("<IIQ", 9, etype, len(values))
    if etype == 8:
        return out + b"".join(gguf_string(v) for v in values)
    fmt = {5: "i", 6: "f"}[etype]
    return out + struct.pack("<%d%s" % (len(values), fmt), *values)


def half_bits(x):
    return struct.unpack("<H", struct.pack("<e", x))[0]


def random_bytes(rng, n):
    # randbytes takes fewer than 2^31 bits at a time.
    return b"".join(rng.randbytes(min(1 << 26, n - i)) for i in range(0, n, 1 << 26))


def random_tensor(rng, type_name, rows, cols):
    a = (3.0 / cols) ** 0.5
    n = rows * cols
    if type_name == "f32":  # exponents 120..123: magnitudes 2^-7 .. 2^-4
        buf = bytearray(random_bytes(rng, 4 * n))
        buf[3::4] = buf[3::4].translate(bytes((b & 0x81) | 0x3C for b in range(256)))
        return buf
    if type_name == "f16":  # exponents 8..10: magnitudes 2^-7 .. 2^-4
        buf = bytearray(random_bytes(rng, 2 * n))
        buf[1::2] = buf[1::2].translate(bytes((b & 0x83) | ((8 + (b >> 2) % 3) << 2) for b in range(256)))
        return buf
    block, size = TYPES[type_name][1:]
    nb = n // block
    buf = bytearray(random_bytes(rng, nb * size))
    d = half_bits(a / (127.0 if type_name == "q8_0" else 8.0))
    buf[0::size] = bytes([d & 0xFF]) * nb
    buf[1::size] = bytes([d >> 8]) * nb
    return buf


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", choices=sorted(SHAPES), required=True)
    p.add_argument("--type", choices=sorted(TYPES), required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    args = p.parse_args()
    layers, dim, heads, kv_heads, hidden, vocab, tied = SHAPES[args.shape]
    head_dim = dim // heads
    q_dim, kv_dim = heads * head_dim, kv_heads * head_dim
    block = TYPES[args.type][1]
    for cols in (dim, q_dim, hidden):
        if cols % block:
            sys.exit("make_random_gguf: rows of %d values are not whole %s blocks" % (cols, args.type))

    tensors = [("token_embd.weight", args.type, vocab, dim)]
    for i in range(layers):
        b = "blk.%d." % i
        tensors += [(b + "attn_norm.weight", "f32", 1, dim), (b + "attn_q.weight", args.type, q_dim, dim),
                    (b + "attn_k.weight", args.type, kv_dim, dim), (b + "attn_v.weight", args.type, kv_dim, dim),
                    (b + "attn_output.weight", args.type, dim, q_dim), (b + "ffn_norm.weight", "f32", 1, dim),
                    (b + "ffn_gate.weight", args.type, hidden, dim), (b + "ffn_up.weight", args.type, hidden, dim),
                    (b + "ffn_down.weight", args.type, dim, hidden)]
    tensors.append(("output_norm.weight", "f32", 1, dim))
    if not tied:
        tensors.append(("output.weight", args.type, vocab, dim))

    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % i for i in range(256)]
    tokens += ["\u2581t%d" % i for i in range(len(tokens), vocab)]
    types = [2, 3, 3] + [6] * 256 + [1] * (vocab - 259)
    meta = [kv("general.architecture", 8, "llama"), kv("general.name", 8, "random " + args.shape),
            kv("llama.context_length", 4, 4096), kv("llama.embedding_length", 4, dim),
            kv("llama.feed_forward_length", 4, hidden), kv("llama.block_count", 4, layers),
            kv("llama.attention.head_count", 4, heads), kv("llama.attention.head_count_kv", 4, kv_heads),
            kv("llama.rope.freq_base", 6, 500000.0), kv("llama.attention.layer_norm_rms_epsilon", 6, 1e-5),
            kv("tokenizer.ggml.model", 8, "llama"), kv_array("tokenizer.ggml.tokens", 8, tokens),
            kv_array("tokenizer.ggml.scores", 6, [0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(vocab - 259)]),
            kv_array("tokenizer.ggml.token_type", 5, types),
            kv("tokenizer.ggml.bos_token_id", 4, 1), kv("tokenizer.ggml.eos_token_id", 4, 2)]

    infos, offset = [], 0
    for name, t, rows, cols in tensors:
        nbytes = rows * cols // TYPES[t][1] * TYPES[t][2]
        dims = [cols] if rows == 1 else [cols, rows]
        infos.append(gguf_string(name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims)
                     + struct.pack("<IQ", TYPES[t][0], offset))
        offset += (nbytes + ALIGN - 1) // ALIGN * ALIGN

    rng = random.Random(args.seed)
    try:
        out = open(args.out, "wb" if args.force else "xb")
    except FileExistsError:
        sys.exit("make_random_gguf: %s exists (--force replaces it)" % args.out)
    with out:
        head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)) + b"".join(meta) + b"".join(infos)
        out.write(head + b"\0" * (-len(head) % ALIGN))
        for name, t, rows, cols in tensors:
            data = (struct.pack("<%df" % cols, *([1.0] * cols)) if rows == 1
                    else random_tensor(rng, t, rows, cols))
            out.write(data)
            out.write(b"\0" * (-len(data) % ALIGN))
    print("%s: %s, %s, %.2f GB" % (args.out, args.shape, args.type, offset / 1e9))


if __name__ == "__main__":
    main()
