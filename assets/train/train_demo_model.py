#!/usr/bin/python3
"""Trains kvscope's bundled demo model from a fixed seed, on the CPU, and exports it as GGUF.

Run with Debian's Python (python3-torch 1.13, python3-sentencepiece, python3-numpy,
python3-matplotlib) and the Debian packages bible-kjv (the `bible` program) and
bible-kjv-text (the text):

    nice -n 5 /usr/bin/python3 assets/train/train_demo_model.py          # full run, ~25-35 min on 2 cores
    /usr/bin/python3 assets/train/train_demo_model.py --max-steps 20 --out /tmp/x   # smoke test
    /usr/bin/python3 assets/train/train_demo_model.py --sample            # greedy continuations from the GGUF
    /usr/bin/python3 assets/train/train_demo_model.py --attention         # attention-structure table from the GGUF

Steps, all from --seed (default 1234):
  1. Corpus: `bible -l0 Gen1:1-Rev22:21` dumps all 31,102 verses (one per line, under
     "Book N" chapter headings). Verse numbers and headings are dropped; verses are joined with
     "\n". Every 20th chapter (index % 20 == 19) is held out, the rest is training text.
  2. Tokenizer: SentencePiece BPE, 2048 pieces, byte fallback, identity normalisation, dummy
     prefix, Llama id layout (<unk>=0, <s>=1, </s>=2, <0x00>..<0xFF>=3..258, then pieces). It is
     trained on the training chapters, one chapter (verses joined with "\n") per sentence, so
     pieces may contain "\n" the way the text stream does. The token streams are the encoding of
     each whole text, exactly what llama.cpp's tokenizer produces for the same file.
  3. Model: Llama (RMSNorm, RoPE on adjacent pairs (x[2i], x[2i+1]) as in Meta's and llama2.c's
     code and llama.cpp's LLAMA arch, SwiGLU, grouped-query attention, no biases, tied
     embeddings). Trained on 512-token windows, each BOS + 511 tokens taken at a random offset
     of the training stream, with AdamW, linear warmup and cosine decay. Matrix products run in
     bfloat16 under torch.autocast (AMX/AVX-512 make that ~4x faster than float32 here);
     weights, optimizer state, norms and softmax statistics stay float32. Evaluation, sampling
     and the exported weights are float32.
  4. Exports assets/models/kvscope-demo.gguf (GGUF v3, all tensors F32, no output.weight: tied)
     and the card assets/models/kvscope-demo.json; writes assets/train/training_log.csv,
     assets/train/loss_curve.png and assets/train/tokenizer.model.
"""
import argparse
import io
import json
import math
import os
import subprocess
import sys
import time

# OpenMP threads that sleep instead of spinning at barriers: on a shared 2-core machine a
# spinning thread waits for a descheduled sibling, which halved the speed here. Set before
# torch loads libgomp; it does not change the numbers.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ASSETS = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import gguf_io  # noqa: E402

CONFIG = dict(dim=256, hidden_dim=688, n_layers=6, n_heads=8, n_kv_heads=2, vocab_size=2048,
              context_length=512, rms_eps=1e-5, rope_theta=10000.0)
PROMPTS = ["In the beginning", "And the LORD said unto Moses,", "Blessed are the", "The LORD is my shepherd;",
           "And it came to pass, when"]
BOS, EOS = 1, 2


# [SECTION] Corpus ------------------------------------------------------------------------------
def dump_bible(work):
    """Runs the `bible` program (package bible-kjv) over the whole text of bible-kjv-text."""
    text = subprocess.run(["bible", "-l0", "Gen1:1-Rev22:21"], check=True, capture_output=True, text=True).stdout
    path = os.path.join(work, "kjv.txt")
    with open(path, "w") as f:
        f.write(text)
    return text


def parse_chapters(text):
    """[(heading, [verse text, ...]), ...] in canonical order. Lines are "Genesis 1" headings,
    blank lines, or "  N verse text"."""
    chapters = []
    for line in text.split("\n"):
        if not line.strip():
            continue
        if not line.startswith(" "):
            chapters.append((line.strip(), []))
            continue
        num, verse = line.strip().split(" ", 1)
        assert num.isdigit() and chapters, line
        chapters[-1][1].append(verse)
    return chapters


def package_version(name):
    try:
        return subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True, text=True,
                              check=True).stdout
    except Exception:
        return "unknown"


# [SECTION] Tokenizer ---------------------------------------------------------------------------
def train_tokenizer(chapter_texts, vocab_size):
    import sentencepiece as spm
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(chapter_texts), model_writer=model, model_type="bpe", vocab_size=vocab_size,
        byte_fallback=True, character_coverage=1.0, split_digits=True, add_dummy_prefix=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, num_threads=1,
        shuffle_input_sentence=False, input_sentence_size=0, max_sentence_length=1 << 17,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
    return model.getvalue()


def load_sp(proto):
    import sentencepiece as spm
    return spm.SentencePieceProcessor(model_proto=proto)


# [SECTION] Model -------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x = x.float()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(head_dim, seq_len, theta):
    """e^(i * pos * theta^(-2j/head_dim)) for j < head_dim/2, as complex64 (seq_len, head_dim/2)."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), freqs)
    return torch.polar(torch.ones_like(angles), angles).to(torch.complex64)


def apply_rope(x, rot):
    # x: (B, T, H, hd). Rotates adjacent pairs (x[2j], x[2j+1]), read as the complex number
    # x[2j] + i x[2j+1], by pos * theta^(-2j/hd): Meta's/llama2.c's form, llama.cpp's LLAMA rope.
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * rot[None, :x.shape[1], None, :]).flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, h, kv = cfg["dim"], cfg["n_heads"], cfg["n_kv_heads"]
        self.h, self.kv, self.hd = h, kv, d // h
        self.attn_norm = RMSNorm(d, cfg["rms_eps"])
        self.wq = nn.Linear(d, h * self.hd, bias=False)
        self.wk = nn.Linear(d, kv * self.hd, bias=False)
        self.wv = nn.Linear(d, kv * self.hd, bias=False)
        self.wo = nn.Linear(h * self.hd, d, bias=False)
        self.ffn_norm = RMSNorm(d, cfg["rms_eps"])
        self.w_gate = nn.Linear(d, cfg["hidden_dim"], bias=False)
        self.w_up = nn.Linear(d, cfg["hidden_dim"], bias=False)
        self.w_down = nn.Linear(cfg["hidden_dim"], d, bias=False)

    def forward(self, x, rot, mask, return_attn=False):
        B, T, _ = x.shape
        kv, rep, hd = self.kv, self.h // self.kv, self.hd
        hx = self.attn_norm(x)
        q = apply_rope(self.wq(hx).view(B, T, self.h, hd), rot)
        k = apply_rope(self.wk(hx).view(B, T, kv, hd), rot)
        v = self.wv(hx).view(B, T, kv, hd)
        # Query head h reads KV head h // rep (llama.cpp's grouping). Stack a group's queries so
        # one batched product serves all of them: (B*kv, rep*T, hd) x (B*kv, hd, T).
        q = q.view(B, T, kv, rep, hd).permute(0, 2, 3, 1, 4).reshape(B * kv, rep * T, hd)
        k = k.permute(0, 2, 3, 1).reshape(B * kv, hd, T)
        v = v.transpose(1, 2).reshape(B * kv, T, hd)
        scores = torch.baddbmm(mask[:T, :T].repeat(rep, 1).to(q.dtype), q, k, alpha=1.0 / math.sqrt(hd))
        # Under autocast the scores are bfloat16; softmax accumulates in float32 internally.
        probs = F.softmax(scores, dim=-1)
        out = torch.bmm(probs, v).view(B, kv, rep, T, hd).permute(0, 3, 1, 2, 4).reshape(B, T, -1)
        x = x + self.wo(out)
        hx = self.ffn_norm(x)
        x = x + self.w_down(F.silu(self.w_gate(hx)) * self.w_up(hx))
        if return_attn:
            return x, probs.float().view(B, kv * rep, T, T)  # (B, head, query, key)
        return x


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg["vocab_size"], cfg["dim"])
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg["n_layers"])])
        self.norm = RMSNorm(cfg["dim"], cfg["rms_eps"])
        self.output = None  # tied embeddings; sink_study.py attaches an untied nn.Linear here
        rot = rope_tables(cfg["dim"] // cfg["n_heads"], cfg["context_length"], cfg["rope_theta"])
        self.register_buffer("rot", rot, persistent=False)
        T = cfg["context_length"]
        self.register_buffer("mask", torch.full((T, T), float("-inf")).triu(1), persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                resid = name.endswith(("wo.weight", "w_down.weight"))
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg["n_layers"]) if resid else 0.02)

    def forward(self, idx, return_attn=False):
        x = self.embed(idx)
        attns = []
        for b in self.blocks:
            if return_attn:
                x, a = b(x, self.rot, self.mask, True)
                attns.append(a)
            else:
                x = b(x, self.rot, self.mask)
        logits = F.linear(self.norm(x), self.embed.weight if self.output is None else self.output.weight)
        return (logits, attns) if return_attn else logits


def tensor_map(model):
    """GGUF tensor name -> parameter, in file order (no output.weight: tied embeddings)."""
    m = [("token_embd.weight", model.embed.weight)]
    for i, b in enumerate(model.blocks):
        p = "blk.%d." % i
        m += [(p + "attn_norm.weight", b.attn_norm.weight), (p + "attn_q.weight", b.wq.weight),
              (p + "attn_k.weight", b.wk.weight), (p + "attn_v.weight", b.wv.weight),
              (p + "attn_output.weight", b.wo.weight), (p + "ffn_norm.weight", b.ffn_norm.weight),
              (p + "ffn_gate.weight", b.w_gate.weight), (p + "ffn_up.weight", b.w_up.weight),
              (p + "ffn_down.weight", b.w_down.weight)]
    m.append(("output_norm.weight", model.norm.weight))
    return m


# [SECTION] GGUF --------------------------------------------------------------------------------
def export_gguf(path, cfg, model, sp):
    n = sp.get_piece_size()
    assert n == cfg["vocab_size"]
    types = [2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1 for i in range(n)]
    G = gguf_io
    kvs = [
        ("general.architecture", G.STR, "llama"),
        ("general.name", G.STR, "kvscope-demo"),
        ("general.alignment", G.U32, 32),
        ("llama.context_length", G.U32, cfg["context_length"]),
        ("llama.embedding_length", G.U32, cfg["dim"]),
        ("llama.block_count", G.U32, cfg["n_layers"]),
        ("llama.feed_forward_length", G.U32, cfg["hidden_dim"]),
        ("llama.rope.dimension_count", G.U32, cfg["dim"] // cfg["n_heads"]),
        ("llama.attention.head_count", G.U32, cfg["n_heads"]),
        ("llama.attention.head_count_kv", G.U32, cfg["n_kv_heads"]),
        ("llama.attention.layer_norm_rms_epsilon", G.F32, cfg["rms_eps"]),
        ("llama.rope.freq_base", G.F32, cfg["rope_theta"]),
        ("llama.vocab_size", G.U32, cfg["vocab_size"]),
        ("tokenizer.ggml.model", G.STR, "llama"),
        ("tokenizer.ggml.tokens", G.ARR, (G.STR, [sp.id_to_piece(i) for i in range(n)])),
        ("tokenizer.ggml.scores", G.ARR, (G.F32, [sp.get_score(i) for i in range(n)])),
        ("tokenizer.ggml.token_type", G.ARR, (G.I32, types)),
        ("tokenizer.ggml.bos_token_id", G.U32, BOS),
        ("tokenizer.ggml.eos_token_id", G.U32, EOS),
        ("tokenizer.ggml.unknown_token_id", G.U32, 0),
        ("tokenizer.ggml.add_bos_token", G.BOOL, 1),
        ("tokenizer.ggml.add_eos_token", G.BOOL, 0),
    ]
    tensors = [(name, p.detach().float().numpy(), G.GGML_F32) for name, p in tensor_map(model)]
    gguf_io.write_gguf(path, kvs, tensors)


def load_gguf_model(path):
    """The torch model and a SentencePiece-free token list from a GGUF written by export_gguf."""
    meta, tensors = gguf_io.read_gguf(path)
    cfg = dict(dim=meta["llama.embedding_length"], hidden_dim=meta["llama.feed_forward_length"],
               n_layers=meta["llama.block_count"], n_heads=meta["llama.attention.head_count"],
               n_kv_heads=meta["llama.attention.head_count_kv"], vocab_size=len(meta["tokenizer.ggml.tokens"]),
               context_length=meta["llama.context_length"],
               rms_eps=float(np.float32(meta["llama.attention.layer_norm_rms_epsilon"])),
               rope_theta=meta["llama.rope.freq_base"])
    model = Llama(cfg)
    with torch.no_grad():
        for name, p in tensor_map(model):
            p.copy_(torch.from_numpy(tensors[name]))
    model.eval()
    return model, meta


# [SECTION] Training ----------------------------------------------------------------------------
def windows(data, starts, seq):
    # BOS, then seq-1 corpus tokens; targets are the next tokens.
    x = np.stack([np.concatenate(([BOS], data[s:s + seq - 1])) for s in starts])
    y = np.stack([data[s:s + seq] for s in starts])
    return torch.from_numpy(x.astype(np.int64)), torch.from_numpy(y.astype(np.int64))


def passage_windows(rng, sp, chapters, batch, seq, p, bos_between=True):
    """Windows packed with whole passages: a random training chapter, a random first verse, a
    geometric number of verses (mean 1/p), each passage after its own BOS (or, with bos_between
    False, one BOS at the start of the window only), until the window is full. Targets that are
    BOS are not scored (-100), so the model never learns to emit it.
    Neighbouring passages are unrelated: attending across a boundary is useless, the situation in
    which models learn to park idle heads on BOS (see assets/README.md, "Looking for sinks")."""
    rows = []
    for _ in range(batch):
        w = [] if bos_between else [BOS]
        while len(w) < seq + 1:
            verses = chapters[rng.randint(len(chapters))]
            k, first = rng.geometric(p), rng.randint(len(verses))
            w += ([BOS] if bos_between else []) + sp.encode("\n".join(verses[first:first + k]) + "\n")
        rows.append(w[:seq + 1])
    xs = torch.tensor(rows, dtype=torch.int64)
    x, y = xs[:, :-1], xs[:, 1:].clone()
    y[y == BOS] = -100  # F.cross_entropy's ignore_index
    return x, y


def mean_loss(model, data, starts, seq, batch=8, bf16=False):
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for i in range(0, len(starts), batch):
            x, y = windows(data, starts[i:i + batch], seq)
            total += F.cross_entropy(model(x).float().flatten(0, 1), y.flatten(), reduction="sum").item()
            count += y.numel()
    model.train()
    return total / count


def llamacpp_style_nll(model, ids, n_ctx):
    """What llama-perplexity computes on the same file: the token stream (with BOS first) in
    chunks of n_ctx, each chunk's first token replaced by BOS, and only the second half of each
    chunk scored. Returns mean NLL in nats (ln of the perplexity) and the chunk count."""
    toks = np.concatenate(([BOS], ids))
    n_chunks = len(toks) // n_ctx
    total, count = 0.0, 0
    with torch.no_grad():
        for c in range(n_chunks):
            chunk = toks[c * n_ctx:(c + 1) * n_ctx].copy()
            chunk[0] = BOS
            logits = model(torch.from_numpy(chunk[None].astype(np.int64)))[0].float()
            first = n_ctx // 2
            lp = F.log_softmax(logits[first:n_ctx - 1], dim=-1)
            tgt = torch.from_numpy(chunk[first + 1:n_ctx].astype(np.int64))
            total += -lp.gather(1, tgt[:, None]).sum().item()
            count += len(tgt)
    return total / count, n_chunks


def sink_probe(model, data, seq):
    """Per layer, the largest over heads of the mean attention on position 0 (queries 16..511 of
    the first held-out window, float32): how far attention sinks have formed."""
    model.eval()
    with torch.no_grad():
        x, _ = windows(data, [0], seq)
        _, attns = model(x, return_attn=True)
    model.train()
    return [round(float(a[0, :, 16:, 0].mean(-1).max()), 3) for a in attns]


def greedy_ids(model, prompt_ids, n, stop_at_eos=True):
    ids = list(prompt_ids)
    T = model.cfg["context_length"]
    with torch.no_grad():
        for _ in range(n):
            nxt = int(model(torch.tensor([ids[-T:]]))[0, -1].argmax())
            if nxt == EOS and stop_at_eos:
                break
            ids.append(nxt)
    return ids


def detok(meta, ids):
    """Decodes ids with the GGUF's vocabulary the way llama.cpp's SPM detokeniser does."""
    out = bytearray()
    for i in ids:
        piece = meta["tokenizer.ggml.tokens"][i]
        t = meta["tokenizer.ggml.token_type"][i]
        if t == 6:
            out.append(int(piece[3:5], 16))
        elif t == 1:
            out += piece.replace("\u2581", " ").encode("utf-8")
    s = out.decode("utf-8", errors="replace")
    return s[1:] if s.startswith(" ") else s


def attention_structure(model, prompt_ids, n_gen=300, recent=16):
    """Greedy-generates n_gen tokens after BOS+prompt, runs the whole sequence once more and
    averages, over every query position q >= recent, each head's attention on position 0 and
    its attention mass on the `recent` newest keys (q-recent+1 .. q, the query itself included)."""
    ids = greedy_ids(model, prompt_ids, n_gen, stop_at_eos=False)
    with torch.no_grad():
        _, attns = model(torch.tensor([ids]), return_attn=True)
    T = len(ids)
    q = torch.arange(T)
    k = torch.arange(T)
    near = ((k[None, :] <= q[:, None]) & (k[None, :] > q[:, None] - recent)).float()
    rows = slice(recent, T)
    table = []
    for li, a in enumerate(attns):
        a = a[0]  # (head, query, key)
        sink = a[:, rows, 0].mean(-1)
        loc = (a[:, rows, :] * near[rows][None]).sum(-1).mean(-1)
        table.append({"layer": li, "attn_on_pos0": [round(float(v), 4) for v in sink],
                      "mass_last_%d" % recent: [round(float(v), 4) for v in loc]})
    return {"tokens": T, "prompt": None, "query_positions": "%d..%d" % (recent, T - 1), "recent_window": recent,
            "per_layer": table}


def print_attention(tab):
    key = "mass_last_%d" % tab["recent_window"]
    print("attention structure over %d tokens, queries %s (per head h0..h7)" % (tab["tokens"], tab["query_positions"]))
    for row in tab["per_layer"]:
        print("  L%d pos0: %s" % (row["layer"], " ".join("%.2f" % v for v in row["attn_on_pos0"])))
        print("     last%d: %s" % (tab["recent_window"], " ".join("%.2f" % v for v in row[key])))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (schedule unchanged)")
    ap.add_argument("--steps", type=int, default=600, help="length of the schedule")
    ap.add_argument("--batch", type=int, default=8, help="512-token windows per step")
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1, help="AdamW weight decay on matrices")
    ap.add_argument("--data", choices=["windows", "passages"], default="windows",
                    help="windows: BOS + 511 tokens at random offsets; passages: see passage_windows()")
    ap.add_argument("--passage-p", type=float, default=0.25, help="geometric parameter of verses per passage")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--time-budget-min", type=float, default=34.0,
                    help="safety stop for the training loop on a loaded machine (0 = off); a stopped run is "
                         "marked in the card and is not reproducible step for step")
    ap.add_argument("--log-only", action="store_true", help="write the training log and stop (determinism checks)")
    ap.add_argument("--out", default=ASSETS, help="assets folder to write models/ and train/ into")
    ap.add_argument("--sample", action="store_true", help="print greedy continuations from the GGUF and exit")
    ap.add_argument("--attention", action="store_true", help="print the attention-structure table from the GGUF")
    ap.add_argument("--n-sample", type=int, default=80)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gguf_path = os.path.join(args.out, "models", "kvscope-demo.gguf")
    card_path = os.path.join(args.out, "models", "kvscope-demo.json")

    if args.sample or args.attention:
        import sentencepiece  # noqa: F401 (only the GGUF vocabulary is used below)
        model, meta = load_gguf_model(gguf_path)
        sp = load_sp(open(os.path.join(args.out, "train", "tokenizer.model"), "rb").read())
        if args.sample:
            for p in PROMPTS:
                ids = greedy_ids(model, [BOS] + sp.encode(p), args.n_sample)
                print(repr(p), "->", repr(detok(meta, ids[1:])))
        if args.attention:
            tab = attention_structure(model, [BOS] + sp.encode(PROMPTS[0]))
            print_attention(tab)
        return

    t_start = time.time()
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    rng = np.random.RandomState(args.seed)
    out_models, out_train = os.path.join(args.out, "models"), os.path.join(args.out, "train")
    work = os.path.join(out_train, ".work")
    for d in (out_models, out_train, work):
        os.makedirs(d, exist_ok=True)

    # Corpus and split.
    raw = dump_bible(work)
    chapters = parse_chapters(raw)
    assert len(chapters) == 1189 and sum(len(v) for _, v in chapters) == 31102, "unexpected bible dump"
    train_verses = [vs for i, (_, vs) in enumerate(chapters) if i % 20 != 19]
    train_ch = ["\n".join(vs) for vs in train_verses]
    held_ch = ["\n".join(vs) for i, (_, vs) in enumerate(chapters) if i % 20 == 19]
    train_text, held_text = "\n".join(train_ch) + "\n", "\n".join(held_ch) + "\n"
    for name, text in (("train.txt", train_text), ("heldout.txt", held_text)):
        with open(os.path.join(work, name), "w") as f:
            f.write(text)

    # Tokenizer and token streams.
    cfg = dict(CONFIG)
    proto = train_tokenizer(train_ch, cfg["vocab_size"])
    with open(os.path.join(out_train, "tokenizer.model"), "wb") as f:
        f.write(proto)
    sp = load_sp(proto)
    train_ids = np.array(sp.encode(train_text), dtype=np.int32)
    held_ids = np.array(sp.encode(held_text), dtype=np.int32)
    counts = np.bincount(train_ids, minlength=cfg["vocab_size"]).astype(np.float64) + 1.0  # add-one smoothing
    unigram = -float(np.mean(np.log(counts[held_ids] / counts.sum())))
    print("corpus: %d chapters, %d train / %d held-out tokens; unigram baseline %.4f nats/token"
          % (len(chapters), len(train_ids), len(held_ids), unigram), flush=True)

    # Model and optimiser.
    model = Llama(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    print("model: %d parameters" % n_params, flush=True)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    seq, batch, steps = cfg["context_length"], args.batch, args.steps
    warmup, min_ratio = 50, 0.1
    lr_at = lambda s: args.lr * min(1.0, (s + 1) / warmup) * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * s / steps)))
    # Fixed evaluation windows: 32 evenly spaced held-out windows (interval checks, bfloat16 like
    # training) and every non-overlapping held-out window (the final float32 number).
    eval_starts = np.linspace(0, len(held_ids) - seq, 32).astype(np.int64)
    all_held = np.arange(0, len(held_ids) - seq + 1, seq - 1)
    train_probe = np.random.RandomState(args.seed + 7).randint(0, len(train_ids) - seq, size=64)

    run_steps = min(steps, args.max_steps) if args.max_steps else steps
    log, sink_trace = [], []
    stopped_early = None
    t0 = time.time()
    for step in range(run_steps):
        lr = lr_at(step)
        for g in opt.param_groups:
            g["lr"] = lr
        if args.data == "passages":
            x, y = passage_windows(rng, sp, train_verses, batch, seq, args.passage_p)
        else:
            x, y = windows(train_ids, rng.randint(0, len(train_ids) - seq, size=batch), seq)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        held = None
        if step % 50 == 0 or step == run_steps - 1:
            held = mean_loss(model, held_ids, eval_starts, seq, bf16=True)
            sink_trace.append((step, sink_probe(model, held_ids, seq)))
        log.append((step, loss.item(), held, lr, time.time() - t0))
        if step % 10 == 0 or held is not None:
            print("step %4d  loss %.4f  held %s  lr %.3e  %6.0fs%s" % (
                step, loss.item(), "%.4f" % held if held is not None else "-", lr, time.time() - t0,
                "  max pos0 attention by layer %s" % sink_trace[-1][1] if held is not None else ""), flush=True)
        if args.time_budget_min and time.time() - t0 > args.time_budget_min * 60 and step < run_steps - 1:
            print("time budget of %g min reached after step %d: stopping early" % (args.time_budget_min, step), flush=True)
            stopped_early = step + 1
            break
    train_wall = time.time() - t0
    run_steps = len(log)

    def write_log():
        with open(os.path.join(out_train, "training_log.csv"), "w") as f:
            f.write("step,train_loss,heldout_loss,lr,elapsed_s\n")
            for s_, l, h, lr, e in log:
                f.write("%d,%.6f,%s,%.6g,%.2f\n" % (s_, l, "%.6f" % h if h is not None else "", lr, e))
    write_log()
    if args.log_only:
        return

    # Final numbers, in float32.
    model.eval()
    final_held = mean_loss(model, held_ids, all_held, seq)
    final_train = mean_loss(model, train_ids, train_probe, seq)
    lcpp_nll, lcpp_chunks = llamacpp_style_nll(model, held_ids, seq)
    print("final: train %.4f  held-out %.4f  (llama-perplexity style: nll %.4f, ppl %.3f over %d chunks)  unigram %.4f"
          % (final_train, final_held, lcpp_nll, math.exp(lcpp_nll), lcpp_chunks, unigram), flush=True)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot([l[0] for l in log], [l[1] for l in log], label="train (batch)", lw=0.7)
    hs = [(l[0], l[2]) for l in log if l[2] is not None]
    ax.plot([h[0] for h in hs], [h[1] for h in hs], "o-", label="held-out (32 windows)", ms=3)
    ax.axhline(unigram, color="gray", ls="--", label="unigram baseline %.2f" % unigram)
    ax.set_xlabel("step (%d tokens each)" % (batch * seq))
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("kvscope-demo (%.1fM params), seed %d: held-out %.3f" % (n_params / 1e6, args.seed, final_held))
    ax.set_ylim(0, max(8.0, unigram + 0.5))
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out_train, "loss_curve.png"), dpi=100)

    # Export, then reload the file for the samples and the attention check (checks the export).
    export_gguf(gguf_path, cfg, model, sp)
    gmodel, meta = load_gguf_model(gguf_path)
    x = torch.from_numpy(windows(held_ids, all_held[:1], seq)[0].numpy())
    with torch.no_grad():
        assert torch.equal(gmodel(x), model(x)), "GGUF round trip changed the logits"
    samples = {}
    for p in PROMPTS:
        ids = greedy_ids(gmodel, [BOS] + sp.encode(p), args.n_sample)
        samples[p] = {"ids": ids, "text": detok(meta, ids[1:])}
        assert samples[p]["text"] == sp.decode(ids[1:]), (samples[p]["text"], sp.decode(ids[1:]))
        print(repr(p), "->", repr(samples[p]["text"]), flush=True)
    attn = attention_structure(gmodel, [BOS] + sp.encode(PROMPTS[0]))
    attn["prompt"] = PROMPTS[0]
    print_attention(attn)
    key = "mass_last_%d" % attn["recent_window"]
    sink_heads = [(r["layer"], h) for r in attn["per_layer"] for h, v in enumerate(r["attn_on_pos0"]) if v > 0.3]
    local_heads = [(r["layer"], h) for r in attn["per_layer"] for h, v in enumerate(r[key]) if v > 0.5]
    attn["heads_pos0_over_0.3"] = sink_heads
    attn["heads_last16_over_0.5"] = local_heads
    print("sink heads (pos0 > 0.3): %s\nlocal heads (last16 > 0.5): %s" % (sink_heads, local_heads), flush=True)

    card = {
        "name": "kvscope-demo",
        "file": "kvscope-demo.gguf",
        "format": "GGUF v3, all tensors F32, tied embeddings (no output.weight)",
        "architecture": "llama",
        "config": cfg,
        "head_dim": cfg["dim"] // cfg["n_heads"],
        "parameters": n_params,
        "corpus": {
            "package": "bible-kjv-text", "version": package_version("bible-kjv-text"),
            "extracted_with": "bible-kjv %s: bible -l0 Gen1:1-Rev22:21" % package_version("bible-kjv"),
            "licence": "text: public domain (King James Version, 1611); Debian packaging: GPL-2+ "
                       "(see /usr/share/doc/bible-kjv-text/copyright)",
            "dump_bytes": len(raw.encode("utf-8")),
            "train_bytes": len(train_text.encode("utf-8")), "heldout_bytes": len(held_text.encode("utf-8")),
            "chapters": len(chapters), "verses": sum(len(v) for _, v in chapters),
            "split": "chapter index %% 20 == 19 held out (%d of %d chapters)" % (len(held_ch), len(chapters)),
            "format": "verse texts without numbers, one per line ('\\n'-joined); chapters concatenated",
            "train_tokens": int(len(train_ids)), "heldout_tokens": int(len(held_ids)),
        },
        "tokenizer": {"kind": "SentencePiece BPE, byte fallback, identity normalisation, dummy prefix",
                      "vocab_size": sp.get_piece_size(), "trained_on": "training chapters, one chapter per sentence",
                      "sentencepiece": __import__("sentencepiece").__version__},
        "training": {
            "seed": args.seed, "steps": run_steps, "schedule_steps": steps, "stopped_early_by_time_budget": stopped_early is not None, "batch_windows": batch, "window": seq,
            "tokens_per_step": batch * seq, "tokens_seen": run_steps * batch * seq,
            "epochs": round(run_steps * batch * seq / len(train_ids), 2),
            "optimizer": "AdamW(betas 0.9/0.95, wd %g on matrices), peak lr %g, %d warmup steps, cosine to %g x peak, "
                         "grad clip 1.0" % (args.weight_decay, args.lr, warmup, min_ratio),
            "precision": "bfloat16 autocast matmuls, float32 weights/optimizer/softmax",
            "data_order": ("numpy RandomState(seed) window offsets; every window is BOS + 511 tokens" if args.data == "windows" else
                           "numpy RandomState(seed) passages: random training chapter, random first verse, geometric(%g) "
                           "verses, each passage after its own BOS, packed into 512-token windows; BOS targets not scored"
                           % args.passage_p),
            "threads": args.threads, "torch": torch.__version__, "numpy": np.__version__,
            "train_loop_seconds": round(train_wall, 1), "wall_seconds": None,
        },
        "loss": {
            "units": "nats/token",
            "final_train": round(final_train, 4),
            "final_train_note": "float32, 64 random training windows",
            "final_train_batch_mean_last20": round(float(np.mean([l[1] for l in log[-20:]])), 4),
            "heldout": round(final_held, 4),
            "heldout_note": "float32, every token of %d non-overlapping held-out windows (BOS + 511 tokens)" % len(all_held),
            "heldout_llama_perplexity_style_nll": round(lcpp_nll, 4),
            "heldout_llama_perplexity_style_ppl": round(math.exp(lcpp_nll), 4),
            "heldout_llama_perplexity_style_chunks": lcpp_chunks,
            "unigram_baseline_heldout": round(unigram, 4),
            "unigram_baseline_note": "cross-entropy of the add-one-smoothed training unigram distribution on the held-out tokens",
        },
        "sink_trace": {"what": "per layer, max over heads of mean attention on position 0, first held-out window",
                       "steps": [t[0] for t in sink_trace], "per_layer": [t[1] for t in sink_trace]},
        "greedy_samples_torch": {p: s["text"] for p, s in samples.items()},
        "greedy_sample_ids_torch": {p: s["ids"] for p, s in samples.items()},
        "attention_structure_torch": attn,
    }
    card["training"]["wall_seconds"] = round(time.time() - t_start, 1)
    with open(card_path, "w") as f:
        json.dump(card, f, indent=1)
    print(json.dumps(card["loss"], indent=1))
    print("wall %.1fs (training loop %.1fs)" % (card["training"]["wall_seconds"], train_wall), flush=True)


if __name__ == "__main__":
    main()
