#!/usr/bin/env bash
# Re-takes the README's pictures with the window's own screenshots, under Xvfb at 1920x1080: the
# whole window and each main panel on the sample session (a request and a block selected, a
# heatmap cell hovered), paged vs contiguous side by side in Compare, and an attached deployment.
#   assets/screenshots/take.sh [KVSCOPE]
set -euo pipefail
cd "$(dirname "$0")/../.."
kvscope=$(realpath "${1:-build/kvscope}")
shots=$(realpath assets/screenshots)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export XDG_CONFIG_HOME=$work  # default layout and palette
sample=assets/sessions/sample-chat.kvs
# --force: the pictures are replaced on purpose.
win() { xvfb-run -a -s "-screen 0 1920x1080x24" "$kvscope" "$@" --width 1920 --height 1080 --force; }

cat > "$work/shots.txt" <<SCRIPT
seek 300
select-request 4
heatmap 4 4 5
select-block 23
wait 2
screenshot $shots/window.png
screenshot $shots/block-pool.png Block pool
screenshot $shots/requests.png Requests
screenshot $shots/timeline.png Timeline
screenshot $shots/memory.png Memory
screenshot $shots/evictions.png Evictions
screenshot $shots/kernels.png Kernels
hover-heatmap 200 190
wait 1
screenshot $shots/attention.png Attention
quit
SCRIPT
win replay "$sample" --script "$work/shots.txt"

# A GPU's kernels per stream and its sampled DRAM bandwidth: the H200 recording that
# .ci/gpu-check made (bench/RESULTS.md), a decode step with six requests running.
cat > "$work/gpu.txt" <<SCRIPT
seek 60
wait 2
screenshot $shots/gpu-kernels.png Kernels
quit
SCRIPT
win replay assets/sessions/gpu-decode.kvs --script "$work/gpu.txt"

# The controls of a live run (bare `kvscope`: the bundled model on its demo workload), 40 steps in.
win --step 40 --panel Controls --crop --screenshot "$shots/controls.png"

# Paged vs contiguous on the same workload and pool.
"$kvscope" workload --kind chat --requests 6 --seed 5 --out "$work/chat.jsonl" 2>/dev/null
for a in paged contiguous; do
  "$kvscope" run --workload "$work/chat.jsonl" --num-blocks 32 --allocator "$a" \
    --record "$work/$a.kvs" >/dev/null 2>&1
done
# From their folder, so the picture names the files and not a temporary directory.
(cd "$work" && win compare paged.kvs contiguous.kvs --step 120 --screenshot "$shots/compare.png")
# An attached deployment: two ranks of `kvscope publish` traffic (vLLM's map format, 5% of
# batches dropped and filled from replay) recorded by attach, then replayed near its end.
"$kvscope" attach tcp://127.0.0.1:18557 tcp://127.0.0.1:18558 \
  --replay tcp://127.0.0.1:18657 tcp://127.0.0.1:18658 --duration 8 \
  --record "$work/attached.kvs" >/dev/null &
attach=$!
sleep 1
"$kvscope" publish --endpoint tcp://127.0.0.1:18557 --replay tcp://127.0.0.1:18657 --ranks 2 \
  --format vllm-map --gaps 0.05 --duration 5 >/dev/null
wait "$attach"
cat > "$work/attached.txt" <<SCRIPT
seek 1000000
wait 2
screenshot $shots/attached.png
quit
SCRIPT
(cd "$work" && win replay attached.kvs --script "$work/attached.txt")
ls -la "$shots"
