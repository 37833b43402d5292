#!/usr/bin/env bash
# Runs every fuzz target for MINUTES each (default 10), one after the other, from its seed corpus
# in fuzz/corpus/<target>, with the limits the project holds its parsers to: no single allocation
# over 512 MiB, 2 GiB resident at most, 25 s per input, an 8 MiB stack (a recursion too deep for
# it is a crash, not a pass). Builds build-fuzz/ with clang first if it is not there.
#
#   fuzz/run-all.sh [MINUTES] [TARGET...]
#     targets: gguf events workload workload_typed session kv_frames cli_values window_model
#
# Prints, per target, the runs, the coverage (edges and features) and whether it found anything;
# inputs that crash or exhaust memory are left in fuzz/corpus-run/<target>-crash-* and the script
# exits 1. Move each into fuzz/regressions/<target>/ with a test that replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-10}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gguf events workload workload_typed session kv_frames cli_values
  window_model)

# Configured every time (quick once done): the window's target needs a build with the window.
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DKVSCOPE_FUZZ=ON \
  -DKVSCOPE_BUILD_GUI=ON -DKVSCOPE_BUILD_TESTS=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target $(printf 'fuzz_%s ' "${targets[@]}") >/dev/null

# workload_typed reads its input as a recipe (a few bytes make a 200 000-deep array or a 100 kB
# key); cli_values as an option and its value, and an argument is at most 128 KiB anyway.
declare -A max_len=([gguf]=100000 [events]=65536 [workload]=16384 [workload_typed]=4096
                   [session]=131072 [kv_frames]=65536 [cli_values]=4096
                   [window_model]=131072)
ulimit -s 8192
status=0
for t in "${targets[@]}"; do
  run=fuzz/corpus-run/$t
  mkdir -p "$run"
  log=fuzz/corpus-run/$t.log
  set +e
  build-fuzz/fuzz/fuzz_$t "$run" "fuzz/corpus/$t" \
    -max_total_time=$((minutes * 60)) -malloc_limit_mb=512 -rss_limit_mb=2048 -timeout=25 \
    -max_len="${max_len[$t]}" -artifact_prefix="fuzz/corpus-run/$t-crash-" -print_final_stats=1 \
    >"$log" 2>&1
  rc=$?
  set -e
  runs=$(grep -oE 'Done [0-9]+ runs in [0-9]+ second' "$log" | tail -1 || true)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
  found=$(find fuzz/corpus-run -maxdepth 1 -name "$t-crash-*" | wc -l)
  printf '%-9s %s; %s; %s\n' "$t" "${runs:-no runs (see $log)}" "${cov:-no coverage}" \
    "$([ "$found" -eq 0 ] && [ $rc -eq 0 ] && echo clean || echo "FOUND $found input(s), exit $rc: $log")"
  if [ "$found" -ne 0 ] || [ $rc -ne 0 ]; then status=1; fi
done
exit $status
