#!/usr/bin/env python3
"""Calibrates the chunking cost model (`memplan_plan::cost::CostModel`) on this machine, then checks it.

The cost model predicts a node's run time from the kind of work it does and how much (see
crates/plan/src/cost.rs): a curve of seconds per node against work for each kind, at one thread count.
A rewrite's predicted extra time is the time of the nodes it adds less that of the nodes it removes.
This script measures the curves with memplan's own executor, in planned runs (`memplan optimize
--plan-out`, then `memplan run --plan --profile --json`), as chunked models run: per kind, a chain of
16 nodes of one op at sizes from 16 to 16 Mi elements (multiply-adds for the contraction), each node
reading the one before (so a small node's input is in cache, as a chunk's is); the median of the
executor's own per-node timer (`--profile`) over the last 12 nodes is the point of the curve.

* elementwise: Add / Mul with a broadcast row, alternating, over [w/256, 256];
* copy: Transpose of a square [r, r] (w = r^2), alternating with its inverse;
* contraction: MatMul [M, 64] x [64, 64] (work M * 64 * 64);
* other: Softmax over rows of 256 (reductions, normalizations);
* view_seconds: the time of a Reshape (a view) in the same runs;
* per_op: for each op of PER_OP (unary and binary elementwise ops, reductions, normalizations), its time
  per node above its kind's fixed cost (the curve's first point) over the curve's, at 64 Ki, 256 Ki and
  1 Mi elements (the median of the three): 16 nodes
  of the op each reading one input, the median of the last 12. The curves are measured on Add/Mul and
  Softmax, and an exp or an erf per element costs more (`--per-op-only` measures these alone against
  the curves already in --out).

Then it checks the model on the corpus (`--no-check` skips it): for every model (both exports, two
sizes each) with a budget of 0.15 x its estimated peak (or its floor when that is higher), the
predicted extra time of the chosen rewrite (`memplan optimize --json`: chunking.predicted_seconds,
with `--cost-model` the calibration) against the measured one (the chunked planned run's median time
less the unchunked planned run's, alternating rounds), and prints a markdown table with whether each
is within +-30% or +-5 ms.

Every run is the first of its process (`--repeat 1`, the default), as a user's `memplan run` is: it
maps its arena's pages afresh. Later runs in one process may reuse the pages of the run before (the
allocator keeps a freed block below its mapping threshold), so their time hides the first touches
that a lower peak saves.

Writes the calibration as JSON (`--out`, default target/cost_model.json) for `memplan optimize
--cost-model FILE`; `--rust` prints it as the Rust constants of `CostModel::default()`.

Usage: .venv/bin/python bench/calibrate_cost.py [--memplan target/release/memplan] [--threads 2]
       [--repeat 1] [--rounds 5] [--out target/cost_model.json] [--no-check] [--per-op-only] [--only STEM,...]
       [--curves copy,...]
       [--rust]
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chunk_bench  # noqa: E402  (the corpus models' inputs)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "corpus", "models")
MIB = 1024 * 1024
CHAINS = (4, 16)  # nodes per chain: the long one's last 12 nodes give a point, the short one the first touch
SIZES = [4**k for k in range(2, 13)]  # 16 .. 16 Mi elements
MATMUL_K = 64
MATMUL_ROWS = [4**k for k in range(0, 9)]  # 1 .. 65536 rows

# (model stem, [dims at the two sizes]) for the check; both exports of each.
CHECK = [
    ("of3_attn_pair_bias", [{"N": 128}, {"N": 256}]),
    ("of3_pair_transition", [{"N": 128}, {"N": 256}]),
    ("of3_pairformer_block", [{"N": 128}, {"N": 256}]),
    ("of3_token_frame_atoms_gather", [{"N_token": 128, "N_atom": 461}, {"N_token": 256, "N_atom": 922}]),
    ("of3_tri_att_start", [{"N": 128}, {"N": 256}]),
    ("of3_tri_mul_out", [{"N": 128}, {"N": 256}]),
    ("logspace_matrix_chain", [{"n": 8, "t": 256}, {"n": 8, "t": 1024}]),
    ("bert_encoder", [{"B": 1, "S": 512}, {"B": 1, "S": 1024}]),
    ("gpt2_decoder", [{"B": 1, "S": 512}, {"B": 1, "S": 1024}]),
]


def save(model, path):
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)


def graph_model(nodes, x_shape, y_name, y_shape, ini, name):
    g = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(y_name, TensorProto.FLOAT, y_shape)],
        ini,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def chain(kind, w, length):
    """A chain of `length` nodes of `kind` doing work `w` each, and the op types to read in the profile."""
    ini, nodes, prev = [], [], "x"
    if kind == "elementwise":
        cols = min(w, 256)
        shape = [w // cols, cols]
        ini.append(numpy_helper.from_array(np.full((cols,), 1.0001, np.float32), "c"))
        for i in range(length):
            nodes.append(helper.make_node("Add" if i % 2 == 0 else "Mul", [prev, "c"], [f"y{i}"]))
            prev = f"y{i}"
        return graph_model(nodes, shape, prev, shape, ini, kind), ["Add", "Mul"], shape
    if kind == "copy":
        r = int(round(w**0.5))
        shape = [r, r]
        for i in range(length):
            nodes.append(helper.make_node("Transpose", [prev], [f"y{i}"], perm=[1, 0]))
            prev = f"y{i}"
        return graph_model(nodes, shape, prev, shape, ini, kind), ["Transpose"], shape
    if kind == "other":
        cols = min(w, 256)
        shape = [w // cols, cols]
        for i in range(length):
            nodes.append(helper.make_node("Softmax", [prev], [f"y{i}"], axis=-1))
            prev = f"y{i}"
        return graph_model(nodes, shape, prev, shape, ini, kind), ["Softmax"], shape
    if kind == "contraction":
        rows = w // (MATMUL_K * MATMUL_K)
        shape = [rows, MATMUL_K]
        rng = np.random.default_rng(0)
        # Orthogonal-ish weights scaled to keep values bounded along the chain.
        wt = (rng.standard_normal((MATMUL_K, MATMUL_K)) / MATMUL_K**0.5).astype(np.float32)
        ini.append(numpy_helper.from_array(wt, "w"))
        for i in range(length):
            nodes.append(helper.make_node("MatMul", [prev, "w"], [f"y{i}"]))
            prev = f"y{i}"
        return graph_model(nodes, shape, prev, shape, ini, kind), ["MatMul"], shape
    if kind == "view":
        # Reshapes alternating between two shapes: every one a view.
        shape = [64, 64]
        ini += [numpy_helper.from_array(np.array([4096], np.int64), "flat"),
                numpy_helper.from_array(np.array([64, 64], np.int64), "square")]
        for i in range(length):
            nodes.append(helper.make_node("Reshape", [prev, "flat" if i % 2 == 0 else "square"], [f"y{i}"]))
            prev = f"y{i}"
        return graph_model(nodes, shape, prev, shape, ini, kind), ["Reshape"], shape
    raise ValueError(kind)


# Ops whose time per element is measured against their kind's curve (`per_op` of the cost model):
# (op, kind, attributes, second input: a broadcast row constant, or none).
PER_OP = [
    *[(op, "elementwise", {}, False) for op in (
        "Sigmoid", "Exp", "Tanh", "Erf", "Log", "Sqrt", "Reciprocal", "Relu", "Neg", "Abs", "Softplus",
        "Sin", "Cos", "Floor", "Sign", "Softsign", "HardSwish", "Elu", "Selu", "Celu")],
    ("HardSigmoid", "elementwise", {}, False),
    ("LeakyRelu", "elementwise", {"alpha": 0.1}, False),
    *[(op, "elementwise", {}, True) for op in ("Add", "Mul", "Sub", "Div", "Max", "Min")],
    ("Pow", "elementwise", {}, "two"),  # a scalar exponent 2: a layer norm or RMS norm written out
    ("Softmax", "other", {"axis": -1}, False),
    ("LogSoftmax", "other", {"axis": -1}, False),
    ("ReduceMean", "other", {"keepdims": 1}, "axes"),
    ("ReduceSum", "other", {"keepdims": 1}, "axes"),
    ("ReduceMax", "other", {"keepdims": 1}, "axes"),
    ("LayerNormalization", "other", {"axis": -1}, "scale"),
]
PER_OP_SIZES = [4**k for k in (8, 9, 10)]  # 64 Ki .. 1 Mi elements: chunks' sizes


def op_fan(op, attrs, second, w, length):
    """`length` nodes of `op`, each reading the same input `x` (kept in [0.5, inf) by `Abs` and `Add`
    so that every op is defined there), summed at the end; the nodes to read in the profile."""
    cols = min(w, 256)
    shape = [w // cols, cols]
    ini = [numpy_helper.from_array(np.full((cols,), 0.5, np.float32), "half"),
           numpy_helper.from_array(np.full((cols,), 1.0001, np.float32), "c"),
           numpy_helper.from_array(np.array([-1], np.int64), "axes"),
           numpy_helper.from_array(np.ones((cols,), np.float32), "scale"),
           numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    nodes = [helper.make_node("Abs", ["x"], ["xa"]), helper.make_node("Add", ["xa", "half"], ["xp"])]
    outs = []
    for i in range(length):
        ins = ["xp"] + ([] if not second else ["c" if second is True else second])
        nodes.append(helper.make_node(op, ins, [f"y{i}"], name=f"m{i}", **attrs))
        outs.append(f"y{i}")
    # Reduce every output to one row, so that the graph has one small output reading them all.
    red = []
    for i, y in enumerate(outs):
        nodes.append(helper.make_node("ReduceMax", [y, "axes0"], [f"r{i}"], keepdims=0))
        red.append(f"r{i}")
    ini.append(numpy_helper.from_array(np.array([0], np.int64), "axes0"))
    nodes.append(helper.make_node("Sum", red, ["s"]))
    rshape = [1] if second == "axes" else [cols]
    return graph_model(nodes, shape, "s", rshape, ini, op)


def per_op(args, work, curves):
    """`per_op` of the cost model: each op's time per node over its kind's curve at the same work
    (the median over PER_OP_SIZES of the medians over rounds), the executor's own timer."""
    planned = {}
    for op, kind, attrs, second in PER_OP:
        for w in PER_OP_SIZES:
            tag = f"op_{op}_{w}"
            path = os.path.join(work, f"{tag}.onnx")
            save(op_fan(op, attrs, second, w, CHAINS[1]), path)
            out, plan_path, _ = plan(args, path, {}, work, f"{tag}.opt")
            planned[(op, w)] = (out, plan_path)
    times = {k: [] for k in planned}
    for rnd in range(args.rounds):
        for key, (out, plan_path) in planned.items():
            prof = run(args, out, plan_path, {}, profile=True)["node_profile"]
            nodes = [p["seconds"] for p in prof if p["node"].startswith("'m")]
            times[key].append(statistics.median(nodes[CHAINS[0]:]))
        print(f"per-op round {rnd + 1}/{args.rounds} done", file=sys.stderr)
    factors = {}
    for op, kind, _, _ in PER_OP:
        curve = dict((w, s) for w, s in curves[kind])
        fixed = curves[kind][0][1]
        ratios = [(statistics.median(times[(op, w)]) - fixed) / (curve[w] - fixed) for w in PER_OP_SIZES]
        factors[op] = round(statistics.median(ratios), 3)
    return factors


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    # `optimize --budget` exits 3 when the budget is not met; its report is still printed.
    if r.returncode not in (0, 3):
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    return r.stdout


def dim_args(dims):
    return [a for k, v in dims.items() for a in ("--dim", f"{k}={v}")]


def plan(args, model, dims, work, tag, extra=()):
    out, plan_path = os.path.join(work, f"{tag}.onnx"), os.path.join(work, f"{tag}.plan.json")
    rep = json.loads(sh([args.memplan, "optimize", model, *dim_args(dims), "-o", out, "--plan-out", plan_path,
                         "--json", *extra]))
    return out, plan_path, rep


def run(args, out, plan_path, dims, profile=False, npz=None):
    feeds = ["--inputs-npz", npz] if npz else ["--random"]
    cmd = [args.memplan, "run", out, "--plan", plan_path, *dim_args(dims), *feeds, "--repeat",
           str(args.repeat), "--threads", str(args.threads), "--json"]
    if profile:
        cmd.append("--profile")
    return json.loads(sh(cmd))


def calibrate(args, work):
    """The curves: {kind: [(work, seconds per node)]}, the view time and the first-touch cost.

    Each point is the median time of the last 12 nodes of a 16-node chain (the executor's per-node
    timer): the first nodes pay for mapping the
    arena's pages, and a median of nodes does not move with a moment's interference from other work
    on the machine, as a sum does. That first-touch cost is what the 4-node elementwise chain took
    beyond 4 nodes' time, per byte of its arena, at the sizes of at least 1 Mi elements."""
    kinds = args.curves.split(",") if args.curves else ["elementwise", "copy", "other", "contraction"]
    points = {k: {} for k in kinds}
    views, faults = [], []
    cases = [(k, w) for k in ("elementwise", "copy", "other") if k in kinds for w in SIZES]
    if "contraction" in kinds:
        cases += [("contraction", r * MATMUL_K * MATMUL_K) for r in MATMUL_ROWS]
    cases += [("view", 0)]
    planned = {}
    for kind, w in cases:
        for length in CHAINS:
            model, ops, _ = chain(kind, w, length)
            tag = f"cal_{kind}_{w}_{length}"
            path = os.path.join(work, f"{tag}.onnx")
            save(model, path)
            out, plan_path, rep = plan(args, path, {}, work, f"{tag}.opt")
            planned[(kind, w, length)] = (out, plan_path, ops, rep["arena_bytes"])
    short, long_ = CHAINS
    for rnd in range(args.rounds):
        t = {}
        for key, (out, plan_path, ops, _) in planned.items():
            nodes = [p["seconds"] for p in run(args, out, plan_path, {}, profile=True)["node_profile"]
                     if p["op"] in ops]
            t[key] = nodes
        for kind, w in cases:
            per = statistics.median(t[(kind, w, long_)][short:])
            if kind == "view":
                views.append(per)
                continue
            points[kind].setdefault(w, []).append(per)
            if kind == "elementwise" and w >= 1 << 20:
                arena = planned[(kind, w, short)][3]
                faults.append(max(sum(t[(kind, w, short)]) - short * per, 0.0) / arena)
        print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr)
    curves = {k: [[float(w), statistics.median(v)] for w, v in sorted(p.items())] for k, p in points.items()}
    cal = {"threads": args.threads, "view_seconds": statistics.median(views), **curves}
    if faults:
        cal["fault_seconds_per_byte"] = statistics.median(faults)
    return cal


def fmt_curve(name, pts):
    body = ", ".join(f"({w:.1f}, {s:.3e})" for w, s in pts)
    return f"const DEFAULT_{name.upper()}: [(f64, f64); {len(pts)}] = [{body}];"


def check(args, work):
    print()
    print(f"| model | dims | budget | chunk steps | nodes added | unchunked planned run ms | predicted extra ms "
          f"| measured extra ms (chunked − unchunked) | within ±30% or ±5 ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    only = set(args.only.split(",")) if args.only else None
    ok_all = True
    for stem0, sizes in CHECK:
        for stem in (stem0, stem0 + ".legacy"):
            if only and stem0 not in only and stem not in only:
                continue
            model = os.path.join(CORPUS, f"{stem}.onnx")
            for dims in sizes:
                est = json.loads(sh([args.memplan, "estimate", model, *dim_args(dims), "--json"]))
                low = json.loads(sh([args.memplan, "optimize", model, *dim_args(dims), "--budget", "lowest",
                                     "--json", "-o", os.path.join(work, "low.onnx")]))
                budget = max(int(est["peak_bytes"] * 0.15), low["floor"]["bytes"])
                b_out, b_plan, _ = plan(args, model, dims, work, "base")
                c_out, c_plan, rep = plan(args, model, dims, work, "chunked",
                                          ("--budget", f"{budget}B", "--cost-model", args.out))
                npz = None
                if stem0 == "of3_token_frame_atoms_gather":
                    # Its indices must be consistent: the chunking benchmark's inputs.
                    npz = os.path.join(work, "inputs.npz")
                    chunk_bench.make_inputs(stem0, model, dims, npz)
                base, chunked = [], []
                for _ in range(args.rounds):
                    base.append(run(args, b_out, b_plan, dims, npz=npz)["seconds"])
                    chunked.append(run(args, c_out, c_plan, dims, npz=npz)["seconds"])
                ch = rep.get("chunking") or {}
                steps = ch.get("steps", [])
                added = sum(s["added_nodes"] for s in steps)
                pred = ch.get("predicted_seconds", 0.0) * 1e3
                meas = (statistics.median(chunked) - statistics.median(base)) * 1e3
                ok = abs(pred - meas) <= max(5.0, 0.3 * abs(meas))
                ok_all &= ok
                dims_s = " ".join(f"{k}={v}" for k, v in dims.items())
                print(f"| {stem} | {dims_s} | {budget / MIB:.1f} MiB | {len(steps)} | {added} | "
                      f"{statistics.median(base) * 1e3:.1f} | {pred:.1f} | {meas:.1f} | {'yes' if ok else 'NO'} |",
                      flush=True)
    return ok_all


def write(path, cal):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(cal, f, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memplan", default=os.path.join(ROOT, "target", "release", "memplan"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="runs per process (the median's time)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds, a process each; medians over them")
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "cost_model.json"))
    ap.add_argument("--no-check", action="store_true", help="calibrate only")
    ap.add_argument("--check-only", action="store_true", help="check the model in --out, without calibrating")
    ap.add_argument("--curves", help="measure only these curves (comma-separated kinds: elementwise, copy, "
                    "other, contraction) into --out, which holds the others; prints them as Rust constants")
    ap.add_argument("--per-op-only", action="store_true",
                    help="measure only the per-op factors against the curves in --out, and add them there")
    ap.add_argument("--only", help="check only these model stems (comma-separated)")
    ap.add_argument("--rust", action="store_true", help="print the curves as CostModel::default()'s constants")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as work:
        if not args.check_only:
            if args.per_op_only:
                with open(args.out) as f:
                    cal = json.load(f)
            elif args.curves:
                # Some curves measured again, the rest (and the per-op factors) kept from --out.
                with open(args.out) as f:
                    cal = json.load(f)
                cal.update(calibrate(args, work))
                write(args.out, cal)
                for k in args.curves.split(","):
                    print(fmt_curve(k, cal[k]))
                return
            else:
                cal = calibrate(args, work)
                write(args.out, cal)
            cal["per_op"] = per_op(args, work, cal)
            write(args.out, cal)
            print(f"wrote {args.out}")
            for k in ("elementwise", "copy", "other", "contraction"):
                print(f"{k:12s}", " ".join(f"{w:.0f}:{s * 1e6:.1f}µs" for w, s in cal[k]))
            print(f"view         {cal['view_seconds'] * 1e6:.2f} µs")
            print(f"first touch  {cal['fault_seconds_per_byte'] * MIB * 1e3:.3f} ms per MiB")
            print("per op       " + " ".join(f"{op}:{f:.2f}" for op, f in cal["per_op"].items()))
            if args.rust:
                print(f"view_seconds: {cal['view_seconds']:.3e},")
                print(f"fault_seconds_per_byte: {cal['fault_seconds_per_byte']:.3e},")
                for k in ("elementwise", "copy", "contraction", "other"):
                    print(fmt_curve(k, cal[k]))
                ops = sorted(cal["per_op"].items())
                body = ", ".join(f'("{op}", {f})' for op, f in ops)
                print(f"const DEFAULT_PER_OP: [(&str, f64); {len(ops)}] = [{body}];")
        if args.no_check:
            return
        if not check(args, work):
            sys.exit(1)


if __name__ == "__main__":
    main()
