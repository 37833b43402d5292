#!/usr/bin/env bash
# Window responsiveness, measured by the window itself (--frame-stats): per-frame CPU time to
# build the frame, time to render it (to glFinish), draw calls and vertices, for
#   1. a 100 000-block pool (2 000 requests), a block selected and hovered;
#   2. a 32 768-token attention heatmap, zoomed out, in and out again;
#   3. scrubbing a 100 000-step recording of the bundled model: one random seek per frame.
# Under Xvfb the GL work runs on the CPU (Mesa llvmpipe), so render times are the software
# rasterizer's; the draw-call and vertex counts are what a GPU would get.
#   bench/gui.sh [WIDTHxHEIGHT]
set -euo pipefail
size=${1:-1920x1080}
kvscope=${KVSCOPE:-build/kvscope}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export XDG_CONFIG_HOME=$out  # default layout, no saved settings
run() { xvfb-run -a -s "-screen 0 ${size}x24" "$kvscope" "$@" --width "${size%x*}" --height "${size#*x}"; }
report() {
  python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[2]))
f = lambda k: "%6.1f %6.1f %6.1f" % (d[k]["median"], d[k]["p95"], d[k]["max"])
rest = sorted(d["per_frame_ms"][1:])  # the first frame opens the session
build = sorted(d["per_frame_build_ms"][1:])
print("%-20s %4d  %6.1f %6.1f %6.1f  %s  %6.1f %6.1f %6.1f  %7.1f  %5d %6d" % (sys.argv[1], d["frames"],
      build[len(build) // 2], build[int(0.95 * len(build))], build[-1], f("render_ms"), rest[len(rest) // 2],
      rest[int(0.95 * len(rest))], rest[-1], d["per_frame_ms"][0], d["draw_calls"]["median"], d["vertices"]["median"]))
PY
}

build/bench/make_big_session blocks "$out/blocks.kvs"
build/bench/make_big_session heatmap "$out/heat.kvs"
python3 - "$out/long.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(402):
        f.write(json.dumps({"id": "l%d" % i, "arrival_step": i * 250, "prompt_ids": [1, 2 + i % 100], "max_tokens": 249}) + "\n")
PY
"$kvscope" run --workload "$out/long.jsonl" --num-blocks 64 --record "$out/long.kvs" >/dev/null 2>&1

printf 'seek 1999\nwait 5\nselect-block 50000\nhover-block 77777\nwait 60\nquit\n' > "$out/blocks.txt"
printf 'heatmap 0 0 0\nwait 10\nzoom 8\nwait 10\nzoom 64\nwait 10\nzoom 1\nwait 10\nquit\n' > "$out/heat.txt"
python3 - "$out/scrub.txt" <<'PY'
import random, sys
random.seed(1)
with open(sys.argv[1], "w") as f:
    f.write("wait 5\n")
    for _ in range(100):
        f.write("seek %d\n" % random.randrange(100000))
    f.write("quit\n")
PY
run replay "$out/blocks.kvs" --script "$out/blocks.txt" --frame-stats "$out/blocks.json" 2>/dev/null
run replay "$out/heat.kvs" --script "$out/heat.txt" --frame-stats "$out/heat.json" 2>/dev/null
run replay "$out/long.kvs" --script "$out/scrub.txt" --frame-stats "$out/scrub.json" 2>/dev/null

echo "window ${size}; ms as median / p95 / max; frame = build + render; the first frame (opening the session) is apart"
printf '%-20s %4s  %-20s  %-20s  %-20s  %7s  %5s %6s\n' case n "build (CPU)" "render (llvmpipe)" "frame" "first" draws verts
report "100k blocks" "$out/blocks.json"
report "32k x 32k heatmap" "$out/heat.json"
report "scrub 100k steps" "$out/scrub.json"
