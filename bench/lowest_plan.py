#!/usr/bin/env python3
"""The lowest plan chunking reaches, run against the unoptimized model.

For each model: `memplan optimize MODEL --budget lowest` writes the rewritten ONNX and its plan; then the
unoptimized model (`memplan run`, no plan) and the optimized one (`memplan run OUT --plan PLAN`) run
alternately, --repeat times each, in fresh processes, on the same seeded random inputs (`--random --seed
1`) with --threads threads. Every optimized run is compared bit for bit (`--compare REF --exact`) with an
unoptimized run's outputs. The table gives the planned and measured peaks (the measured one is the same
every run), the floor (resident weights and inputs plus the outputs, which no plan goes below), the
median run time (`seconds` of `memplan run --json`) and the median whole-process wall time of each, and
their ratios.

Usage: .venv/bin/python bench/lowest_plan.py [--memplan target/release/memplan] [--repeat 5]
       [--threads 2] [--dim N=512] MODEL.onnx [MODEL.onnx ...]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 1024 * 1024


def run_json(cmd):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode not in (0,):
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
    return json.loads(p.stdout), wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--memplan", default=os.path.join(ROOT, "target", "release", "memplan"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dim", action="append", default=[], help="NAME=VALUE (repeatable)")
    a = ap.parse_args()
    dims = [x for d in a.dim for x in ("--dim", d)]
    inputs = ["--random", "--seed", "1", "--threads", str(a.threads)]
    print("| model | dims | peak unoptimized | floor | lowest planned | measured | ratio | run time unoptimized"
          " | optimized | ratio | wall unoptimized | optimized | ratio | outputs | optimize time |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    with tempfile.TemporaryDirectory() as work:
        for model in a.models:
            stem = os.path.basename(model)[: -len(".onnx")]
            out, plan, ref = (os.path.join(work, f"{stem}{s}") for s in (".onnx", ".plan.json", ".ref.npz"))
            rep, opt_wall = run_json([a.memplan, "optimize", model, *dims, "--budget", "lowest", "-o", out,
                                      "--plan-out", plan, "--json"])
            base, _ = run_json([a.memplan, "run", model, *dims, *inputs, "--out", ref, "--json"])
            runs = {"u": [], "o": []}
            identical = True
            for _ in range(a.repeat):
                r, w = run_json([a.memplan, "run", model, *dims, *inputs, "--json"])
                runs["u"].append((r["seconds"], w))
                r, w = run_json([a.memplan, "run", out, "--plan", plan, *dims, *inputs, "--compare", ref,
                                 "--exact", "--json"])
                runs["o"].append((r["seconds"], w))
                identical &= r.get("compared", False) and not r["mismatches"]
                measured = r["peak_bytes"]
            med = {k: (statistics.median(s for s, _ in v), statistics.median(w for _, w in v))
                   for k, v in runs.items()}
            planned = rep["peak_bytes_after"]
            print(f"| {stem} | {' '.join(a.dim)} | {base['peak_bytes'] / MIB:.1f} MiB "
                  f"| {rep['floor']['bytes'] / MIB:.1f} MiB | {planned / MIB:.2f} MiB | {measured / MIB:.2f} MiB "
                  f"| {planned / base['peak_bytes']:.3f} "
                  f"| {med['u'][0]:.2f} s | {med['o'][0]:.2f} s | {med['o'][0] / med['u'][0]:.2f} "
                  f"| {med['u'][1]:.2f} s | {med['o'][1]:.2f} s | {med['o'][1] / med['u'][1]:.2f} "
                  f"| {'bit-identical' if identical else 'DIFFERENT'} | {opt_wall:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
