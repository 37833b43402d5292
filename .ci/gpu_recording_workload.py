#!/usr/bin/env python3
"""The workload `.ci/gpu-check` records on the GPU: a few chat-sized requests for a synthetic
model (token ids, no tokenizer), two of them sharing a long prefix and two another, arriving over
the first steps, so the recording shows batching, prefix-cache hits and decode side by side.

    .ci/gpu_recording_workload.py OUT.jsonl [VOCAB]
"""
import json
import random
import sys

out = sys.argv[1]
vocab = int(sys.argv[2]) if len(sys.argv) > 2 else 128256
rng = random.Random(7)
prefixes = [[rng.randrange(vocab) for _ in range(256)] for _ in range(2)]
requests = []
for i in range(6):
    prefix = prefixes[i % 2] if i < 4 else []
    tail = [rng.randrange(vocab) for _ in range(rng.randrange(60, 240))]
    requests.append({"id": f"r{i + 1}", "arrival_step": 4 * i, "max_tokens": rng.randrange(32, 80),
                     "n": 1, "prompt_ids": prefix + tail})
with open(out, "x") as f:
    for r in requests:
        f.write(json.dumps(r) + "\n")
