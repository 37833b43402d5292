#!/bin/sh
# kvscope attach's throughput: one `kvscope publish` process sending RANKS ranks of the sample
# run's blocks (vLLM map format, integer hashes, batches of BATCH events) at RATE events/s per
# rank for SECONDS s, on loopback, against `kvscope attach` following every rank (with replay
# sockets) and recording to a .kvs. Prints what was sent and how fast, what attach took in,
# recorded and lost (every kind of loss it reports), its CPU time per event, and the bytes per
# event on disk.
#
#   bench/attach_throughput.sh                 # 8 ranks x 125 000 events/s for 6 s
#   RATE=0 bench/attach_throughput.sh          # unpaced: as fast as the publisher can send
#
# Both processes share the machine: on a 2-core VM the publisher, attach's receive thread,
# ZeroMQ's I/O threads and the recorder's writer all compete for the same two cores.
set -eu
KVSCOPE=${KVSCOPE:-./build/kvscope}
RANKS=${RANKS:-8}
RATE=${RATE:-125000}
SECONDS_SENDING=${SECONDS:-6}
BATCH=${BATCH:-64}
PORT=${PORT:-18000}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

EP=""
RP=""
r=0
while [ "$r" -lt "$RANKS" ]; do
    EP="$EP tcp://127.0.0.1:$((PORT + r))"
    RP="$RP tcp://127.0.0.1:$((PORT + 100 + r))"
    r=$((r + 1))
done
# attach follows from before the publisher binds until after it has sent (and answered the
# replay requests of the last gaps); its CPU time over the idle parts is negligible.
# shellcheck disable=SC2086
/usr/bin/time -f "%U %S %M" -o "$out/attach.time" "$KVSCOPE" attach $EP --replay $RP \
    --duration $((SECONDS_SENDING + 5)) --record "$out/tp.kvs" --summary-json "$out/tp.json" \
    > "$out/attach.out" 2> "$out/attach.err" &
attach=$!
/usr/bin/time -f "%U %S %M" -o "$out/publish.time" "$KVSCOPE" publish \
    --endpoint "tcp://127.0.0.1:$PORT" --replay "tcp://127.0.0.1:$((PORT + 100))" \
    --ranks "$RANKS" --rate "$RATE" --batch "$BATCH" --duration "$SECONDS_SENDING" \
    --wait-ms 1000 > "$out/publish.out" 2> "$out/publish.err"
wait "$attach" || { cat "$out/attach.err"; exit 1; }

python3 - "$out" "$RANKS" "$RATE" <<'EOF'
import json, os, sys
out, ranks, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
pub = {l[:20].strip(): l[20:].strip() for l in open(f"{out}/publish.out") if l.strip()}
sent = int(pub["events sent"].split()[0])
sending = float(pub["seconds sending"])
j = json.load(open(f"{out}/tp.json"))
au, asys, arss = open(f"{out}/attach.time").read().split()
pu, psys, prss = open(f"{out}/publish.time").read().split()
cpu = float(au) + float(asys)
ev = j["events"]
lost = {k: sum(r[k] for r in j["ranks"]) for k in
        ("gaps", "gaps_filled", "batches_lost", "events_lost", "batches_after_end",
         "malformed_frames", "overflow")}
size = os.path.getsize(f"{out}/tp.kvs")
print(f"machine              {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the end")
print(f"asked                {ranks} ranks x {rate:.0f} events/s" if rate > 0 else
      f"asked                {ranks} ranks, unpaced")
print(f"publish sent         {sent} events in {sending:.2f} s: {sent / sending:.0f} events/s "
      f"(CPU {float(pu) + float(psys):.2f} s)")
print(f"attach took in       {ev} events ({ev / sent * 100 if sent else 0:.2f}% of those sent), "
      f"first to last batch in {j['active_seconds']:.2f} s: "
      f"{j['events_per_active_second']:.0f} events/s")
cut = any(r["after_end_cut_short"] for r in j["ranks"])
print("attach losses        " + ", ".join(f"{k} {v}" for k, v in lost.items()) +
      (" (at least: more were queued when attach stopped counting)" if cut else ""))
print(f"attach CPU           {au} s user + {asys} s system: {cpu / ev * 1e6 if ev else 0:.2f} us "
      f"per event ({cpu / j['active_seconds'] if j['active_seconds'] else 0:.2f} cores while "
      f"active), peak RSS {int(arss) // 1024} MB")
print(f"on disk              {size} bytes: {size / ev if ev else 0:.1f} bytes per event")
EOF
