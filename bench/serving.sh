#!/usr/bin/env bash
# Serving benchmarks, one run each, on the bundled model (or MODEL):
#  1. paged vs contiguous allocator on the same 200-request chat workload and pool size;
#  2. prefix caching on vs off on a shared-prefix workload;
#  3. scheduler + block-manager overhead with 256 requests running at once.
#   bench/serving.sh [MODEL]
set -euo pipefail
model=${1:-assets/models/kvscope-demo.gguf}
kvscope=${KVSCOPE:-build/kvscope}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
field() { python3 -c "import json,sys; d=json.load(open('$1')); print(d['$2'])"; }

echo "== 1. paged vs contiguous: 200 chat requests, ${POOL:=192} blocks x 16 tokens =="
"$kvscope" workload --model "$model" --kind chat --requests 200 --seed 1 --out "$out/chat.jsonl" 2>/dev/null
for a in paged contiguous; do
  "$kvscope" run --model "$model" --workload "$out/chat.jsonl" --num-blocks "$POOL" --allocator "$a" \
    --summary-json "$out/$a.json" >/dev/null 2>&1
done
printf '%-12s %12s %14s %14s %12s %12s %10s\n' allocator max_running mean_frag peak_frag peak_blocks preemptions tokens/s
for a in paged contiguous; do
  f=$out/$a.json
  printf '%-12s %12s %14.4f %14.4f %12s %12s %10.0f\n' "$a" "$(field "$f" max_running)" "$(field "$f" mean_fragmentation)" \
    "$(field "$f" peak_fragmentation)" "$(field "$f" peak_blocks_used)" "$(field "$f" preemptions)" "$(field "$f" tokens_per_second)"
done
python3 - "$out/paged.json" "$out/contiguous.json" <<'PY'
import json, sys
p, c = (json.load(open(x)) for x in sys.argv[1:])
print("same tokens out:", p["outputs"] == c["outputs"])
PY
# Paged waste is the last block's slack, about half a block per running request, so it moves with
# the block size; the contiguous allocator's does not depend on it.
printf '%-12s %10s %12s %14s %12s\n' allocator block_size max_running mean_frag preemptions
for bs in 8 32; do
  "$kvscope" run --model "$model" --workload "$out/chat.jsonl" --num-blocks $((POOL * 16 / bs)) --block-size "$bs" \
    --summary-json "$out/bs$bs.json" >/dev/null 2>&1
  f=$out/bs$bs.json
  printf '%-12s %10s %12s %14.4f %12s\n' paged "$bs" "$(field "$f" max_running)" "$(field "$f" mean_fragmentation)" "$(field "$f" preemptions)"
done

echo
echo "== 2. prefix caching: 100 shared-prefix requests =="
"$kvscope" workload --model "$model" --kind shared-prefix --requests 100 --seed 1 --out "$out/sp.jsonl" 2>/dev/null
for pc in on off; do
  "$kvscope" run --model "$model" --workload "$out/sp.jsonl" --num-blocks 512 --prefix-cache "$pc" \
    --summary-json "$out/sp-$pc.json" >/dev/null 2>&1
done
printf '%-14s %16s %22s %16s\n' prefix_cache hit_rate prefill_tokens_computed prompt_tokens
for pc in on off; do
  f=$out/sp-$pc.json
  printf '%-14s %16.4f %22s %16s\n' "$pc" "$(field "$f" prefix_hit_rate)" "$(field "$f" prefill_tokens_computed)" "$(field "$f" prompt_tokens)"
done
python3 - "$out/sp.jsonl" <<'PY'
import json, os, sys
reqs = [json.loads(l) for l in open(sys.argv[1])]
# Prompts as text (models with a tokenizer) or ids; the shared part is their common prefix.
prompts = [r["prompt"] if "prompt" in r else r["prompt_ids"] for r in reqs]
common = len(os.path.commonprefix(prompts))
print("share of the prompts that is the shared prefix (%s): %.4f"
      % ("characters" if "prompt" in reqs[0] else "tokens", common * len(prompts) / sum(len(p) for p in prompts)))
PY

echo
echo "== 3. scheduler overhead: 256 requests running at once =="
python3 - "$out/many.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(256):
        f.write(json.dumps({"id": "m%d" % i, "arrival_step": 0, "prompt_ids": [1] + [(7 * i + k) % 500 + 3 for k in range(12)],
                            "max_tokens": 48}) + "\n")
PY
"$kvscope" run --model "$model" --workload "$out/many.jsonl" --num-blocks 2048 --max-batch-tokens 4096 \
  --max-running 256 --prefix-cache off --summary-json "$out/many.json" 2>/dev/null | grep -E "max running|scheduler overhead|tokens/s"
