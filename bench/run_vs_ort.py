#!/usr/bin/env python3
"""memplan run vs onnxruntime on the corpus: wall time (median of 5), peak memory, output agreement.

For each corpus model (dynamo export) at the given sizes, builds one set of valid inputs (seeded normal
floats, all-ones masks, in-range indices from the corpus npz pattern), then in fresh subprocesses:
  - memplan: `memplan run --inputs-npz ... --repeat 5 --threads T --json --out OUT.npz`
    (tensor peak measured by the executor, process heap high-water mark, median time);
  - onnxruntime: CPU, intra_op_num_threads=T, default optimizations; peak = the first run's process
    high-water-mark delta (ru_maxrss); time = median of 5 runs after the first.
Outputs are compared (rtol 1e-4, atol 1e-5). Prints a markdown table.

Usage: python3 bench/run_vs_ort.py [--memplan target/release/memplan] [--threads 1 2] [--models of3_tri_mul_out ...] [--size N=256]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "tests", "corpus", "models")

# model stem -> dims at the bench size (AlphaFold family at N=256 as the issue asks).
DEFAULT_SIZES = {
    "of3_pairformer_block": {"N": 256},
    "of3_tri_mul_out": {"N": 256},
    "of3_tri_att_start": {"N": 256},
    "of3_pair_transition": {"N": 256},
    "of3_attn_pair_bias": {"N": 256},
    "of3_token_frame_atoms_gather": None,  # uses the shared 512-token input npz
    "logspace_matrix_chain": {"n": 8, "t": 256},
    "bert_encoder": {"B": 1, "S": 512},
    "gpt2_decoder": {"B": 1, "S": 512},
}

ORT_CHILD = r"""
import sys, json, time, resource, numpy as np, onnxruntime as ort
model, inputs, threads, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
feeds = dict(np.load(inputs))
so = ort.SessionOptions(); so.intra_op_num_threads = threads; so.inter_op_num_threads = 1
sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
names = {i.name for i in sess.get_inputs()}
feeds = {k: v for k, v in feeds.items() if k in names}
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
# The high-water mark is reset just before the first run (clear_refs 5), so session creation's own
# transient memory does not hide the run's; weights and inputs are already resident in `before`.
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
t = time.perf_counter(); res = sess.run(None, feeds); first = time.perf_counter() - t
peak = status("VmHWM") - before
times = []
for _ in range(5):
    t = time.perf_counter(); sess.run(None, feeds); times.append(time.perf_counter() - t)
np.savez(out, **{o.name: r for o, r in zip(sess.get_outputs(), res)})
print(json.dumps({"first_run_peak_bytes": peak, "seconds": sorted(times)[2], "first_s": first}))
"""


def make_inputs(stem, dims, path):
    import onnx
    m = onnx.load(os.path.join(MODELS, stem + ".onnx"), load_external_data=False)
    rng = np.random.default_rng(0)
    feeds = {}
    for i in m.graph.input:
        t = i.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else dims[d.dim_param] for d in t.shape.dim]
        name = i.name
        if t.elem_type == onnx.TensorProto.FLOAT:
            if "mask" in name:
                feeds[name] = np.ones(shape, np.float32)
            else:
                feeds[name] = rng.standard_normal(shape).astype(np.float32)
        elif t.elem_type == onnx.TensorProto.INT64:
            high = 1024 if stem in ("bert_encoder", "gpt2_decoder") and "ids" in name else 2
            if "mask" in name:
                feeds[name] = np.ones(shape, np.int64)
            else:
                feeds[name] = rng.integers(0, high, shape).astype(np.int64)
        else:
            raise SystemExit(f"{stem}: input {name} of type {t.elem_type} not handled")
    np.savez(path, **feeds)


def compare(a_path, b_path):
    a, b = np.load(a_path), np.load(b_path)
    worst = 0.0
    for k in b.files:
        x, y = a[k].astype(np.float64), b[k].astype(np.float64)
        if x.shape != y.shape:
            return f"shape {x.shape} vs {y.shape}"
        err = np.abs(x - y) - (1e-5 + 1e-4 * np.abs(y))
        worst = max(worst, float(np.max(err)) if err.size else 0.0)
    return "ok" if worst <= 0 else f"exceeds tol by {worst:.2e}"


def run_memplan(memplan, model, inputs, th, out):
    r = subprocess.run([memplan, "run", model, "--inputs-npz", inputs, "--repeat", "5", "--threads", str(th),
                        "--json", "--out", out], capture_output=True, text=True)
    if r.returncode != 0:
        return None, "memplan failed: " + r.stderr.strip()[:160]
    return json.loads(r.stdout), None


def run_ort(model, inputs, th, out):
    o = subprocess.run([sys.executable, "-c", ORT_CHILD, model, inputs, str(th), out], capture_output=True, text=True)
    if o.returncode != 0:
        return None, "onnxruntime failed: " + o.stderr.strip()[-160:]
    return json.loads(o.stdout), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", default=os.path.join(ROOT, "target", "release", "memplan"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--models", nargs="*", default=list(DEFAULT_SIZES))
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate memplan and onnxruntime this many times; times are medians over rounds")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for stem in args.models:
            dims = DEFAULT_SIZES[stem]
            if dims is None:
                inputs = os.path.join(ROOT, "..", "shared", "corpus", "inputs", f"{stem}_512.npz")
                if not os.path.exists(inputs):
                    inputs = os.path.join(ROOT, "tests", "corpus", "inputs", f"{stem}_128.npz")
                size = os.path.basename(inputs)[len(stem) + 1:-4]
                size = {"512": "N_token=512 N_atom=1965", "128": "N_token=128 N_atom=461"}.get(size, size)
            else:
                inputs = os.path.join(tmp, f"{stem}.npz")
                make_inputs(stem, dims, inputs)
                size = " ".join(f"{k}={v}" for k, v in dims.items())
            model = os.path.join(MODELS, stem + ".onnx")
            for th in args.threads:
                mp_out = os.path.join(tmp, f"{stem}.{th}.memplan.npz")
                ort_out = os.path.join(tmp, f"{stem}.{th}.ort.npz")
                mps, orts, err = [], [], None
                for _ in range(args.rounds):
                    mp, err = run_memplan(args.memplan, model, inputs, th, mp_out)
                    if err:
                        break
                    ort, err = run_ort(model, inputs, th, ort_out)
                    if err:
                        break
                    mps.append(mp)
                    orts.append(ort)
                if err:
                    rows.append((stem, size, th, err))
                    continue
                med = lambda xs: sorted(xs)[len(xs) // 2]
                mp, ort = mps[0], orts[0]
                rows.append((stem, size, th, med([m["seconds"] for m in mps]), med([o["seconds"] for o in orts]),
                             mp["peak_bytes"], mp["peak_bytes"] - mp["resident_bytes"], mp["process_peak_bytes"],
                             ort["first_run_peak_bytes"], compare(mp_out, ort_out)))
                print(f"{stem} {size} t={th}: done", file=sys.stderr)
    mb = lambda b: f"{b / 2**20:.1f}"
    print("| model | dims | threads | memplan s | ort s | time ratio | memplan tensor peak MiB | memplan transient MiB "
          "(peak − weights − inputs) | memplan process peak MiB | ort first-run peak MiB | transient / ort | outputs agree |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        if len(r) == 4:
            print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | | | | | | | | |")
            continue
        stem, size, th, ms, os_, tp, tr, hp, op, agree = r
        print(f"| {stem} | {size} | {th} | {ms:.4f} | {os_:.4f} | {ms / os_:.2f} | {mb(tp)} | {mb(tr)} | {mb(hp)} | "
              f"{mb(op)} | {tr / op if op else float('nan'):.2f} | {agree} |")


if __name__ == "__main__":
    main()
