#!/usr/bin/env bash
# Decode tokens/s of `kvscope generate` against llama2.c's run.c on the same llama2.c
# checkpoint, same thread count, same machine, in one run. run.c is not part of kvscope:
# build it beside the project (gcc -O3 -fopenmp -o run run.c -lm) and pass its path.
#
#   bench/decode_vs_llama2c.sh RUN_C_BINARY [MODEL] [TOKENIZER] [TOKENS] [REPEATS]
set -euo pipefail
run_c=${1:?path to llama2.c run binary (built with -O3 -fopenmp)}
model=${2:-${KVSCOPE_FIXTURES:-tests/fixtures}/stories260K/stories260K.bin}
tok=${3:-${KVSCOPE_FIXTURES:-tests/fixtures}/stories260K/tok512-placeholder.bin}
tokens=${4:-256}
repeats=${5:-7}
kvscope=${KVSCOPE:-build/kvscope}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

printf '%-8s %-22s %-22s %s\n' threads "kvscope tok/s (median)" "run.c tok/s (median)" "kvscope / run.c"
for threads in 1 2; do
  ours=(); theirs=()
  for _ in $(seq "$repeats"); do
    ours+=("$("$kvscope" generate --model "$model" --print-ids --max-tokens "$tokens" --threads "$threads" 2>&1 >/dev/null \
             | sed -n 's/.*decode \([0-9.]*\) tokens\/s.*/\1/p')")
    theirs+=("$(OMP_NUM_THREADS=$threads "$run_c" "$model" -z "$tok" -t 0 -n "$tokens" 2>&1 >/dev/null \
             | sed -n 's/achieved tok\/s: \([0-9.]*\).*/\1/p')")
  done
  a=$(printf '%s\n' "${ours[@]}" | median)
  b=$(printf '%s\n' "${theirs[@]}" | median)
  printf '%-8s %-22.0f %-22.0f %.2fx\n' "$threads" "$a" "$b" "$(echo "$a / $b" | bc -l)"
done
