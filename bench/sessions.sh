#!/usr/bin/env bash
# Session benchmarks: recorder throughput and bytes/event (synthetic stream), the cost of
# recording on decode (bundled model, capture off / one layer, in one process), and `inspect --step N` on a
# 100 000-step session (median and worst of 100 random steps, whole-process time).
#   bench/sessions.sh [MODEL] [STEPS]
set -euo pipefail
model=${1:-assets/models/kvscope-demo.gguf}
steps=${2:-100000}
kvscope=${KVSCOPE:-build/kvscope}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "== recorder throughput (synthetic realistic mix, 2M events) =="
build/bench/bench_recorder 20000 100

echo
echo "== recording overhead on decode: 440 tokens, modes rotated in one process, median of 15 =="
build/bench/bench_recording_overhead "$model" 440 15

echo
echo "== inspect --step N on a $steps-step session =="
# One request at a time, each decoding 250 tokens: about one engine step per token.
python3 - "$out/long.jsonl" "$steps" <<'PY'
import json, sys
n = int(sys.argv[2]) // 250 + 1
with open(sys.argv[1], "w") as f:
    for i in range(n):
        f.write(json.dumps({"id": "l%d" % i, "arrival_step": i * 250, "prompt_ids": [1, 2 + i % 100], "max_tokens": 249}) + "\n")
PY
t0=$(date +%s.%N)
"$kvscope" run --model "$model" --workload "$out/long.jsonl" --num-blocks 64 --record "$out/long.kvs" 2>&1 | grep -E "^steps|recorded" || true
t1=$(date +%s.%N)
echo "recording took $(echo "$t1 - $t0" | bc -l | cut -c1-6) s"
python3 - "$out/long.kvs" <<'PY'
import os, sqlite3, sys
n = sqlite3.connect(sys.argv[1]).execute("SELECT sum(n_events) FROM step").fetchone()[0]
size = os.path.getsize(sys.argv[1])
print("file %.1f MiB, %d events, %.1f bytes/event" % (size / 2**20, n, size / n))
PY
last=$("$kvscope" inspect "$out/long.kvs" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['steps_total'] - 1)")
times=()
for i in $(seq 100); do
  n=$(( (RANDOM * 32768 + RANDOM) % (last + 1) ))
  a=$(date +%s%N)
  "$kvscope" inspect "$out/long.kvs" --step "$n" --json >/dev/null
  b=$(date +%s%N)
  times+=("$(( (b - a) / 1000000 ))")
done
printf 'inspect over 100 random steps of %s: median %s ms, worst %s ms\n' "$((last + 1))" \
  "$(printf '%s\n' "${times[@]}" | median)" "$(printf '%s\n' "${times[@]}" | sort -g | tail -1)"
