#!/usr/bin/env python3
"""Check memplan end to end on exported files it has not seen (bench/fresh_exports.py's output).

For every file named in DIR/dims.json ({"FILE.onnx": {"small": {DIM: V}, "large": {DIM: V}}}) and
each of its two sizes:
  1. inputs: seeded standard-normal floats; integer inputs in [0, --int-high) (ones for a name with
     "mask" in it), written to an .npz so every run below reads the same values;
  2. `memplan estimate` and `memplan run` (unplanned): the estimate must be the measured peak;
  3. at the small size, onnxruntime runs the same inputs; outputs compared (rtol 1e-4, atol 1e-5);
  4. `memplan optimize --budget lowest`, then `--budget B` with B = 0.15 x the estimate (or the floor
     the lowest plan reports, where that is higher); each plan is
     run (`memplan run OUT --plan PLAN --compare REF --exact`): measured = planned, bit-identical.
  5. run time of the unplanned and the 0.15x run, --repeat alternating runs each, medians.
Prints one markdown table row per file and size; a problem in any step is a row's `problems` cell,
never a stop. A missed 0.15x budget whose floor is below it is a problem, and so is a `lowest` plan
more than 0.5% above the 0.15x one.

Usage: .venv/bin/python bench/fresh_check.py DIR [--memplan target/release/memplan] [--only NAME]
       [--repeat 3] [--threads 2] [--sizes small,large]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 1024 * 1024


def sh(cmd, ok=(0,)):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    out = None
    if p.stdout.strip().startswith("{"):
        try:
            out = json.loads(p.stdout)
        except json.JSONDecodeError:
            out = None
    err = None if p.returncode in ok else f"exit {p.returncode}: {(p.stderr or p.stdout).strip().splitlines()[-1:]}"
    return p.returncode, out, err, wall


def make_inputs(model, dims, int_high, path):
    import onnx
    m = onnx.load(model, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    rng = np.random.default_rng(1)
    arrays = {}
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = []
        for d in tt.shape.dim:
            if d.dim_param in dims:
                shape.append(dims[d.dim_param])
            elif d.dim_param:
                # An exporter's dim expression (`256*h`) of the given symbols.
                try:
                    shape.append(int(eval(d.dim_param, {"__builtins__": {}}, dict(dims))))
                except Exception:  # noqa: BLE001
                    raise SystemExit(f"{model}: input {vi.name} dim {d.dim_param} not given by {dims}")
            else:
                shape.append(d.dim_value)
        dt = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(dt, np.floating):
            arrays[vi.name] = rng.standard_normal(shape).astype(dt)
        elif dt == np.bool_:
            arrays[vi.name] = np.ones(shape, dtype=dt)
        elif "mask" in vi.name:
            arrays[vi.name] = np.ones(shape, dtype=dt)
        else:
            arrays[vi.name] = rng.integers(0, int_high, size=shape).astype(dt)
    np.savez(path, **arrays)
    return arrays


def ort_compare(model, inputs, ref_path, threads):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    outs = s.run(None, inputs)
    ref = np.load(ref_path)
    worst = 0.0
    for o, v in zip(s.get_outputs(), outs):
        r = ref[o.name]
        if r.shape != v.shape:
            return f"ort shape {o.name} {v.shape} vs {r.shape}"
        if v.dtype.kind == "f":
            bad = ~np.isclose(r, v, rtol=1e-4, atol=1e-5, equal_nan=True)
            if bad.any():
                return f"ort differs at {o.name}: max abs {np.nanmax(np.abs(r.astype(np.float64) - v)):.3g}"
            worst = max(worst, float(np.nanmax(np.abs(r.astype(np.float64) - v), initial=0.0)))
        elif not np.array_equal(r, v):
            return f"ort differs at {o.name} (integers)"
    return f"ort max abs {worst:.2g}"


def check(a, model, size, dims, tmp):
    mp = a.memplan
    dimargs = [x for k, v in dims.items() for x in ("--dim", f"{k}={v}")]
    row = {"model": os.path.basename(model), "size": size, "dims": " ".join(f"{k}={v}" for k, v in dims.items())}
    problems = []
    npz = os.path.join(tmp, "in.npz")
    ref = os.path.join(tmp, "ref.npz")
    inputs = make_inputs(model, dims, a.int_high, npz)
    run = [mp, "run", "--inputs-npz", npz, "--threads", str(a.threads), "--json"] + dimargs
    rc, est, err, _ = sh([mp, "estimate", model, "--json"] + dimargs)
    if err:
        problems.append(f"estimate {err}")
    rc, base, err, _ = sh(run[:2] + [model] + run[2:] + ["--out", ref])
    if err:
        problems.append(f"run {err}")
        row["problems"] = "; ".join(problems)
        return row
    peak = base["peak_bytes"]
    row["peak"] = peak
    if est and est.get("peak_bytes", est.get("peak")) != peak:
        problems.append(f"estimate {est.get('peak_bytes', est.get('peak'))} != measured {peak}")
    if size == "small":
        try:
            row["ort"] = ort_compare(model, inputs, ref, a.threads)
        except Exception as e:  # noqa: BLE001 - a row's cell, not a stop
            row["ort"] = f"ort error {str(e).splitlines()[0][:120]}"
    floor, reached = 0, {}
    for label in ("lowest", "0.15x"):
        budget = "lowest" if label == "lowest" else f"{max(int(peak * 0.15), floor)}B"
        out, plan = os.path.join(tmp, f"{label}.onnx"), os.path.join(tmp, f"{label}.json")
        rc, opt, err, owall = sh([mp, "optimize", model, "--budget", budget, "-o", out, "--plan-out", plan,
                                  "--json"] + dimargs, ok=(0, 3))
        if err:
            problems.append(f"optimize {label} {err}")
            continue
        floor = max(floor, opt["floor"]["bytes"]) if opt and "floor" in opt else floor
        rc2, res, err, _ = sh(run[:2] + [out] + run[2:] + ["--plan", plan, "--compare", ref, "--exact"])
        if err:
            problems.append(f"planned run {label} {err}")
            continue
        planned = res.get("planned_peak_bytes")
        if planned != res["peak_bytes"]:
            problems.append(f"{label}: measured {res['peak_bytes']} != planned {planned}")
        if res.get("mismatches"):
            problems.append(f"{label}: {res['mismatches']} mismatches")
        row[label] = f"{res['peak_bytes'] / peak:.3f}" + ("" if rc == 0 else " (missed)")
        reached[label] = planned
        if label == "0.15x" and rc == 3 and floor < int(peak * 0.15):
            problems.append(f"0.15x missed, floor {floor / peak:.3f}x below it")
        if label == "0.15x" and planned is not None and reached.get("lowest", 0) > planned * 1.005:
            problems.append(f"lowest {reached['lowest'] / peak:.3f}x above the 0.15x plan")
        row[f"{label} optimize s"] = f"{owall:.1f}"
        if label == "0.15x" and a.repeat:
            ts = {"base": [], "opt": []}
            for _ in range(a.repeat):
                ts["base"].append(sh(run[:2] + [model] + run[2:])[1]["seconds"])
                ts["opt"].append(sh(run[:2] + [out] + run[2:] + ["--plan", plan])[1]["seconds"])
            b, o = statistics.median(ts["base"]), statistics.median(ts["opt"])
            row["time"] = f"{b * 1e3:.0f} / {o * 1e3:.0f} ms ({o / b:.2f})"
    row["problems"] = "; ".join(problems) or "none"
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--memplan", default=os.path.join(ROOT, "target", "release", "memplan"))
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--int-high", type=int, default=50)
    ap.add_argument("--sizes", default="small,large")
    a = ap.parse_args()
    spec = json.load(open(os.path.join(a.dir, "dims.json")))
    cols = ["model", "size", "dims", "peak", "ort", "0.15x", "0.15x optimize s", "lowest", "lowest optimize s",
            "time", "problems"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for name, s in spec.items():
        if a.only and not any(o in name for o in a.only):
            continue
        for size in a.sizes.split(","):
            if size not in s:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    row = check(a, os.path.join(a.dir, name), size, s[size], tmp)
                except SystemExit as e:
                    row = {"model": name, "size": size, "problems": str(e)}
            if "peak" in row:
                row["peak"] = f"{row['peak'] / MIB:.1f} MiB"
            print("| " + " | ".join(str(row.get(c, "")) for c in cols) + " |", flush=True)
            print(f"{name} {size}: {row.get('problems')}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
