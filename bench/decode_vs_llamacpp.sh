#!/usr/bin/env bash
# Prompt and decode speed of kvscope against llama.cpp's llama-bench on the same GGUF, same
# threads, in one run: prompt 128 tokens, then 256 generated. llama.cpp is not part of kvscope:
# build it beside the project (see assets/train/LLAMA_CPP_NOTES.md) and pass llama-bench's path.
#   bench/decode_vs_llamacpp.sh LLAMA_BENCH [MODEL] [THREADS...]
set -euo pipefail
llama_bench=${1:?path to llama.cpp llama-bench}
model=${2:-assets/models/kvscope-demo.gguf}
shift $(( $# >= 2 ? 2 : 1 ))
threads=("$@")
[ ${#threads[@]} -eq 0 ] && threads=(1 2)
kvscope=${KVSCOPE:-build/kvscope}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# The same 128-token prompt for both (llama-bench uses random tokens; speed does not care).
prompt=$("$kvscope" tokenize --model "$model" --text "$(head -c 2000 "$(dirname "$0")/../README.md")" |
  awk '{for (i = 1; i <= 128 && i <= NF; i++) printf "%s ", $i}')

printf '%-8s %-10s %14s %14s %8s\n' threads test kvscope llama.cpp ratio
for t in "${threads[@]}"; do
  lb=$("$llama_bench" -m "$model" -p 128 -n 256 -t "$t" -r 5 -o csv 2>/dev/null)
  lpp=$(echo "$lb" | awk -F, 'NR > 1 && $0 ~ /"128","0"/ {gsub(/"/, ""); print $(NF-1)}' | head -1)
  ltg=$(echo "$lb" | awk -F, 'NR > 1 && $0 ~ /"0","256"/ {gsub(/"/, ""); print $(NF-1)}' | head -1)
  runs=$(for i in 1 2 3 4 5; do
    "$kvscope" generate --model "$model" --prompt-ids "$prompt" --max-tokens 256 --threads "$t" --print-ids 2>&1 >/dev/null |
      sed -n 's/.*prefill \([0-9.]*\) ms; generated [0-9]* tokens.*, decode \([0-9.]*\) tokens\/s.*/\1 \2/p'
  done)
  kpp=$(echo "$runs" | awk '{print 128000 / $1}' | median)
  ktg=$(echo "$runs" | awk '{print $2}' | median)
  printf '%-8s %-10s %14.1f %14.1f %7.2fx\n' "$t" "pp128" "$kpp" "$lpp" "$(echo "$kpp / $lpp" | bc -l)"
  printf '%-8s %-10s %14.1f %14.1f %7.2fx\n' "$t" "tg256" "$ktg" "$ltg" "$(echo "$ktg / $ltg" | bc -l)"
done
echo "(tokens/s; kvscope: median of 5 runs, prompt tokens / prefill time and decode rate as it reports;"
echo " llama.cpp: llama-bench average of 5; its tg256 starts from an empty cache, kvscope's after the prompt)"
