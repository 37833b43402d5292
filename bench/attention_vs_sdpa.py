#!/usr/bin/env python3
"""kvscope's paged attention against PyTorch's scaled_dot_product_attention, same shapes, one run.

    bench/attention_vs_sdpa.py BUILD/bench/bench_kernels [--core | --quick] [--json-out FILE]
    bench/attention_vs_sdpa.py ROWS.json [--json-out FILE]

Runs `bench_kernels --json` (or reads the rows a run of it wrote), then times torch.nn.functional.scaled_dot_product_attention on each
attention row's shape: q [batch, heads, q_len, head_dim], K/V [batch, kv_heads, kv_len, head_dim]
contiguous (not paged: PyTorch has no paged cache, so it reads K/V in one run per head while
kvscope follows a shuffled block table), GQA through enable_gqa, causal aligned to the end of
the keys for prefill (a chunk after a cached prefix). K/V and q in the row's dtype (kvscope keeps
q and out in f32). Each time is the median of five runs after warm-up, with CUDA events.
Prints both times, their ratio (above 1: kvscope is slower) and kvscope's share of the copy
bandwidth measured in the same run. --json-out writes the rows with PyTorch's time and its GB/s
(the same bytes over its time) added, for .ci/gpu-check's results.
"""
import json
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

MODELS = {"llama-3-8b": (32, 8, 128), "qwen2.5-0.5b": (14, 2, 64)}
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def time_ms(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        b.synchronize()
        runs.append(a.elapsed_time(b) / iters)
    return sorted(runs)[len(runs) // 2]


def sdpa_ms(row):
    heads, kv_heads, hd = MODELS[row["model"]]
    dt = DTYPES[row["dtype"]]
    b, lq, lk = row["batch"], row["q_len"], row["kv_len"]
    q = torch.randn(b, heads, lq, hd, dtype=dt, device="cuda")
    k = torch.randn(b, kv_heads, lk, hd, dtype=dt, device="cuda")
    v = torch.randn(b, kv_heads, lk, hd, dtype=dt, device="cuda")
    mask = None
    if lq > 1:
        mask = causal_lower_right(lq, lk)

    def call():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    kv_bytes = 2 * b * lk * kv_heads * hd * q.element_size()
    iters = 5 if kv_bytes > 1e9 else 20 if kv_bytes > 1e8 else 100
    return time_ms(call, max(1, iters // 10) if lq > 1 else iters)


def main():
    args = sys.argv[1:]
    json_out = None
    if "--json-out" in args:
        i = args.index("--json-out")
        if i + 1 >= len(args):
            sys.exit("--json-out needs a file name")
        json_out = args[i + 1]
        del args[i:i + 2]
    if not args:
        sys.exit(__doc__)
    if args[0].endswith(".json"):
        with open(args[0]) as f:
            rows = json.load(f)
    else:
        out = subprocess.run([args[0], "--json"] + args[1:], check=True,
                             capture_output=True, text=True).stdout
        rows = json.loads(out)
    print(f"{rows[0]['device']}: copy {rows[0]['copy_gbps']:.0f} GB/s; torch {torch.__version__}")
    print(f"{'kind':8} {'model':13} {'dtype':5} {'batch':>5} {'q_len':>6} {'kv_len':>6} "
          f"{'kvscope ms':>11} {'torch ms':>9} {'ratio':>6} {'GB/s':>7} {'of copy':>7} "
          f"{'TFLOP/s':>8}")
    for r in rows:
        if r["kind"] not in ("decode", "prefill"):
            continue
        theirs = sdpa_ms(r)
        r["torch_ms"] = theirs
        r["torch_gbps"] = r["gbps"] * r["ms"] / theirs
        print(f"{r['kind']:8} {r['model']:13} {r['dtype']:5} {r['batch']:5d} {r['q_len']:6d} "
              f"{r['kv_len']:6d} {r['ms']:11.4f} {theirs:9.4f} {r['ms'] / theirs:6.2f} "
              f"{r['gbps']:7.0f} {100 * r['gbps'] / r['copy_gbps']:6.0f}% {r['tflops']:8.2f}")
        torch.cuda.empty_cache()
    if json_out:
        with open(json_out, "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
