#!/usr/bin/env bash
# kvscope's `bench cpu` beside llama.cpp's llama-bench on the same GGUF files, alternating the
# two engines run by run (this machine's speed drifts), and the ratios kvscope / llama.cpp.
#
#   bench/vs_llamacpp.sh LLAMA_BENCH MODEL.gguf...
#
# LLAMA_BENCH is a llama-bench binary built beside the project (not part of it). Make random
# real-shape files with bench/make_random_gguf.py. Environment: THREADS (default "1 2"),
# ROUNDS (alternations, default 3), MATMUL (kvscope's modes, default "exact fast"),
# TESTS (default "pp128 pp512 tg128"), KVSCOPE (default build/kvscope).
# llama-bench's tgN starts from an empty cache, kvscope's after a 128-token prompt; the KV
# bytes of 128 tokens are under 1% of a 0.5B model's weights. llama.cpp keeps K/V in f16 by
# default, kvscope in f32: both as a user gets them. Peak memory: GNU time's maximum resident
# set of each process, file pages included.
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 LLAMA_BENCH MODEL.gguf..." >&2
    exit 2
fi
LLAMA_BENCH=$1
shift
KVSCOPE=${KVSCOPE:-build/kvscope}
THREADS=${THREADS:-"1 2"}
ROUNDS=${ROUNDS:-3}
MATMUL=${MATMUL:-"exact fast"}
TESTS=${TESTS:-"pp128 pp512 tg128"}
for tool in "$LLAMA_BENCH" "$KVSCOPE" /usr/bin/time python3; do
    command -v "$tool" >/dev/null || { echo "vs_llamacpp: $tool not found" >&2; exit 2; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for model in "$@"; do
    [ -f "$model" ] || { echo "vs_llamacpp: $model: no such file" >&2; exit 1; }
    for t in $THREADS; do
        for round in $(seq "$ROUNDS"); do
            for test in $TESTS; do
                case $test in
                    pp*) args=(-p "${test#pp}" -n 0) ;;
                    tg*) args=(-p 0 -n "${test#tg}") ;;
                esac
                /usr/bin/time -f "%M" -o "$out/rss" "$LLAMA_BENCH" -m "$model" -t "$t" -r 1 \
                    -ctk f16 -ctv f16 -o json "${args[@]}" > "$out/llama.json" 2>/dev/null
                python3 -c "import json,sys; r=json.load(open('$out/llama.json'))[0]; \
print('llama.cpp', '$model', $t, '$test', r['avg_ts'], open('$out/rss').read().strip())" >> "$out/rows"
                for m in $MATMUL; do
                    /usr/bin/time -f "%M" -o "$out/rss" "$KVSCOPE" bench cpu --model "$model" \
                        --threads "$t" --reps 1 --tests "$test" --matmul "$m" --json > "$out/ks.json"
                    python3 -c "import json; r=json.load(open('$out/ks.json')); \
print('kvscope-$m', '$model', $t, '$test', r['results'][0]['tokens_per_second'], open('$out/rss').read().strip())" >> "$out/rows"
                done
            done
        done
    done
done

python3 - "$out/rows" <<'PY'
import collections, os, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
speed = collections.defaultdict(list)
rss = collections.defaultdict(list)
for engine, model, t, test, ts, kib in rows:
    speed[(engine, model, t, test)].append(float(ts))
    rss[(engine, model)].append(int(kib))
engines = sorted({r[0] for r in rows if r[0] != "llama.cpp"})
print("| model | threads | test | llama.cpp t/s | " + " | ".join("%s t/s (ratio)" % e for e in engines) + " |")
print("| --- | --- | --- | --- | " + " | ".join("---" for _ in engines) + " |")
for key in sorted({(m, t, test) for _, m, t, test, _, _ in rows}):
    m, t, test = key
    ref = statistics.median(speed[("llama.cpp", m, t, test)])
    cells = []
    for e in engines:
        v = statistics.median(speed[(e, m, t, test)])
        cells.append("%.1f (%.2fx)" % (v, v / ref))
    print("| %s | %s | %s | %.1f | %s |" % (os.path.basename(m), t, test, ref, " | ".join(cells)))
print()
print("| model | llama.cpp peak RSS GiB | " + " | ".join("%s GiB (ratio)" % e for e in engines) + " |")
print("| --- | --- | " + " | ".join("---" for _ in engines) + " |")
for m in sorted({r[1] for r in rows}):
    ref = max(rss[("llama.cpp", m)]) / 2**20
    cells = ["%.3f (%.2fx)" % (max(rss[(e, m)]) / 2**20, max(rss[(e, m)]) / 2**20 / ref) for e in engines]
    print("| %s | %.3f | %s |" % (os.path.basename(m), ref, " | ".join(cells)))
PY
