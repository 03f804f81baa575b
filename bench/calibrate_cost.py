#!/usr/bin/env python3
"""Calibrates the chunking cost model (`memplan_plan::chunk::CostModel`) on this machine, then checks it.

The cost model predicts what a chunking rewrite adds to a run: a fixed cost per node added (dispatch,
output placement, thread fan-out of a kernel on a small slice) and a cost per byte copied (slices that
are not views, concatenations not assembled in place). Both are measured here with memplan's own
executor, in planned runs (`memplan optimize --plan-out` then `memplan run --plan`), as chunked
models are run:

* node cost: one Add over x [R, E] against the same Add chunked by hand the way the rewrite chunks
  it: R row Slices (views: the leading axis), R Adds of one row each, a Concat along axis 0
  (assembled in place by the plan); no byte is copied and the arithmetic is the same, so the
  difference of the median times over the 2R nodes added is the cost of a node on a slice large
  enough for its kernel to fan out over the threads (E = 64 Ki floats);
* copy bandwidth: x [R, 2C] (64 MiB) split in two along axis 1 by two Slice nodes (not views: the
  axis is not the leading one) and put back by a Concat along axis 1 (not assembled in place, for
  the same reason); bytes copied = both slices plus the concatenation, the time less three nodes.

Then, with the calibrated model (`--cost-model`), for a few corpus models and budgets it compares the
predicted extra time (`memplan optimize --budget --json`: chunking.predicted_seconds) with the
measured one: the chunked planned run's median time minus the unchunked planned run's.

Writes the calibration as JSON (`--out`, default target/cost_model.json): pass it to `memplan
optimize --cost-model FILE` (the built-in defaults are this script's numbers on the development
machine).

Usage: .venv/bin/python bench/calibrate_cost.py [--memplan target/release/memplan] [--threads 2]
       [--repeat 15] [--out target/cost_model.json] [--no-check]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "corpus", "models")
MIB = 1024 * 1024

# (model stem, dims, budget as a fraction of the unchunked simulated peak) for the check.
CHECK = [
    ("of3_tri_att_start", {"N": 192}, 0.2),
    ("of3_pairformer_block", {"N": 128}, 0.2),
    ("logspace_matrix_chain", {"n": 8, "t": 256}, 0.2),
]


def save(model, path):
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)


def add(rows, cols, chunked, path):
    """y = x + c over x [rows, cols]; `chunked`: row by row (Slice, Add, then one Concat)."""
    ini = [numpy_helper.from_array(np.full((1, cols), 0.5, np.float32), "c"),
           numpy_helper.from_array(np.array([0], np.int64), "ax")]
    if chunked:
        nodes, parts = [], []
        for i in range(rows):
            ini += [numpy_helper.from_array(np.array([i], np.int64), f"s{i}"),
                    numpy_helper.from_array(np.array([i + 1], np.int64), f"e{i}")]
            nodes.append(helper.make_node("Slice", ["x", f"s{i}", f"e{i}", "ax"], [f"x{i}"]))
            nodes.append(helper.make_node("Add", [f"x{i}", "c"], [f"y{i}"]))
            parts.append(f"y{i}")
        nodes.append(helper.make_node("Concat", parts, ["y"], axis=0))
    else:
        nodes = [helper.make_node("Add", ["x", "c"], ["y"])]
    g = helper.make_graph(
        nodes,
        "add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, cols])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, cols])],
        ini,
    )
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)


def split_concat(rows, cols, path):
    """x [rows, 2*cols] -> Slice halves along axis 1 -> Concat along axis 1."""
    ini = [
        numpy_helper.from_array(np.array(v, np.int64), n)
        for n, v in [("s0", [0]), ("e0", [cols]), ("s1", [cols]), ("e1", [2 * cols]), ("ax", [1])]
    ]
    nodes = [
        helper.make_node("Slice", ["x", "s0", "e0", "ax"], ["a"]),
        helper.make_node("Slice", ["x", "s1", "e1", "ax"], ["b"]),
        helper.make_node("Concat", ["a", "b"], ["y"], axis=1),
    ]
    shape = [rows, 2 * cols]
    g = helper.make_graph(
        nodes,
        "split_concat",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        ini,
    )
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    # `optimize --budget` exits 3 when the budget is not met; its report is still printed.
    if r.returncode not in (0, 3):
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    return r.stdout


def dim_args(dims):
    return [a for k, v in dims.items() for a in ("--dim", f"{k}={v}")]


def planned_seconds(args, model, dims, work, tag, extra=()):
    """Plans `model` (optionally with `extra` optimize flags) and returns the planned run's median time
    and the optimize report."""
    out, plan = os.path.join(work, f"{tag}.onnx"), os.path.join(work, f"{tag}.plan.json")
    rep = json.loads(
        sh([args.memplan, "optimize", model, *dim_args(dims), "-o", out, "--plan-out", plan, "--json", *extra])
    )
    r = json.loads(
        sh([args.memplan, "run", out, "--plan", plan, *dim_args(dims), "--random", "--repeat",
            str(args.repeat), "--threads", str(args.threads), "--json"])
    )
    return r["seconds"], rep


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memplan", default=os.path.join(ROOT, "target", "release", "memplan"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians over them")
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "cost_model.json"))
    ap.add_argument("--no-check", action="store_true", help="calibrate only")
    args = ap.parse_args()

    arows, acols = 128, 65536  # x: 32 MiB, 128 chunks of 256 KiB
    rows, cols = 2048, 4096  # x: 2048 x 8192 floats = 64 MiB
    with tempfile.TemporaryDirectory() as work:
        paths = {n: os.path.join(work, f"{n}.onnx") for n in ("whole", "chunked", "copy")}
        add(arows, acols, False, paths["whole"])
        add(arows, acols, True, paths["chunked"])
        split_concat(rows, cols, paths["copy"])
        t = {n: [] for n in paths}
        for _ in range(args.rounds):
            for n, p in paths.items():
                t[n].append(planned_seconds(args, p, {}, work, n)[0])
        med = {n: statistics.median(v) for n, v in t.items()}
        node_s = max(med["chunked"] - med["whole"], 1e-9) / (2 * arows)
        copied = 2 * rows * 2 * cols * 4  # both slices, then the concatenation
        copy_s = max(med["copy"] - 3 * node_s, 1e-9)
        cal = {"node_seconds": node_s, "copy_bytes_per_second": copied / copy_s}
        print(f"node cost      {node_s * 1e6:.2f} µs per node (Add over [{arows}, {acols}]: "
              f"{med['whole'] * 1e3:.2f} ms whole, {med['chunked'] * 1e3:.2f} ms in {arows} chunks)")
        print(f"copy bandwidth {cal['copy_bytes_per_second'] / 1e9:.2f} GB/s "
              f"({copied / MIB:.0f} MiB copied in {copy_s * 1e3:.2f} ms)")
        with open(args.out, "w") as f:
            json.dump(cal, f, indent=2)
            f.write("\n")
        print(f"wrote {args.out}")
        if args.no_check:
            return

        print()
        print(f"| model | dims | budget | chunk steps | nodes added | unchunked planned run ms | predicted extra ms "
              f"| measured extra ms (chunked − unchunked, {args.threads} threads, median of {args.repeat} × "
              f"{args.rounds} rounds) |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for stem, dims, frac in CHECK:
            model = os.path.join(CORPUS, f"{stem}.onnx")
            est = json.loads(sh([args.memplan, "estimate", model, *dim_args(dims), "--json"]))
            peak = est["peak_bytes"]
            budget = f"{int(peak * frac)}B"
            base, chunked = [], []
            for _ in range(args.rounds):
                b, _ = planned_seconds(args, model, dims, work, "base")
                c, rep = planned_seconds(args, model, dims, work, "chunked",
                                         ("--budget", budget, "--cost-model", args.out))
                base.append(b)
                chunked.append(c)
            ch = rep.get("chunking") or {}
            steps = ch.get("steps", [])
            added = sum(s["added_nodes"] for s in steps)
            dims_s = " ".join(f"{k}={v}" for k, v in dims.items())
            meas = (statistics.median(chunked) - statistics.median(base)) * 1e3
            print(f"| {stem} | {dims_s} | {frac:.2f} × peak | {len(steps)} | {added} | "
                  f"{statistics.median(base) * 1e3:.1f} | {ch.get('predicted_seconds', 0) * 1e3:.1f} | {meas:.1f} |")


if __name__ == "__main__":
    main()
