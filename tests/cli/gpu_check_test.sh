#!/bin/sh
# .ci/gpu-check where there is no GPU (CI, laptops): `run` must say in one line which checks could
# not run and exit 1 within seconds, refuse a results folder that holds anything, and refuse an
# unknown tier; on a machine with a GPU the first check is left to `.ci/gpu-check run` itself.
# Usage: gpu_check_test.sh SOURCE_DIR
set -u
src="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$src/.ci/gpu-check" run bogus >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] || fail "an unknown tier should exit 2"
[ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "tier 'bogus'" "$tmp/err" || fail "tier: $(cat "$tmp/err")"

mkdir "$tmp/full" && echo keep >"$tmp/full/results.json"
"$src/.ci/gpu-check" run core "$tmp/nokit" "$tmp/full" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] || fail "a results folder holding files should be refused with exit 2"
grep -q "is not empty" "$tmp/err" || fail "non-empty folder: $(cat "$tmp/err")"
[ "$(cat "$tmp/full/results.json")" = keep ] || fail "the user's file was changed"

if nvidia-smi -L >/dev/null 2>&1; then
    echo "a GPU is here: the no-GPU path is not checked"
    exit 0
fi
start=$(date +%s)
"$src/.ci/gpu-check" run all "$tmp/nokit" "$tmp/out1" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] || fail "without a GPU run should exit 1, got $rc"
[ $(($(date +%s) - start)) -le 20 ] || fail "without a GPU run should end within seconds"
grep -q "no NVIDIA GPU here" "$tmp/err" || fail "no reason given: $(cat "$tmp/err")"
grep -q "racecheck" "$tmp/err" || fail "the extended tier's checks are not named"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "more than one line on stderr: $(cat "$tmp/err")"
[ -f "$tmp/out1/logs.tar.gz" ] || fail "no logs left in the results folder"
echo "ok"
