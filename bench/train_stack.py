"""Training step of a 4-block OpenFold3 PairFormer stack: estimate vs measured, recomputation under a
budget, and memplan's derived peak formula beside the hand formula.

For each N: builds the stack (tools/stack_pairformer.py), its training step w.r.t. every weight
(`memplan grad --of loss`), estimates it, runs it (the unoptimized training step), then optimizes it
with `--recompute` to the budget "block boundaries plus one block's activations" (the training-step
peak of ONE block, plus the boundary tensors s and z of the other blocks) and runs the plan: planned
peak, measured peak, wall time (whole process, median of --repeat alternating runs, 2 threads) and
bit-identity of every gradient. Prints a Markdown table.

Usage: .venv/bin/python bench/train_stack.py [--sizes 64 128] [--repeat 3] [--memplan target/release/memplan]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "bench/out/train_stack")


def sh(args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def js(args):
    return json.loads(sh(args).stdout)


def mib(b):
    return f"{b / 2**20:.1f} MiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--memplan", default=os.path.join(REPO, "target/release/memplan"))
    a = ap.parse_args()
    m = a.memplan
    os.makedirs(OUT, exist_ok=True)
    py = sys.executable
    stack = os.path.join(OUT, f"stack{a.blocks}.onnx")
    one = os.path.join(OUT, "stack1.onnx")
    sh([py, os.path.join(REPO, "tools/stack_pairformer.py"), "-k", str(a.blocks), "-o", stack])
    sh([py, os.path.join(REPO, "tools/stack_pairformer.py"), "-k", "1", "-o", one])
    train = os.path.join(OUT, f"stack{a.blocks}_train.onnx")
    train1 = os.path.join(OUT, "stack1_train.onnx")
    sh([m, "grad", stack, "--of", "loss", "-o", train])
    sh([m, "grad", one, "--of", "loss", "-o", train1])
    formula = js([m, "estimate", train, "--dim", "N=128", "--json"])["formula"]
    rows = []
    for n in a.sizes:
        d = f"N={n}"
        est = js([m, "estimate", train, "--dim", d, "--json"])["peak_bytes"]
        fwd = js([m, "estimate", stack, "--dim", d, "--json"])["peak_bytes"]
        one_peak = js([m, "estimate", train1, "--dim", d, "--json"])["peak_bytes"]
        boundary = (n * 64 + n * n * 32) * 4
        budget = one_peak + (a.blocks - 1) * boundary
        opt = os.path.join(OUT, f"stack{a.blocks}_r{n}.onnx")
        plan = os.path.join(OUT, f"stack{a.blocks}_r{n}.json")
        t0 = time.time()
        rep = js([m, "optimize", train, "--dim", d, "--budget", str(budget), "--recompute",
                  "-o", opt, "--plan-out", plan, "--json"])
        opt_s = time.time() - t0
        ref = os.path.join(OUT, f"ref{n}.npz")
        base_t, plan_t = [], []
        base_peak = plan_peak = None
        ident = True
        for i in range(a.repeat):
            t = time.time()
            r = js([m, "run", train, "--dim", d, "--random", "--seed", "1", "--threads", "2",
                    "--out", ref, "--json"])
            base_t.append(time.time() - t)
            base_peak = r["peak_bytes"]
            t = time.time()
            r2 = js([m, "run", opt, "--dim", d, "--plan", plan, "--random", "--seed", "1",
                     "--threads", "2", "--compare", ref, "--exact", "--json"])
            plan_t.append(time.time() - t)
            plan_peak = r2["peak_bytes"]
            ident = ident and not r2.get("mismatches")
        steps = len((rep.get("recompute") or {}).get("steps", []))
        rows.append(
            f"| {n} | {mib(fwd)} | {mib(est)} | {mib(base_peak)} | {mib(budget)} | "
            f"{mib(rep['peak_bytes_after'])} | {mib(plan_peak)} | {steps} | "
            f"{statistics.median(plan_t) / statistics.median(base_t):.2f}x | "
            f"{'yes' if ident else 'NO'} | {opt_s:.0f} s |"
        )
    print(f"{a.blocks}-block PairFormer stack, training step w.r.t. every weight; memplan formula: {formula['text']}; exact: {formula['along']} bytes\n")
    print("| N | forward peak | training estimate | training measured | budget | planned (recompute) | "
          "measured (planned run) | values recomputed | time vs unoptimized | gradients bit-identical | optimize time |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
