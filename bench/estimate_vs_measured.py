#!/usr/bin/env python3
"""memplan's estimate against memplan's own measured tensor peak on the corpus, at the manifest's sizes.

For every corpus model (both variants) and every size the manifest measured (`measurements` keys, with
their input shapes), runs `memplan estimate --json` and `memplan run --random --seed 0 --json` at the
dims those shapes bind, and prints the estimated peak, the executor's measured tensor peak (weights,
inputs, activations, outputs and kernel scratch, counted per allocation), their ratio, and the
process heap high-water mark of the run. Issue 3 asks the two peaks to agree within 1%. Writes a
markdown table to stdout; exits non-zero if any row is off by more than 1% or fails.

Usage: .venv/bin/python bench/estimate_vs_measured.py [--memplan target/release/memplan] [--only NAME]
           [--max-mib N]   (skip sizes whose estimate exceeds N MiB; default: no limit)
"""

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "corpus")
MIB = 1024 * 1024


def input_dims(path):
    import onnx

    m = onnx.load(path, load_external_data=False)
    return {
        i.name: [d.dim_param if d.dim_param else d.dim_value for d in i.type.tensor_type.shape.dim]
        for i in m.graph.input
    }


def dims_for(decl, shapes):
    dims = {}
    for name, ds in decl.items():
        for d, v in zip(ds, shapes.get(name, [])):
            if isinstance(d, str) and d:
                dims[d] = v
    return dims


def memplan_json(memplan, args):
    r = subprocess.run([memplan] + args, capture_output=True, text=True)
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or ["failed"])[-1]
    return json.loads(r.stdout), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", default=os.path.join(ROOT, "target", "release", "memplan"))
    ap.add_argument("--only", default=None)
    ap.add_argument("--max-mib", type=float, default=None)
    a = ap.parse_args()
    manifest = json.load(open(os.path.join(CORPUS, "manifest.json")))
    rows, bad = [], 0
    for m in manifest["models"]:
        if a.only and m["name"] != a.only:
            continue
        for variant, suffix in (("dynamo", ""), ("legacy", ".legacy")):
            path = os.path.join(CORPUS, "models", m["name"] + suffix + ".onnx")
            if not os.path.exists(path):
                continue
            decl = input_dims(path)
            for size, meas in m["measurements"].items():
                dims = dims_for(decl, meas["input_shapes"])
                flags = [f"--dim={k}={v}" for k, v in sorted(dims.items())]
                est, err = memplan_json(a.memplan, ["estimate", path, "--json"] + flags)
                if est is not None and a.max_mib is not None and est["peak_bytes"] > a.max_mib * MIB:
                    print(f"{m['name']} {variant} {dims}: skipped (estimate over --max-mib)", file=sys.stderr)
                    continue
                t0 = time.time()
                run, rerr = (None, err) if est is None else memplan_json(
                    a.memplan, ["run", path, "--random", "--seed", "0", "--json"] + flags
                )
                rows.append((m["name"], variant, dims, est, run, rerr))
                print(f"{m['name']} {variant} {dims}: {time.time() - t0:.1f} s", file=sys.stderr)
    print("| model | variant | dims | estimate | measured (executor) | measured / estimate | process heap peak |")
    print("|---|---|---|---:|---:|---:|---:|")
    for name, variant, dims, est, run, err in rows:
        d = " ".join(f"{k}={v}" for k, v in sorted(dims.items()))
        if est is None or run is None:
            bad += 1
            print(f"| {name} | {variant} | {d} | error: {err} | | | |")
            continue
        e, r = est["peak_bytes"], run["peak_bytes"]
        ratio = r / e if e else float("nan")
        if abs(r - e) > 0.01 * e or run.get("scratch_mismatches"):
            bad += 1
        print(
            f"| {name} | {variant} | {d} | {e / MIB:.2f} MiB | {r / MIB:.2f} MiB | {ratio:.4f} | "
            f"{run['process_peak_bytes'] / MIB:.2f} MiB |"
        )
    if bad:
        print(f"{bad} row(s) failed or differ by more than 1%", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
