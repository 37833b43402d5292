#!/usr/bin/env python3
"""What `.ci/gpu-check run` measured, in one JSON and a short table (the table is printed last,
since only the end of the output of a lent machine comes back).

    .ci/gpu_check_results.py LOGS_DIR RESULTS_JSON

Reads LOGS_DIR/steps.tsv (one line per step: name, status, seconds, note), the JUnit XML of each
test binary, and the JSON the benchmarks wrote (bench_kernels.json, vs_sdpa.json, bench_gpu.json,
hf_eager.json, record_summary.json). A file that is missing or unreadable is noted, never fatal:
the summary of a run that half failed is what is most needed.
"""
import json
import os
import sys
import xml.etree.ElementTree as ET


def load_json(path, notes):
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        notes.append(f"{os.path.basename(path)}: {e}")
        return None


def junit(path, notes):
    if not os.path.exists(path):
        return None
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        notes.append(f"{os.path.basename(path)}: {e}")
        return None
    suites = [root] if root.tag == "testsuite" else list(root)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failed, skipped = [], []
    for s in suites:
        for case in s.iter("testcase"):
            counts["tests"] += 1
            name = f"{case.get('classname')}.{case.get('name')}"
            if case.find("failure") is not None:
                counts["failures"] += 1
                failed.append(name)
            elif case.find("skipped") is not None or case.get("result") == "skipped":
                counts["skipped"] += 1
                skipped.append(name)
    counts["failed"] = failed
    counts["skipped_names"] = skipped
    return counts


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    logs, out_path = sys.argv[1], sys.argv[2]
    notes = []
    steps = []
    tsv = os.path.join(logs, "steps.tsv")
    if os.path.exists(tsv):
        with open(tsv) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 3:
                    steps.append({"step": parts[0], "status": parts[1], "seconds": parts[2],
                                  "note": parts[3] if len(parts) > 3 else ""})
    machine = ""
    if os.path.exists(os.path.join(logs, "machine.log")):
        with open(os.path.join(logs, "machine.log"), errors="replace") as f:
            machine = f.read()
    results = {"machine": machine, "steps": steps, "tests": {}, "notes": notes}
    for t in ("test_kernels", "test_engine_cuda", "test_probes_gpu"):
        results["tests"][t] = junit(os.path.join(logs, t + ".xml"), notes)
    for key in ("bench_kernels", "vs_sdpa", "bench_gpu", "hf_eager", "record_summary",
                "bench_kernels_full", "vs_sdpa_full", "bench_gpu_sweep"):
        results[key] = load_json(os.path.join(logs, key + ".json"), notes)

    lines = []
    say = lines.append
    say("== gpu-check summary")
    for line in machine.splitlines()[:2]:
        say("  " + line)
    say(f"  {'step':22} {'status':14} {'seconds':>8}")
    for s in steps:
        say(f"  {s['step']:22} {s['status']:14} {s['seconds']:>8}")
    for name, t in results["tests"].items():
        if t:
            say(f"  {name}: {t['tests']} tests, {t['failures']} failed, {t['skipped']} skipped"
                + (": " + ", ".join(t["failed"][:6]) if t["failed"] else ""))

    targets = {}
    copy = None
    bg = results["bench_gpu"]
    if isinstance(bg, dict):
        devices = bg.get("devices") or []
        if devices:
            copy = devices[0].get("copy_gbps")
            say(f"  copy bandwidth: {copy:.0f} GB/s (read + written), {devices[0].get('name')}")
    sdpa = {}
    vs = results["vs_sdpa"]
    if isinstance(vs, dict):
        for r in vs.get("rows", []):
            sdpa[(r["kind"], r["model"], r["dtype"], r["batch"], r["q_len"], r["kv_len"])] = r
    bk = results["bench_kernels"]
    if isinstance(bk, list):
        say("  paged decode attention, llama-3-8b shape, bf16, block 16 (GB/s, of copy; SDPA GB/s):")
        for r in bk:
            if r["kind"] not in ("decode", "decode-tiled"):
                continue
            s = sdpa.get(("decode", r["model"], r["dtype"], r["batch"], r["q_len"], r["kv_len"]))
            extra = f"; SDPA {s['torch_gbps']:.0f}" if s and "torch_gbps" in s else ""
            # The tiled kernel's rows (kept to compare) and other models' shapes say so.
            label = {"decode-tiled": " tiled"}.get(r["kind"], "") + (
                f" {r['model']}" if r["model"] != "llama-3-8b" else "")
            say(f"    {r['dtype']:4} b{r['batch']:<3} ctx {r['kv_len']:>6}: {r['gbps']:7.0f} GB/s "
                f"{100 * r['gbps'] / r['copy_gbps']:4.0f}%{extra}{label}")
            if (r["kind"] == "decode" and r["model"] == "llama-3-8b" and r["dtype"] == "bf16"
                    and r["batch"] == 8 and r["kv_len"] == 16384):
                targets["decode attention b8 16k >= 85% of copy"] = (
                    r["gbps"] >= 0.85 * r["copy_gbps"], f"{100 * r['gbps'] / r['copy_gbps']:.0f}%")
                if s and "torch_gbps" in s:
                    targets["decode attention b8 16k >= SDPA"] = (
                        r["gbps"] >= s["torch_gbps"], f"{r['gbps']:.0f} vs {s['torch_gbps']:.0f} GB/s")
    if isinstance(bg, dict):
        for r in bg.get("decode", []):
            share = r["tokens_per_second"] / r["bound_tokens_per_second"]
            say(f"  decode synthetic:llama-3-8b b{r['batch']} ctx {r['context']}: "
                f"{r['tokens_per_second']:.1f} tokens/s, bound {r['bound_tokens_per_second']:.1f} "
                f"({100 * share:.0f}%)")
            if r["batch"] == 1:
                targets["8B batch-1 decode >= 75% of bound"] = (share >= 0.75, f"{100 * share:.0f}%")
        po = bg.get("probe_overhead")
        if po:
            tps = po["tokens_per_second"]
            say("  probes (tokens/s, cost): " + ", ".join(
                f"{k} {v:.1f} ({100 * po['cost'][k]:+.1f}%)" for k, v in tps.items()))
            ratio = po.get("dram_sampled_over_expected", 0)
            say(f"  DRAM sampled / bytes the steps must move: {ratio:.3f}")
            vs = po.get("cost_vs_launches", {})
            if vs:
                say("  probes' cost against decode by launches: " + ", ".join(
                    f"{k} {100 * v:+.1f}%" for k, v in vs.items() if k.startswith("trace")))
            cost = po["cost"].get("trace+dram", 1)
            own = vs.get("trace+dram")
            targets["trace + DRAM sampling cost <= 3%"] = (
                cost <= 0.03, f"{100 * cost:.1f}%" + (f" ({100 * own:.1f}% vs launches)"
                                                      if own is not None else ""))
            targets["sampled DRAM within 10% of expected"] = (abs(ratio - 1) <= 0.10, f"{ratio:.3f}")
            for p in po.get("problems", []):
                say("    problem: " + p)
    hf = results["hf_eager"]
    if isinstance(hf, dict):
        say(f"  HF eager {hf['shape']} b{hf['batch']} ctx {hf['context']}: "
            f"{hf['tokens_per_second']:.1f} tokens/s (transformers {hf['transformers']})")
    if targets:
        say("  targets:")
        for name, (ok, value) in targets.items():
            say(f"    {'PASS' if ok else 'MISS'}  {name}: {value}")
    results["targets"] = {k: {"met": v[0], "value": v[1]} for k, v in targets.items()}
    for n in notes:
        say("  note: " + n)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
