"""Run time of two binaries' plans side by side (BENCHMARKS.md, "Heads as an axis of the
projections"): for each fresh export, each binary's plan at BUDGET is made, then the unplanned run and
both plans (all run by the second binary) alternate R times; medians, 2 threads, random inputs of
seed 1. Files as in bench/fresh_peaks.py.

Usage: python3 bench/fresh_times.py OLD NEW [R] [MODEL,DIMS,BUDGET ...]
(DIMS space-separated, e.g. "target/fresh13/convbert_legacy.onnx,S=2048,0.15x"; the cases below
when none is given)
"""
import json
import os
import statistics
import subprocess
import sys

CASES = [("target/fresh11/longt5_legacy.onnx", "S=4096", "0.15x"), ("target/fresh10/bigbird_dynamo.onnx", "", "0.15x"),
         ("target/fresh11/pegasus_x_legacy.onnx", "S=4096", "lowest"), ("target/fresh11/pegasus_x_dynamo.onnx", "S=4096", "lowest")]


def run(args):
    r = subprocess.run(args + ["--json", "--threads", "2", "--random", "--seed", "1"], capture_output=True, text=True, check=True)
    d = json.loads(r.stdout)
    return d["seconds"], d["peak_bytes"]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    old, new = sys.argv[1], sys.argv[2]
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    cases = [tuple(c.split(",")) for c in sys.argv[4:]] or CASES
    print("| file | budget | unplanned | old plan | new plan |\n|---|---|---:|---:|---:|")
    for model, dims, budget in cases:
        if not os.path.exists(model):
            continue
        da = sum([["--dim", x] for x in dims.split()], [])
        runs = {"base": [new, "run", model] + da}
        for tag, b in [("old", old), ("new", new)]:
            out, plan = f"/tmp/fresh_times_{tag}.onnx", f"/tmp/fresh_times_{tag}.json"
            subprocess.run([b, "optimize", model] + da + ["--budget", budget, "-o", out, "--plan-out", plan],
                           capture_output=True)
            runs[tag] = [new, "run", out, "--plan", plan] + da
        times = {k: [] for k in runs}
        peaks = {}
        for _ in range(reps):
            for k, a in runs.items():
                s, p = run(a)
                times[k].append(s)
                peaks[k] = p
        med = {k: statistics.median(v) for k, v in times.items()}
        cell = lambda k: f"{peaks[k] / 2**20:.2f} MiB, {med[k] * 1e3:.0f} ms ({med[k] / med['base']:.2f}x)"
        print(f"| {os.path.basename(model)} | {budget} | {med['base'] * 1e3:.0f} ms | {cell('old')} | {cell('new')} |", flush=True)


if __name__ == "__main__":
    main()
