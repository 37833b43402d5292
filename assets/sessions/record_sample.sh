#!/usr/bin/env bash
# Re-records assets/sessions/sample-chat.kvs from the bundled model: a chat workload of six
# requests in a pool too small for all of them (so blocks are shared, preempted and recomputed),
# with the attention of every head of layer 4 captured. Run it after a change to the session
# format; the tests read the file it writes.
#   assets/sessions/record_sample.sh [KVSCOPE]
set -euo pipefail
cd "$(dirname "$0")/../.."
kvscope=${1:-build/kvscope}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$kvscope" workload --kind chat --requests 6 --seed 5 --out "$work/chat.jsonl"
"$kvscope" run --workload "$work/chat.jsonl" --num-blocks 32 --capture-attention "4:*" \
  --record assets/sessions/sample-chat.kvs --force
"$kvscope" check assets/sessions/sample-chat.kvs
