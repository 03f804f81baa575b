#!/usr/bin/env python3
"""Chunking under a budget: memplan's optimized (chunked + planned) runs against unoptimized ones, and the
rewritten ONNX in onnxruntime against the original.

For each case: the budget is a fraction (--ratio) of the unoptimized simulated peak; `memplan optimize
--budget` chunks and plans the model and writes the rewritten ONNX and its plan. Then:

* memplan: the unoptimized model (`memplan run`, no plan) and the optimized one (`memplan run OUT --plan
  PLAN`) run alternately, --repeat times each, in fresh processes, with the same inputs and --threads
  threads; the table gives the measured tensor peak (identical every run), the median wall time of the
  run itself, and whether every output of every optimized run is bit-identical to the unoptimized one.
* onnxruntime: `onnx.checker.check_model(full_check=True)` on the rewritten model; the first-run peak
  of each model in a fresh subprocess (CPU provider, 1 intra-op and 1 inter-op thread, default graph
  optimizations, arena and memory patterns on; VmHWM after the first run, reset through
  /proc/self/clear_refs just before, minus VmRSS before it: weights and inputs are loaded before the
  window opens); outputs compared with rtol 1e-5 (atol 1e-6).

Inputs are made here, seeded: floats standard normal (masks all 1), except the token-frame model, whose
index inputs must be consistent: its 128-token corpus input tiled to 512 tokens (4 copies of its 3
chains, each copy's coordinates shifted so no two atoms coincide).

With --exports, the cases are every AlphaFold-family corpus model (`of3_*`) in both exports (dynamo
`NAME.onnx` and TorchScript `NAME.legacy.onnx`) at one size (--size, default N=256; the token-frame
model at N_token=size, N_atom=461*size/128), then the forum program (`tools/forum_chain.py`, both
exports, made in the work directory at v=40, c=200; n=500, t=1; budget 100 MiB), and only the
memplan table is made, with the planned peak (the plan's) next to the measured one, so the two
exports of each module can be compared, and a floor: resident weights and inputs plus the outputs,
which no plan goes below.

Usage: .venv/bin/python bench/chunk_bench.py [--memplan target/release/memplan] [--repeat 5]
       [--threads 2] [--ratio 0.15] [--only NAME] [--work DIR] [--exports [--size 256] [--no-forum]]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "corpus")
MIB = 1024 * 1024

# (model stem, dims)
CASES = [
    ("of3_pairformer_block", {"N": 512}),
    ("of3_tri_att_start", {"N": 512}),
    ("of3_token_frame_atoms_gather", {"N_token": 512, "N_atom": 4 * 461}),
    ("logspace_matrix_chain", {"n": 8, "t": 1024}),
]

ORT_CHILD = r"""
import json, sys, numpy as np, onnxruntime as ort
path, npz = sys.argv[1], sys.argv[2]
def status(key):
    for line in open('/proc/self/status'):
        if line.startswith(key + ':'):
            return int(line.split()[1]) * 1024
so = ort.SessionOptions()
so.intra_op_num_threads = 1
so.inter_op_num_threads = 1
sess = ort.InferenceSession(path, so, providers=['CPUExecutionProvider'])
given = dict(np.load(npz))
feeds = {i.name: given[i.name] for i in sess.get_inputs()}
before = status('VmRSS')
with open('/proc/self/clear_refs', 'w') as f:
    f.write('5')
outs = sess.run(None, feeds)
hwm = status('VmHWM')
if len(sys.argv) > 3:
    np.savez(sys.argv[3], *outs)
print(json.dumps({'delta': hwm - before}))
"""


def model_inputs(path):
    import onnx

    m = onnx.load(path, load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    out = []
    for i in m.graph.input:
        if i.name in inits:
            continue
        tt = i.type.tensor_type
        dims = [d.dim_param if d.dim_param else d.dim_value for d in tt.shape.dim]
        out.append((i.name, tt.elem_type, dims))
    return out


def make_inputs(stem, path, dims, dest):
    rng = np.random.default_rng(20240)
    if stem == "of3_token_frame_atoms_gather":
        src = dict(np.load(os.path.join(CORPUS, "inputs", "of3_token_frame_atoms_gather_128.npz")))
        k = dims["N_token"] // 128
        per_token = {n: a for n, a in src.items() if a.shape[1] == 128}
        feeds = {n: np.concatenate([a] * k, axis=1) for n, a in per_token.items()}
        feeds["asym_id"] = np.concatenate([src["asym_id"] + 3 * i for i in range(k)], axis=1)
        num = feeds["num_atoms_per_token"][0].astype(np.int64)
        start = np.concatenate([[0], np.cumsum(num)[:-1]]).astype(np.float32)
        feeds["start_atom_index"] = start[None, :]
        feeds["atom_to_token"] = np.repeat(np.arange(len(num)), num)[None, :].astype(np.int64)
        feeds["x"] = np.concatenate([src["x"] + 100.0 * i for i in range(k)], axis=1).astype(np.float32)
        feeds["atom_mask"] = np.concatenate([src["atom_mask"]] * k, axis=1)
        assert feeds["x"].shape[1] == dims["N_atom"], feeds["x"].shape
    else:
        feeds = {}
        for name, elem, ds in model_inputs(path):
            shape = [dims[d] if isinstance(d, str) else d for d in ds]
            if "mask" in name:
                feeds[name] = np.ones(shape, np.float32)
            elif stem == "logspace_matrix_chain" and name == "bulk":
                feeds[name] = rng.uniform(0.05, 1.05, shape).astype(np.float32)
            elif stem == "logspace_matrix_chain" and name == "p0":
                z = rng.standard_normal(shape)
                feeds[name] = (np.exp(z) / np.exp(z).sum(-1, keepdims=True)).astype(np.float32)
            else:
                feeds[name] = rng.standard_normal(shape).astype(np.float32)
    names = {n for n, _, _ in model_inputs(path)}
    np.savez(dest, **{n: a for n, a in feeds.items() if n in names})


def dim_args(dims):
    return [a for k, v in sorted(dims.items()) for a in ("--dim", f"{k}={v}")]


def run_json(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    # `optimize --budget` exits 3 when the budget is not met; its report is still printed.
    if r.returncode not in (0, 3):
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def ort_run(path, npz, out=None):
    args = [sys.executable, "-c", ORT_CHILD, path, npz] + ([out] if out else [])
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or ["failed"])[-1]
    return json.loads(r.stdout.strip().splitlines()[-1])["delta"], None


def af_cases(size):
    """(file stem, dims) of every AlphaFold-family corpus model, both exports, at one size."""
    names = sorted(
        f[: -len(".onnx")]
        for f in os.listdir(os.path.join(CORPUS, "models"))
        if f.startswith("of3_") and f.endswith(".onnx") and not f.endswith(".legacy.onnx")
    )
    out = []
    for name in names:
        if name == "of3_token_frame_atoms_gather":
            dims = {"N_token": size, "N_atom": 461 * size // 128}
        else:
            dims = {"N": size}
        out += [(name, dims), (name + ".legacy", dims)]
    return out


FORUM_DIMS = {"n": 500, "t": 1}
FORUM_BUDGET = 100 * MIB


def forum_files(work):
    """The forum program at v=40, c=200 (both exports) and its n=500, t=1 inputs, made once."""
    d = os.path.join(work, "forum")
    tool = os.path.join(ROOT, "tools", "forum_chain.py")
    n, t = FORUM_DIMS["n"], FORUM_DIMS["t"]
    npz = os.path.join(d, "inputs", f"logspace_forum_{n}.npz")
    if not os.path.exists(os.path.join(d, "models", "logspace_forum.legacy.onnx")):
        subprocess.run([sys.executable, tool, d, "--v", "40", "--c", "200"], check=True, capture_output=True)
    if not os.path.exists(npz):
        args = [sys.executable, tool, d, "--no-export", "--v", "40", "--c", "200", "--inputs", f"{n},{t}"]
        subprocess.run(args, check=True, capture_output=True)
    return os.path.join(d, "models"), npz


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", default=os.path.join(ROOT, "target", "release", "memplan"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ratio", type=float, default=0.15)
    ap.add_argument("--only", default=None)
    ap.add_argument("--work", default=os.path.join(ROOT, "target", "chunk_bench"))
    ap.add_argument("--exports", action="store_true", help="every of3 model, both exports, memplan only")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--no-forum", action="store_true", help="with --exports: the AlphaFold-family models only")
    a = ap.parse_args()
    cases = af_cases(a.size) if a.exports else CASES
    forum = None
    if a.exports and not a.no_forum:
        forum = forum_files(a.work)
        cases += [("logspace_forum", FORUM_DIMS), ("logspace_forum.legacy", FORUM_DIMS)]
    os.makedirs(a.work, exist_ok=True)
    mp_rows, ort_rows = [], []
    for stem, dims in cases:
        if a.only and stem != a.only and stem.split(".")[0] != a.only:
            continue
        path = os.path.join(CORPUS, "models", stem + ".onnx")
        w = lambda suffix: os.path.join(a.work, stem + suffix)
        npz = w(".inputs.npz")
        if stem.startswith("logspace_forum"):
            path, npz = os.path.join(forum[0], stem + ".onnx"), forum[1]
        else:
            make_inputs(stem.split(".")[0], path, dims, npz)
        est = run_json([a.memplan, "estimate", path, "--json"] + dim_args(dims))
        budget = FORUM_BUDGET if stem.startswith("logspace_forum") else int(est["peak_bytes"] * a.ratio)
        # A budget below the floor (what no plan goes below) is refused: ask for the floor then.
        floor = run_json([a.memplan, "optimize", path, "--budget", "lowest", "--json"] + dim_args(dims))["floor"]["bytes"]
        budget = max(budget, floor)
        opt = run_json(
            [a.memplan, "optimize", path, "--budget", str(budget), "-o", w(".chunked.onnx"),
             "--plan-out", w(".plan.json"), "--json"] + dim_args(dims)
        )
        print(f"{stem}: optimized in {opt['plan_ms']:.0f} ms, fits {opt.get('fits')}", file=sys.stderr)
        base = [a.memplan, "run", "--inputs-npz", npz, "--threads", str(a.threads), "--json"]
        ref = w(".ref.npz")
        times = {"orig": [], "opt": []}
        peaks, identical = {}, True
        for i in range(a.repeat):
            r = run_json(base + [path] + (["--out", ref] if i == 0 else []))
            times["orig"].append(r["seconds"])
            peaks["orig"] = r["peak_bytes"]
            r = run_json(base + [w(".chunked.onnx"), "--plan", w(".plan.json"), "--compare", ref, "--exact"])
            times["opt"].append(r["seconds"])
            peaks["opt"] = r["peak_bytes"]
            identical &= not r["mismatches"]
        t0, t1 = statistics.median(times["orig"]), statistics.median(times["opt"])
        steps = opt.get("chunking", {}).get("steps", [])
        chunks = ", ".join(f"{s['nodes']}x{s['chunks']}" for s in steps) or "-"
        outs = np.load(ref)
        floor = est["resident_bytes"] + sum(outs[k].nbytes for k in outs.files)
        mp_rows.append(
            (stem, dims, budget, chunks, peaks["orig"], floor, opt["peak_bytes_after"], peaks["opt"], t0, t1,
             identical, opt["plan_ms"])
        )
        if a.exports:
            print(f"{stem}: done", file=sys.stderr)
            continue

        import onnx

        try:
            onnx.checker.check_model(onnx.load(w(".chunked.onnx")), full_check=True)
            checker = "ok"
        except Exception as e:  # noqa: BLE001 - reported in the table
            checker = f"failed: {str(e).splitlines()[0]}"
        d0, e0 = ort_run(path, npz, w(".ort_orig.npz"))
        d1, e1 = ort_run(w(".chunked.onnx"), npz, w(".ort_opt.npz"))
        close = "-"
        if e0 is None and e1 is None:
            x, y = np.load(w(".ort_orig.npz")), np.load(w(".ort_opt.npz"))
            ok = all(np.allclose(x[k], y[k], rtol=1e-5, atol=1e-6) for k in x.files)
            worst = max(float(np.max(np.abs(x[k] - y[k]))) if x[k].size else 0.0 for k in x.files)
            close = f"{'yes' if ok else 'NO'} (max abs diff {worst:.1e})"
        ort_rows.append((stem, dims, checker, d0, e0, d1, e1, close))
        print(f"{stem}: done", file=sys.stderr)

    d = lambda dims: " ".join(f"{k}={v}" for k, v in sorted(dims.items()))
    print(f"memplan run, {a.threads} threads, median of {a.repeat} alternating runs each\n")
    print("| model | dims | budget | chunks (nodes x count) | peak unoptimized | floor (ratio) | peak planned | peak measured | ratio | time unoptimized | time optimized | ratio | outputs | optimize time |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for stem, dims, budget, chunks, p0, fl, pp, p1, t0, t1, same, ms in mp_rows:
        print(
            f"| {stem} | {d(dims)} | {budget / MIB:.1f} MiB | {chunks} | {p0 / MIB:.1f} MiB | "
            f"{fl / MIB:.1f} MiB ({fl / p0:.3f}) | {pp / MIB:.1f} MiB | "
            f"{p1 / MIB:.1f} MiB | {p1 / p0:.3f} | {t0:.2f} s | {t1:.2f} s | {t1 / t0:.2f} | "
            f"{'bit-identical' if same else 'DIFFER'} | {ms / 1e3:.1f} s |"
        )
    if a.exports:
        return
    print("\nonnxruntime, first-run peak (process high-water mark delta), 1 thread\n")
    print("| model | dims | onnx.checker (full) | ORT peak original | ORT peak rewritten | ratio | outputs within rtol 1e-5 |")
    print("|---|---|---|---:|---:|---:|---|")
    for stem, dims, checker, d0, e0, d1, e1, close in ort_rows:
        s0 = f"{d0 / MIB:.1f} MiB" if e0 is None else f"error: {e0}"
        s1 = f"{d1 / MIB:.1f} MiB" if e1 is None else f"error: {e1}"
        ratio = f"{d1 / d0:.3f}" if e0 is None and e1 is None else "-"
        print(f"| {stem} | {d(dims)} | {checker} | {s0} | {s1} | {ratio} | {close} |")


if __name__ == "__main__":
    main()
