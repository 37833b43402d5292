#!/usr/bin/env bash
# Storing less (issue 14), on the bundled model:
#  1. quality: `kvscope eval` on held-out text, every policy at 25% and 50% budgets (compacted,
#     the default, and with --no-compact), the pyramid layer budget, and the f16 / int8 / int4 /
#     int2 KV dtypes and a dtype per layer (DTYPE_CHUNKS=16: the first 16 chunks only), mixed
#     precision by importance and merged layers (issue 31, parts 4 and 5);
#  2. speed: decode tokens/s of a 2 000-token generation with each policy at 50% and with int8,
#     against none/f32, all settings alternated in one run (medians of ROUNDS).
#  3. past the context (issue 31): `eval --stream` over 8 192 held-out tokens (16x the trained
#     context) with streaming at budget 256 and 4 sinks, cache positions against absolute ones,
#     and the full cache in its context on the same tokens (`eval --ctx 512 --chunks 16`).
#   bench/storing_less.sh [quality|speed|stream|all]
# The held-out text is the bundled model's: every 20th chapter of the King James Bible, as
# assets/train/train_demo_model.py splits it. It is rebuilt with the `bible` program (Debian
# package bible-kjv) unless HELDOUT names the file.
set -euo pipefail
what=${1:-all}
kvscope=${KVSCOPE:-build/kvscope}
model=${MODEL:-assets/models/kvscope-demo.gguf}
rounds=${ROUNDS:-5}
threads=${THREADS:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

heldout=${HELDOUT:-}
if [[ -z $heldout && $what != speed ]]; then
  heldout=$out/heldout.txt
  bible -l0 Gen1:1-Rev22:21 | python3 -c '
import sys
chapters = []
for line in sys.stdin.read().split("\n"):
    if not line.strip():
        continue
    if not line.startswith(" "):
        chapters.append([])
        continue
    chapters[-1].append(line.strip().split(" ", 1)[1])
held = ["\n".join(vs) for i, vs in enumerate(chapters) if i % 20 == 19]
sys.stdout.write("\n".join(held) + "\n")' >"$heldout"
fi

if [[ $what == quality || $what == all ]]; then
  policies=none,streaming,h2o,snapkv,tova,knorm,morphkv
  echo "== 1a. every policy at 25% and 50% (holes closed, blocks given back: the default) =="
  "$kvscope" eval --model "$model" --text "$heldout" --policy $policies --kv-budget 25%,50% \
    --threads "$threads"
  echo "== 1b. the same with --no-compact: the same choices, but a block returns only when no lane holds any of its slots =="
  "$kvscope" eval --model "$model" --text "$heldout" --policy $policies --kv-budget 25%,50% \
    --no-compact --threads "$threads"
  echo "== 1c. pyramid layer budget (lower layers get more of the same total) =="
  "$kvscope" eval --model "$model" --text "$heldout" --policy streaming,h2o,tova --kv-budget 25% \
    --layer-budget pyramid --threads "$threads"
  echo "== 1d. KV dtypes, full cache, and a dtype per layer (issue 31: int4 with f16 scales, int2, MiniKV's early layers in int8) =="
  "$kvscope" eval --model "$model" --text "$heldout" --kv-dtype f16,int8,int4,int2 \
    --kv-dtype-layers 0-1:int8,2-5:int2 --chunks "${DTYPE_CHUNKS:-0}" --threads "$threads"
  echo "== 1e. morphkv with its window's attention summed instead of its maximum =="
  "$kvscope" eval --model "$model" --text "$heldout" --policy morphkv --kv-budget 25%,50% \
    --window-aggregate sum --threads "$threads"
  echo "== 1f. precision by importance (ZipCache: int8 for the top 20% / 50% by normalized attention, int2 for the rest) and merged layers (MiniCache) at the default distance =="
  "$kvscope" eval --model "$model" --text "$heldout" \
    --kv-dtype f32,mixed:int8/int2:20%,mixed:int8/int2:50% --merge-layers 0,2 --threads "$threads"
  echo "== 1g. merged layers forced to distance 0.5 (90 degrees) =="
  "$kvscope" eval --model "$model" --text "$heldout" --merge-layers 0,2 --merge-distance 0.5 \
    --threads "$threads"
fi

if [[ $what == stream || $what == all ]]; then
  echo "== 3a. streaming past the context: 8 192 tokens fed one decode step each, windows of 512 =="
  "$kvscope" eval --model "$model" --text "$heldout" --stream --max-tokens 8192 --window-tokens 512 \
    --policy streaming --kv-budget 256 --sinks 4 --positions cache,absolute --threads "$threads"
  echo "== 3b. the full cache in its context on the same tokens: 16 chunks of 512, second halves scored =="
  "$kvscope" eval --model "$model" --text "$heldout" --ctx 512 --chunks 16 --threads "$threads"
fi

if [[ $what == speed || $what == all ]]; then
  echo "== 2. decode of 2 000 tokens after a 7-token prompt, --ctx-size 2048, $threads thread(s), median of $rounds rounds =="
  settings=("--policy none" "--kv-dtype int8")
  for p in streaming h2o tova knorm morphkv; do
    settings+=("--policy $p --kv-budget 50% --no-compact" "--policy $p --kv-budget 50%")
  done
  for ((r = 0; r < rounds; ++r)); do
    for i in "${!settings[@]}"; do
      # shellcheck disable=SC2086 # the settings are flag lists
      "$kvscope" generate --model "$model" --prompt "Once upon a time" --ctx-size 2048 \
        --max-tokens 2000 --threads "$threads" ${settings[$i]} 2>&1 >/dev/null |
        sed -n 's/.*decode \([0-9.]*\) tokens\/s.*/\1/p' >>"$out/speed.$i"
    done
  done
  for i in "${!settings[@]}"; do echo "${settings[$i]}"; done >"$out/names"
  python3 - "$out" "${#settings[@]}" <<'PY'
import statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
names = open(out + "/names").read().splitlines()
med = [statistics.median(float(x) for x in open(f"{out}/speed.{i}").read().split()) for i in range(n)]
print(f"{'setting':<46} {'decode tok/s':>12} {'vs none':>8}")
for name, m in zip(names, med):
    print(f"{name:<46} {m:12.1f} {m / med[0]:7.2f}x")
PY
fi
