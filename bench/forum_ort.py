#!/usr/bin/env python3
"""The forum program's rewrite (issue 13) in onnxruntime: first-run peak under several session option
sets, against memplan's own planned and measured peak, and output agreement.

For each export of the forum program (`tools/forum_chain.py` at v=40, c=200, dynamo `logspace_forum.onnx`
and TorchScript `logspace_forum.legacy.onnx`; inputs at n=500, t=1, made once in the work directory as
`bench/chunk_bench.py` makes them):

* `memplan optimize MODEL --dim n=500 --dim t=1 --budget 100MiB -o OUT.onnx --plan-out OUT.plan.json`;
  planned = the plan's peak; then `memplan run OUT.onnx --plan OUT.plan.json --inputs-npz ... --out ...`
  gives the measured peak (memplan's peaks count the resident inputs, 21.2 MiB here; the transient
  column is measured minus resident, which is what onnxruntime's delta below counts).
* onnxruntime (CPU provider, --threads intra-op threads, 1 inter-op thread), in a fresh subprocess per
  run, as bench/run_vs_ort.py measures it: the session is made and the inputs loaded, the high-water
  mark is reset (/proc/self/clear_refs 5), then peak = VmHWM after the first run minus VmRSS before it.
  The rewrite runs --repeat times per option set (median, and the range when runs differ: without
  ORT's arena the peak depends on glibc's heap and is not repeatable); the unoptimized model once.
  Option sets:
    default            arena on, memory patterns on, all graph optimizations
    no-opt             graph_optimization_level=ORT_DISABLE_ALL (nothing fused, folded or reordered)
    priority-order     execution_order=PRIORITY_BASED instead of the default topological order
    no-pattern         enable_mem_pattern=False
    no-arena           enable_cpu_mem_arena=False, enable_mem_pattern=False (what a user sets to keep
                       memory low)
    no-arena+mmap      the same, with MALLOC_MMAP_THRESHOLD_=131072 in the environment (glibc serves
                       every block over 128 KiB by mmap and gives it back on free)
* outputs: onnxruntime's output of the rewrite against memplan's (`memplan run` of the rewrite) and
  against onnxruntime's output of the unoptimized model: bit-identical or not, and the max abs diff.

Prints a markdown table.

Usage: .venv/bin/python bench/forum_ort.py [--memplan target/release/memplan] [--work target/forum_ort]
       [--threads 2] [--repeat 3] [--sets default no-arena ...] [--exports logspace_forum ...]
       [--no-unoptimized]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from chunk_bench import FORUM_DIMS, forum_files  # noqa: E402

MIB = 1024 * 1024
EXPORTS = ["logspace_forum", "logspace_forum.legacy"]

# name -> (session options, extra environment)
OPTION_SETS = {
    "default": ({}, {}),
    "no-opt": ({"graph_optimization_level": "ORT_DISABLE_ALL"}, {}),
    "priority-order": ({"execution_order": "PRIORITY_BASED"}, {}),
    "no-pattern": ({"enable_mem_pattern": False}, {}),
    "no-arena": ({"enable_cpu_mem_arena": False, "enable_mem_pattern": False}, {}),
    "no-arena+mmap": ({"enable_cpu_mem_arena": False, "enable_mem_pattern": False},
                      {"MALLOC_MMAP_THRESHOLD_": "131072"}),
}

ORT_CHILD = r"""
import json, sys, time, numpy as np, onnxruntime as ort
path, npz, threads, opts, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5]
def status(key):
    for line in open('/proc/self/status'):
        if line.startswith(key + ':'):
            return int(line.split()[1]) * 1024
so = ort.SessionOptions()
so.intra_op_num_threads = threads
so.inter_op_num_threads = 1
so.log_severity_level = 3
for k, v in opts.items():
    if k == 'graph_optimization_level':
        v = getattr(ort.GraphOptimizationLevel, v)
    elif k == 'execution_order':
        v = getattr(ort.ExecutionOrder, v)
    setattr(so, k, v)
sess = ort.InferenceSession(path, so, providers=['CPUExecutionProvider'])
given = dict(np.load(npz))
feeds = {i.name: given[i.name] for i in sess.get_inputs()}
# Weights and inputs are resident before the window opens; the high-water mark is reset just before
# the first run so session creation's transient memory does not hide the run's.
before = status('VmRSS')
with open('/proc/self/clear_refs', 'w') as f:
    f.write('5')
t = time.perf_counter()
res = sess.run(None, feeds)
seconds = time.perf_counter() - t
peak = status('VmHWM') - before
if out != '-':
    np.savez(out, **{o.name: r for o, r in zip(sess.get_outputs(), res)})
print(json.dumps({'peak_bytes': peak, 'seconds': seconds}))
"""


def run_json(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    return json.loads(r.stdout)


def ort_run(path, npz, threads, set_name, out="-"):
    opts, env = OPTION_SETS[set_name]
    r = subprocess.run([sys.executable, "-c", ORT_CHILD, path, npz, str(threads), json.dumps(opts), out],
                       capture_output=True, text=True, env={**os.environ, **env})
    if r.returncode != 0:
        raise SystemExit(f"onnxruntime on {path} [{set_name}] failed: {r.stderr.strip()[-400:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def agree(a_path, b_path):
    """'bit-identical' or 'differ', and the max abs diff over every output of a and b."""
    a, b = np.load(a_path), np.load(b_path)
    same, worst = True, 0.0
    for k in a.files:
        x, y = a[k], b[k]
        if x.shape != y.shape:
            return f"shape {x.shape} vs {y.shape}"
        same &= x.tobytes() == y.tobytes()
        if x.size:
            worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))))
    return f"{'bit-identical' if same else 'differ'}, max abs {worst:.1e}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memplan", default=os.path.join(ROOT, "target", "release", "memplan"))
    ap.add_argument("--work", default=os.path.join(ROOT, "target", "forum_ort"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="onnxruntime runs of the rewrite per option set")
    ap.add_argument("--budget", default="100MiB")
    ap.add_argument("--sets", nargs="+", default=list(OPTION_SETS), choices=list(OPTION_SETS))
    ap.add_argument("--exports", nargs="+", default=EXPORTS, choices=EXPORTS)
    ap.add_argument("--no-unoptimized", action="store_true",
                    help="skip onnxruntime on the unoptimized model (it peaks near 7 GiB)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    models, npz = forum_files(a.work)
    dims = [x for k, v in sorted(FORUM_DIMS.items()) for x in ("--dim", f"{k}={v}")]
    rows = []
    for stem in a.exports:
        model = os.path.join(models, stem + ".onnx")
        w = lambda suffix: os.path.join(a.work, stem + suffix)
        opt = run_json([a.memplan, "optimize", model, "--budget", a.budget, "-o", w(".opt.onnx"),
                        "--plan-out", w(".plan.json"), "--json"] + dims)
        mp = run_json([a.memplan, "run", w(".opt.onnx"), "--plan", w(".plan.json"), "--inputs-npz", npz,
                       "--threads", str(a.threads), "--json", "--out", w(".memplan.npz")])
        print(f"{stem}: planned {opt['peak_bytes_after'] / MIB:.1f} MiB, measured {mp['peak_bytes'] / MIB:.1f} MiB",
              file=sys.stderr)
        for s in a.sets:
            peaks, secs = [], []
            for i in range(a.repeat):
                r = ort_run(w(".opt.onnx"), npz, a.threads, s, w(f".ort.{s}.npz") if i == 0 else "-")
                peaks.append(r["peak_bytes"])
                secs.append(r["seconds"])
            base = None
            if not a.no_unoptimized:
                base = ort_run(model, npz, a.threads, s, w(f".ort_orig.{s}.npz"))
            vs_mp = agree(w(f".ort.{s}.npz"), w(".memplan.npz"))
            vs_orig = agree(w(f".ort.{s}.npz"), w(f".ort_orig.{s}.npz")) if base else "-"
            rows.append((stem, s, opt["peak_bytes_after"], mp["peak_bytes"], mp["peak_bytes"] - mp["resident_bytes"],
                         peaks, statistics.median(secs), base, vs_mp, vs_orig))
            print(f"{stem} [{s}]: ORT peak {[round(p / MIB, 1) for p in peaks]} MiB", file=sys.stderr)

    print(f"onnxruntime {__import__('onnxruntime').__version__}, CPU, {a.threads} intra-op threads; "
          f"n={FORUM_DIMS['n']} t={FORUM_DIMS['t']}, budget {a.budget}; ORT peak = first-run VmHWM delta, "
          f"rewrite: median of {a.repeat} fresh processes [min-max]\n")
    print("| export | option set | memplan planned MiB | memplan measured MiB | memplan transient MiB "
          "| ORT first-run peak MiB, rewrite | ORT first-run peak MiB, unoptimized | ORT first run s, rewrite / "
          "unoptimized | ORT rewrite vs memplan | ORT rewrite vs ORT unoptimized |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---|")
    for stem, s, planned, measured, transient, peaks, sec, base, vs_mp, vs_orig in rows:
        med = statistics.median(peaks) / MIB
        rng = f" [{min(peaks) / MIB:.1f}-{max(peaks) / MIB:.1f}]" if max(peaks) - min(peaks) > 2 * MIB else ""
        b = f"{base['peak_bytes'] / MIB:.1f}" if base else "-"
        bs = f"{base['seconds']:.1f}" if base else "-"
        print(f"| {stem} | {s} | {planned / MIB:.1f} | {measured / MIB:.1f} | {transient / MIB:.1f} | "
              f"{med:.1f}{rng} | {b} | {sec:.1f} / {bs} | {vs_mp} | {vs_orig} |")


if __name__ == "__main__":
    main()
