#!/usr/bin/env python3
"""Calibration: memplan's estimate against onnxruntime's measured first-run peak on the corpus.

For every corpus model (both variants) at the manifest's sizes, runs `memplan estimate --json` and, in a
fresh subprocess per measurement, onnxruntime with the manifest's settings (CPU, 1 intra-op and 1
inter-op thread, default graph optimizations, CPU arena and memory patterns on). The measured number is
the process high-water-mark delta around the first run: VmHWM after it (reset through
/proc/self/clear_refs just before) minus VmRSS before it. Weights and inputs are loaded before the
window opens, so it compares with memplan's transient peak (peak minus resident weights and inputs).
Writes a markdown table to stdout.

Usage: .venv/bin/python bench/calibrate_ort.py [--memplan target/release/memplan] [--only NAME]
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "corpus")
MIB = 1024 * 1024

CHILD = r"""
import json, sys, numpy as np, onnxruntime as ort
path, shapes, npz = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
def status(key):
    for line in open('/proc/self/status'):
        if line.startswith(key + ':'):
            return int(line.split()[1]) * 1024
so = ort.SessionOptions()
so.intra_op_num_threads = 1
so.inter_op_num_threads = 1
sess = ort.InferenceSession(path, so, providers=['CPUExecutionProvider'])
given = dict(np.load(npz)) if npz else {}
rng = np.random.default_rng(0)
feeds = {}
for i in sess.get_inputs():
    shape = shapes[i.name]
    if i.name in given and list(given[i.name].shape) == shape:
        feeds[i.name] = given[i.name]
        continue
    t = i.type
    if 'float' in t:
        feeds[i.name] = rng.standard_normal(shape).astype(np.float16 if 'float16' in t else np.float32)
    elif 'bool' in t:
        feeds[i.name] = np.ones(shape, dtype=bool)
    else:
        dt = np.int32 if 'int32' in t else np.int64
        feeds[i.name] = (np.ones(shape, dtype=dt) if 'mask' in i.name else np.zeros(shape, dtype=dt))
before = status('VmRSS')
with open('/proc/self/clear_refs', 'w') as f:
    f.write('5')
sess.run(None, feeds)
hwm = status('VmHWM')
print(json.dumps({'delta': hwm - before}))
"""


def input_dims(path):
    import onnx

    m = onnx.load(path, load_external_data=False)
    out = {}
    for i in m.graph.input:
        out[i.name] = [d.dim_param if d.dim_param else d.dim_value for d in i.type.tensor_type.shape.dim]
    return out


def dims_for(decl, shapes):
    dims = {}
    for name, ds in decl.items():
        if name not in shapes:
            continue
        for d, v in zip(ds, shapes[name]):
            if isinstance(d, str) and d:
                dims[d] = v
    return dims


def estimate(memplan, path, dims):
    cmd = [memplan, "estimate", path, "--json"] + [a for k, v in sorted(dims.items()) for a in ("--dim", f"{k}={v}")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return json.loads(r.stdout), None


def measure_ort(path, shapes, npz):
    r = subprocess.run([sys.executable, "-c", CHILD, path, json.dumps(shapes), npz or ""], capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"
    return json.loads(r.stdout.strip().splitlines()[-1])["delta"], None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", default=os.path.join(ROOT, "target", "release", "memplan"))
    ap.add_argument("--only", default=None)
    a = ap.parse_args()
    manifest = json.load(open(os.path.join(CORPUS, "manifest.json")))
    rows = []
    for m in manifest["models"]:
        if a.only and m["name"] != a.only:
            continue
        for variant, suffix in (("dynamo", ""), ("legacy", ".legacy")):
            path = os.path.join(CORPUS, "models", m["name"] + suffix + ".onnx")
            if not os.path.exists(path):
                continue
            decl = input_dims(path)
            for size, meas in m["measurements"].items():
                shapes = meas["input_shapes"]
                dims = dims_for(decl, shapes)
                npz = os.path.join(CORPUS, "inputs", f"{m['name']}_{size}.npz")
                est, err = estimate(a.memplan, path, dims)
                ort_delta, oerr = measure_ort(path, shapes, npz if os.path.exists(npz) else None)
                recorded = meas.get("ort_" + variant, {}).get("first_run_delta_mb")
                rows.append((m["name"], variant, dims, est, err, ort_delta, oerr, recorded))
                print(f"{m['name']} {variant} {dims}: done", file=sys.stderr)
    print("| model | variant | dims | memplan peak | memplan transient (peak − weights − inputs) | onnxruntime first-run Δ (measured) | manifest Δ | ORT Δ / memplan transient |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for name, variant, dims, est, err, ort_delta, oerr, recorded in rows:
        d = " ".join(f"{k}={v}" for k, v in sorted(dims.items()))
        if est is None:
            print(f"| {name} | {variant} | {d} | error: {err} | | | | |")
            continue
        peak = est["peak_bytes"]
        transient = peak - est["resident_bytes"]
        o = f"{ort_delta / MIB:.1f} MiB" if ort_delta is not None else f"error: {oerr}"
        rec = f"{recorded:.1f} MB" if recorded is not None else "-"
        ratio = f"{ort_delta / transient:.2f}" if ort_delta is not None and transient > 0 else "-"
        print(f"| {name} | {variant} | {d} | {peak / MIB:.1f} MiB | {transient / MIB:.1f} MiB | {o} | {rec} | {ratio} |")


if __name__ == "__main__":
    main()
