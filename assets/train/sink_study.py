#!/usr/bin/python3
"""Short training runs that watch for attention sinks (issue 3): does any head put most of its
attention on token 0 (BOS)?

It trains the demo model's architecture with the training script's code (model, windows,
schedule, AdamW, bfloat16 autocast) and changes one thing at a time: the data layout, the RoPE
base, depth, tied or untied output, learning rate and weight decay. Every --every steps it prints
the held-out loss and, per layer, the largest over heads of the mean attention on token 0 over
queries 16..511 of two held-out windows (BOS + 511 contiguous tokens, offsets 0 and 20000).
Nothing is exported; the shipped model is made by train_demo_model.py alone.

    nice -n 5 /usr/bin/python3 assets/train/sink_study.py --run 400                  # the shipped recipe
    /usr/bin/python3 assets/train/sink_study.py --run 400 --data passages            # BOS-separated passages
    /usr/bin/python3 assets/train/sink_study.py --run 400 --untie --rope-theta 500000 ...

Data layouts (--data):
  windows   the shipped recipe: BOS + 511 tokens at a random offset of the training stream
  docbos    the same, over a stream in which every chapter starts with BOS
  numbered  windows over the text with "Book N" headings and verse numbers kept
  passages  each window packs whole passages (a random chapter, a random first verse, a
            geometric number of verses, mean 1/--passage-p), each after its own BOS; targets
            that are BOS are not scored. Unrelated neighbours make attention across a passage
            boundary useless, the situation in which real models learn to park heads on BOS.
  shuffled  the same passages with one BOS at the start of the window only: a head that must
            ignore the unrelated passages before its own has token 0 as the one fixed place to
            park, at any distance.
Results and what they mean: assets/README.md, "Attention structure".
"""
import argparse
import math
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see train_demo_model.py

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_demo_model as T  # noqa: E402


def token_streams(cache_dir, sp):
    """Training and held-out token streams per layout, split as the training script splits."""
    path = os.path.join(cache_dir, "sink_study_streams.npz")
    if os.path.exists(path):
        return dict(np.load(path)), np.load(os.path.join(cache_dir, "sink_study_chapters.npy"), allow_pickle=True)
    chapters = T.parse_chapters(T.dump_bible(cache_dir))
    plain = lambda h, vs: "\n".join(vs)
    numbered = lambda h, vs: h + "\n" + "\n".join("%d %s" % (i + 1, v) for i, v in enumerate(vs))
    out = {}
    for name, fmt in (("plain", plain), ("numbered", numbered)):
        for part, keep in (("train", lambda i: i % 20 != 19), ("held", lambda i: i % 20 == 19)):
            texts = [fmt(h, vs) for i, (h, vs) in enumerate(chapters) if keep(i)]
            out["%s_%s" % (name, part)] = np.array(sp.encode("\n".join(texts) + "\n"), np.int32)
    train_ch = [vs for i, (_, vs) in enumerate(chapters) if i % 20 != 19]
    out["docbos_train"] = np.concatenate([np.concatenate(([T.BOS], sp.encode("\n".join(vs)))) for vs in train_ch]).astype(np.int32)
    np.savez(path, **out)
    np.save(os.path.join(cache_dir, "sink_study_chapters.npy"), np.array(train_ch, dtype=object), allow_pickle=True)
    return out, np.array(train_ch, dtype=object)


def sink_probe(model, held):
    model.eval()
    with torch.no_grad():
        x, _ = T.windows(held, [0, 20000], 512)
        _, attns = model(x, return_attn=True)
    model.train()
    return [round(float(a[:, :, 16:, 0].mean(-1).mean(0).max()), 3) for a in attns]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=600, help="length of the learning-rate schedule")
    ap.add_argument("--run", type=int, default=400, help="steps to run")
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=688)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--untie", action="store_true", help="separate output matrix instead of tied embeddings")
    ap.add_argument("--data", choices=["windows", "docbos", "numbered", "passages", "shuffled"], default="windows")
    ap.add_argument("--passage-p", type=float, default=0.25, help="geometric parameter of verses per passage")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--cache", default="/tmp/kvscope-sink-study", help="where the corpus and token streams are kept")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    os.makedirs(a.cache, exist_ok=True)
    sp = T.load_sp(open(os.path.join(HERE, "tokenizer.model"), "rb").read())
    streams, chapters = token_streams(a.cache, sp)
    kind = "numbered" if a.data == "numbered" else "plain"
    train = streams["docbos_train"] if a.data == "docbos" else streams[kind + "_train"]
    held = streams[kind + "_held"]

    cfg = dict(T.CONFIG, dim=a.dim, n_layers=a.layers, hidden_dim=a.hidden, rope_theta=a.rope_theta)
    model = T.Llama(cfg)
    if a.untie:
        model.output = nn.Linear(cfg["dim"], cfg["vocab_size"], bias=False)
        nn.init.normal_(model.output.weight, mean=0.0, std=0.02)
    print("parameters %d  %s" % (sum(p.numel() for p in model.parameters()), vars(a)), flush=True)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    rng, seq = np.random.RandomState(a.seed), cfg["context_length"]
    lr_at = lambda s: a.lr * min(1.0, (s + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * s / a.steps)))
    eval_starts = np.linspace(0, len(held) - seq, 16).astype(np.int64)
    t0 = time.time()
    for step in range(a.run):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        if a.data in ("passages", "shuffled"):
            x, y = T.passage_windows(rng, sp, chapters, a.batch, seq, a.passage_p, bos_between=a.data == "passages")
        else:
            x, y = T.windows(train, rng.randint(0, len(train) - seq, size=a.batch), seq)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).float().flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % a.every == 0 or step == a.run - 1:
            h = T.mean_loss(model, held, eval_starts, seq, bf16=True)
            print("step %d loss %.3f held %.3f max p(token 0) by layer %s %.0fs"
                  % (step, loss.item(), h, sink_probe(model, held), time.time() - t0), flush=True)


if __name__ == "__main__":
    main()
