#!/usr/bin/env python3
"""Hugging Face transformers' eager Llama decode on the GPU, the shape kvscope's `bench gpu
--decode` times: what a user gets from the library most people start with.

    bench/hf_eager_decode.py [--shape llama-3-8b] [--context 1024] [--steps 32] [--batch 1]
                             [--json-out FILE]

Random bf16 weights of the shape (from each model's published config, as kvscope's synthetic
models), attn_implementation="eager", its dynamic KV cache. Decode tokens/s is the difference of
two timed generate() calls (1 and steps + 1 new tokens after the same prompt of `context - steps`
tokens), so the prefill cancels; median of three pairs after a warm-up.
"""
import argparse
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {
    # layers, dim, heads, kv heads, hidden, vocab, rope theta
    "llama-3-8b": (32, 4096, 32, 8, 14336, 128256, 5e5),
    "llama-3.2-1b": (16, 2048, 32, 8, 8192, 128256, 5e5),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama-3-8b", choices=sorted(SHAPES))
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--json-out")
    a = ap.parse_args()
    layers, dim, heads, kv_heads, hidden, vocab, theta = SHAPES[a.shape]
    config = LlamaConfig(num_hidden_layers=layers, hidden_size=dim, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, intermediate_size=hidden,
                         vocab_size=vocab, rope_theta=theta, max_position_embeddings=8192,
                         tie_word_embeddings=a.shape != "llama-3-8b")
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).eval()
    prompt = torch.randint(0, vocab, (a.batch, a.context - a.steps), device="cuda")

    def generate_seconds(new_tokens):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                           do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    generate_seconds(2)
    rates = []
    for _ in range(3):
        one = generate_seconds(1)
        many = generate_seconds(a.steps + 1)
        rates.append(a.batch * a.steps / max(many - one, 1e-9))
    rate = sorted(rates)[1]
    print(f"transformers {__import__('transformers').__version__}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}: {a.shape} eager, batch {a.batch}, context "
          f"{a.context}: {rate:.1f} tokens/s (each pair: "
          + ", ".join(f"{r:.1f}" for r in rates) + ")")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"shape": a.shape, "batch": a.batch, "context": a.context,
                       "steps": a.steps, "tokens_per_second": rate, "each": rates,
                       "transformers": __import__("transformers").__version__,
                       "torch": torch.__version__,
                       "device": torch.cuda.get_device_name()}, f, indent=1)


if __name__ == "__main__":
    main()
