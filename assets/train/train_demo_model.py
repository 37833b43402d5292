#!/usr/bin/python3
"""Trains kvscope's bundled demo model from a fixed seed, on the CPU, and exports it as GGUF.

Corpus: the King James Bible from Debian's `bible-kjv-text` (public domain), dumped with the
`bible` program from `bible-kjv`. Tokenizer: SentencePiece BPE with byte fallback (Llama
layout: <unk>=0, <s>=1, </s>=2, 256 byte tokens). Model: Llama architecture (RMSNorm, RoPE on
adjacent pairs as in Meta's and llama2.c's code, SwiGLU, grouped-query attention), trained on
512-token windows that start with BOS.

    /usr/bin/python3 assets/train/train_demo_model.py            # full run (~30 min, 2 cores)
    /usr/bin/python3 assets/train/train_demo_model.py --max-steps 20 --out /tmp/x   # smoke test

Writes assets/models/kvscope-demo.gguf, assets/models/kvscope-demo.json (the card),
assets/train/training_log.csv and assets/train/loss_curve.png.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ASSETS = os.path.dirname(HERE)


# [SECTION] Corpus ------------------------------------------------------------------------------
def load_corpus(cache_dir):
    """Returns a list of (book_chapter, [verses]) in canonical order."""
    path = os.path.join(cache_dir, "kjv.txt")
    if not os.path.exists(path):
        text = subprocess.run(["bible", "-l0", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                              text=True).stdout
        with open(path, "w") as f:
            f.write(text)
    chapters, current = [], None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                continue
            if not line.startswith(" "):  # "Genesis 1": a chapter heading
                current = (line.strip(), [])
                chapters.append(current)
                continue
            verse = line.strip().split(" ", 1)
            if len(verse) == 2 and verse[0].isdigit() and current is not None:
                current[1].append(verse[1])
    return chapters


def package_version(name):
    try:
        return subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True, text=True,
                              check=True).stdout
    except Exception:
        return "unknown"


# [SECTION] Tokenizer ---------------------------------------------------------------------------
def train_tokenizer(train_text_path, prefix, vocab_size):
    import sentencepiece as spm
    spm.SentencePieceTrainer.train(
        input=train_text_path, model_prefix=prefix, model_type="bpe", vocab_size=vocab_size,
        byte_fallback=True, character_coverage=1.0, split_digits=True, add_dummy_prefix=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, num_threads=1,
        shuffle_input_sentence=False, input_sentence_size=0, max_sentence_length=16384,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


# [SECTION] Model -------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(head_dim, seq_len, theta):
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(seq_len).float(), freqs)
    return torch.cos(angles), torch.sin(angles)


def apply_rope(x, cos, sin):
    # x: (B, T, H, hd); rotate adjacent pairs (x[2i], x[2i+1]) as llama.cpp's LLAMA arch does.
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, :x.shape[1], None, :], sin[None, :x.shape[1], None, :]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, h, kv, hd = cfg["dim"], cfg["n_heads"], cfg["n_kv_heads"], cfg["dim"] // cfg["n_heads"]
        self.h, self.kv, self.hd = h, kv, hd
        self.attn_norm = RMSNorm(d, cfg["rms_eps"])
        self.wq = nn.Linear(d, h * hd, bias=False)
        self.wk = nn.Linear(d, kv * hd, bias=False)
        self.wv = nn.Linear(d, kv * hd, bias=False)
        self.wo = nn.Linear(h * hd, d, bias=False)
        self.ffn_norm = RMSNorm(d, cfg["rms_eps"])
        self.w_gate = nn.Linear(d, cfg["hidden_dim"], bias=False)
        self.w_up = nn.Linear(d, cfg["hidden_dim"], bias=False)
        self.w_down = nn.Linear(cfg["hidden_dim"], d, bias=False)

    def forward(self, x, cos, sin, return_attn=False):
        B, T, _ = x.shape
        hx = self.attn_norm(x)
        q = apply_rope(self.wq(hx).view(B, T, self.h, self.hd), cos, sin)
        k = apply_rope(self.wk(hx).view(B, T, self.kv, self.hd), cos, sin)
        v = self.wv(hx).view(B, T, self.kv, self.hd)
        rep = self.h // self.kv
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd))
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)
        probs = F.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
        out = (probs @ v).transpose(1, 2).reshape(B, T, -1)
        x = x + self.wo(out)
        hx = self.ffn_norm(x)
        x = x + self.w_down(F.silu(self.w_gate(hx)) * self.w_up(hx))
        return (x, probs) if return_attn else x


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg["vocab_size"], cfg["dim"])
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg["n_layers"])])
        self.norm = RMSNorm(cfg["dim"], cfg["rms_eps"])
        self.out = nn.Linear(cfg["dim"], cfg["vocab_size"], bias=False)
        cos, sin = rope_tables(cfg["dim"] // cfg["n_heads"], cfg["context_length"], cfg["rope_theta"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * cfg["n_layers"]) if name.endswith(("wo.weight", "w_down.weight")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, idx, return_attn=False):
        x = self.embed(idx)
        attns = []
        for b in self.blocks:
            if return_attn:
                x, a = b(x, self.cos, self.sin, True)
                attns.append(a)
            else:
                x = b(x, self.cos, self.sin)
        logits = self.out(self.norm(x))
        return (logits, attns) if return_attn else logits


# [SECTION] GGUF export -------------------------------------------------------------------------
def write_gguf(path, cfg, model, sp):
    """GGUF v3, architecture llama, F32 tensors, tokenizer metadata as llama.cpp reads it."""
    def s(x):
        b = x.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    kv = []
    def add(key, vtype, payload):
        kv.append(s(key) + struct.pack("<I", vtype) + payload)

    U32, I32, F32, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9
    add("general.architecture", STR, s("llama"))
    add("general.name", STR, s("kvscope-demo"))
    add("general.alignment", U32, struct.pack("<I", 32))
    add("llama.context_length", U32, struct.pack("<I", cfg["context_length"]))
    add("llama.embedding_length", U32, struct.pack("<I", cfg["dim"]))
    add("llama.block_count", U32, struct.pack("<I", cfg["n_layers"]))
    add("llama.feed_forward_length", U32, struct.pack("<I", cfg["hidden_dim"]))
    add("llama.rope.dimension_count", U32, struct.pack("<I", cfg["dim"] // cfg["n_heads"]))
    add("llama.attention.head_count", U32, struct.pack("<I", cfg["n_heads"]))
    add("llama.attention.head_count_kv", U32, struct.pack("<I", cfg["n_kv_heads"]))
    add("llama.attention.layer_norm_rms_epsilon", F32, struct.pack("<f", cfg["rms_eps"]))
    add("llama.rope.freq_base", F32, struct.pack("<f", cfg["rope_theta"]))
    add("llama.vocab_size", U32, struct.pack("<I", cfg["vocab_size"]))
    n = sp.get_piece_size()
    pieces = [sp.id_to_piece(i) for i in range(n)]
    types = [2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1 for i in range(n)]
    add("tokenizer.ggml.model", STR, s("llama"))
    add("tokenizer.ggml.tokens", ARR, struct.pack("<IQ", STR, n) + b"".join(s(p) for p in pieces))
    add("tokenizer.ggml.scores", ARR, struct.pack("<IQ", F32, n) + struct.pack("<%df" % n, *[sp.get_score(i) for i in range(n)]))
    add("tokenizer.ggml.token_type", ARR, struct.pack("<IQ", I32, n) + struct.pack("<%di" % n, *types))
    add("tokenizer.ggml.bos_token_id", U32, struct.pack("<I", 1))
    add("tokenizer.ggml.eos_token_id", U32, struct.pack("<I", 2))
    add("tokenizer.ggml.unknown_token_id", U32, struct.pack("<I", 0))
    add("tokenizer.ggml.add_bos_token", BOOL, struct.pack("<B", 1))
    add("tokenizer.ggml.add_eos_token", BOOL, struct.pack("<B", 0))

    tensors = [("token_embd.weight", model.embed.weight)]
    for i, b in enumerate(model.blocks):
        p = "blk.%d." % i
        tensors += [(p + "attn_norm.weight", b.attn_norm.weight), (p + "attn_q.weight", b.wq.weight),
                    (p + "attn_k.weight", b.wk.weight), (p + "attn_v.weight", b.wv.weight),
                    (p + "attn_output.weight", b.wo.weight), (p + "ffn_norm.weight", b.ffn_norm.weight),
                    (p + "ffn_gate.weight", b.w_gate.weight), (p + "ffn_up.weight", b.w_up.weight),
                    (p + "ffn_down.weight", b.w_down.weight)]
    tensors += [("output_norm.weight", model.norm.weight), ("output.weight", model.out.weight)]
    infos, blobs, offset = [], [], 0
    for name, t in tensors:
        data = t.detach().float().contiguous().numpy().astype("<f4").tobytes()
        dims = list(reversed(t.shape))  # GGUF lists the fastest-varying dimension first
        infos.append(s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
                     + struct.pack("<IQ", 0, offset))
        pad = (-len(data)) % 32
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)) + b"".join(kv) + b"".join(infos)
    header += b"\0" * ((-len(header)) % 32)
    with open(path, "wb") as f:
        f.write(header)
        for b in blobs:
            f.write(b)


# [SECTION] Training ----------------------------------------------------------------------------
def evaluate(model, data, seq, batches, rng):
    model.eval()
    losses = []
    with torch.no_grad():
        for _ in range(batches):
            x, y = get_batch(data, seq, 8, rng)
            losses.append(F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item())
    model.train()
    return float(np.mean(losses))


def get_batch(data, seq, batch, rng):
    # Windows start with BOS, then seq-1 corpus tokens, as generation starts with BOS.
    starts = rng.randint(0, len(data) - seq - 1, size=batch)
    x = np.stack([np.concatenate(([1], data[s:s + seq - 1])) for s in starts])
    y = np.stack([data[s:s + seq] for s in starts])
    return torch.from_numpy(x.astype(np.int64)), torch.from_numpy(y.astype(np.int64))


def greedy(model, sp, prompt, n):
    ids = [1] + sp.encode(prompt)
    model.eval()
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids[-model.cfg["context_length"]:]]))
            nxt = int(logits[0, -1].argmax())
            if nxt == 2:
                break
            ids.append(nxt)
    model.train()
    return sp.decode(ids[1:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--max-steps", type=int, default=1200)
    ap.add_argument("--time-budget-min", type=float, default=0, help="stop early after this many minutes (0 = off)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=ASSETS, help="assets folder to write models/ and train/ into")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    rng = np.random.RandomState(args.seed)
    out_models = os.path.join(args.out, "models")
    out_train = os.path.join(args.out, "train")
    os.makedirs(out_models, exist_ok=True)
    os.makedirs(out_train, exist_ok=True)
    work = os.path.join(out_train, ".work")
    os.makedirs(work, exist_ok=True)

    chapters = load_corpus(work)
    held = [c for i, c in enumerate(chapters) if i % 20 == 19]   # every 20th chapter is held out
    train = [c for i, c in enumerate(chapters) if i % 20 != 19]
    train_text = "\n".join(v for _, vs in train for v in vs)
    held_text = "\n".join(v for _, vs in held for v in vs)
    with open(os.path.join(work, "train.txt"), "w") as f:
        f.write(train_text)
    with open(os.path.join(work, "heldout.txt"), "w") as f:
        f.write(held_text)

    cfg = dict(dim=192, hidden_dim=512, n_layers=4, n_heads=8, n_kv_heads=2, vocab_size=2048,
               context_length=512, rms_eps=1e-5, rope_theta=10000.0)
    sp = train_tokenizer(os.path.join(work, "train.txt"), os.path.join(work, "tokenizer"), cfg["vocab_size"])
    newline = sp.piece_to_id("<0x0A>")
    encode = lambda text: np.array([t for line in text.split("\n") for t in sp.encode(line) + [newline]], dtype=np.int32)
    train_ids, held_ids = encode(train_text), encode(held_text)
    counts = np.bincount(train_ids, minlength=cfg["vocab_size"]).astype(np.float64) + 1.0
    unigram = -float(np.mean(np.log(counts[held_ids] / counts.sum())))
    print("corpus: %d train tokens, %d held-out tokens; unigram baseline %.4f nats/token"
          % (len(train_ids), len(held_ids), unigram), flush=True)

    model = Llama(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    print("model: %.2f M parameters" % (n_params / 1e6), flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    # Attention memory grows with the square of the window: most steps use 256-token windows
    # (8 per batch), the last third full 512-token ones (4 per batch), so positions up to the
    # context length are trained. Tokens per step stay 2048.
    warmup = 100
    long_from = args.max_steps * 2 // 3
    shape_at = lambda s: (4, cfg["context_length"]) if s >= long_from else (8, cfg["context_length"] // 2)
    batch, seq = shape_at(args.max_steps - 1)
    lr_at = lambda s: 1e-3 * min(1.0, (s + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, args.max_steps) / args.max_steps)))
    log = []
    t0 = time.time()
    eval_rng = np.random.RandomState(args.seed + 1)
    step = 0
    for step in range(args.max_steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        b_, t_ = shape_at(step)
        x, y = get_batch(train_ids, t_, b_, rng)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        held_loss = ""
        if step % 50 == 0 or step == args.max_steps - 1:
            held_loss = evaluate(model, held_ids, seq, 2, np.random.RandomState(args.seed + 2))
        log.append((step, loss.item(), held_loss, lr_at(step), time.time() - t0))
        if step % 10 == 0:
            print("step %d loss %.4f held %s lr %.2e %.0fs" % (step, loss.item(), held_loss, lr_at(step), time.time() - t0), flush=True)
        if args.time_budget_min and time.time() - t0 > args.time_budget_min * 60:
            print("time budget reached at step %d" % step, flush=True)
            break
    wall = time.time() - t0
    final_held = evaluate(model, held_ids, seq, 16, np.random.RandomState(args.seed + 3))
    final_train = float(np.mean([l[1] for l in log[-20:]]))

    with open(os.path.join(out_train, "training_log.csv"), "w") as f:
        f.write("step,train_loss,heldout_loss,lr,elapsed_s\n")
        for s_, l, h, lr, e in log:
            f.write("%d,%.6f,%s,%.6g,%.2f\n" % (s_, l, ("%.6f" % h) if h != "" else "", lr, e))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 4.5))
        ax.plot([l[0] for l in log], [l[1] for l in log], label="train", lw=0.8)
        hs = [(l[0], l[2]) for l in log if l[2] != ""]
        ax.plot([h[0] for h in hs], [h[1] for h in hs], "o-", label="held-out", ms=3)
        ax.axhline(unigram, color="gray", ls="--", label="unigram baseline %.2f" % unigram)
        ax.set_xlabel("step")
        ax.set_ylabel("loss (nats/token)")
        ax.set_title("kvscope-demo training (seed %d)" % args.seed)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out_train, "loss_curve.png"), dpi=100)
    except Exception as e:  # the plot is a nicety; the CSV has the numbers
        print("no plot:", e)

    gguf_path = os.path.join(out_models, "kvscope-demo.gguf")
    write_gguf(gguf_path, cfg, model, sp)
    prompts = ["In the beginning", "And the LORD said unto Moses,", "Blessed are the", "The LORD is my shepherd;",
               "And it came to pass, when"]
    samples = {p: greedy(model, sp, p, 60) for p in prompts}
    card = {
        "name": "kvscope-demo", "format": "GGUF v3, F32", "config": cfg, "parameters": n_params,
        "corpus": {"package": "bible-kjv-text", "version": package_version("bible-kjv-text"),
                   "dumped_with": "bible-kjv " + package_version("bible-kjv") + ": bible -l0 Gen1:1-Rev22:21",
                   "licence": "public domain (King James Version, 1611); packaging GPL-2+",
                   "train_tokens": int(len(train_ids)), "heldout_tokens": int(len(held_ids)),
                   "split": "every 20th chapter held out"},
        "tokenizer": {"kind": "SentencePiece BPE, byte fallback", "vocab_size": cfg["vocab_size"]},
        "training": {"seed": args.seed, "steps": step + 1, "batch": batch, "seq": seq,
                     "tokens_seen": (step + 1) * 2048, "optimizer": "AdamW lr 1e-3 warmup 100 cosine",
                     "windows": "8 x 256 tokens, then 4 x 512 for the last third of the steps",
                     "threads": args.threads, "torch": torch.__version__, "wall_seconds": round(wall, 1)},
        "loss": {"final_train": round(final_train, 4), "heldout": round(final_held, 4),
                 "unigram_baseline_heldout": round(unigram, 4)},
        "greedy_samples": samples,
    }
    with open(os.path.join(out_models, "kvscope-demo.json"), "w") as f:
        json.dump(card, f, indent=2)
    print(json.dumps(card["loss"]), flush=True)
    for p, t in samples.items():
        print(repr(p), "->", repr(t))


if __name__ == "__main__":
    main()
