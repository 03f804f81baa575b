#!/usr/bin/env python3
"""Two memplan executors side by side: the same models, plans and inputs run by a base binary and by
this checkout's, in alternating fresh processes.

For each case (corpus models at their dims): `memplan optimize` of this checkout writes the
unoptimized plan (no budget) and the chunked one (budget --ratio x the estimated peak, or the floor
when that is higher); then each binary runs both, --repeat rounds, alternating base and new within a
round. The table gives, per binary, the median run time (`run --json` seconds, the first run of its
process) and the median whole-process wall time of each, the ratio new / base, and the chunked run's
time over the unoptimized one for each binary. Outputs of every run are compared with the new
binary's unoptimized run, bit for bit (`--compare --exact`).

Usage: .venv/bin/python bench/exec_versions.py --base OLD/memplan [--memplan target/release/memplan]
       [--repeat 5] [--threads 2] [--ratio 0.15] [--only NAME]
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
CORPUS = os.path.join(ROOT, "tests", "corpus", "models")

CASES = [
    ("of3_attn_pair_bias", {"N": 256}),
    ("of3_attn_pair_bias", {"N": 512}),
    ("of3_pair_transition", {"N": 256}),
    ("of3_pairformer_block", {"N": 256}),
    ("of3_tri_att_start", {"N": 256}),
    ("of3_tri_att_start.legacy", {"N": 256}),
    ("of3_tri_mul_out", {"N": 256}),
    ("logspace_matrix_chain", {"n": 8, "t": 256}),
    ("bert_encoder", {"B": 1, "S": 1024}),
    ("gpt2_decoder.legacy", {"B": 1, "S": 1024}),
]


def sh(cmd, ok=(0,)):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode not in ok:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr}")
    return r.stdout


def dim_args(dims):
    return [a for k, v in dims.items() for a in ("--dim", f"{k}={v}")]


def timed_run(binary, model, plan, dims, threads, ref=None, out=None):
    cmd = [binary, "run", model, "--plan", plan, *dim_args(dims), "--random", "--threads", str(threads),
           "--json"]
    if ref:
        cmd += ["--compare", ref, "--exact"]
    if out:
        cmd += ["--out", out]
    t0 = time.perf_counter()
    rep = json.loads(sh(cmd))
    wall = time.perf_counter() - t0
    if ref and rep.get("mismatches"):
        sys.exit(f"{binary} {model}: outputs differ: {rep['mismatches'][:3]}")
    return rep["seconds"], wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the memplan binary to compare against")
    ap.add_argument("--memplan", default=os.path.join(ROOT, "target", "release", "memplan"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ratio", type=float, default=0.15)
    ap.add_argument("--only", default=None)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="exec_versions_")
    print("| model | dims | run | base ms | new ms | new / base | base wall s | new wall s | chunked / unoptimized, base → new |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    for stem, dims in CASES:
        if args.only and args.only not in stem:
            continue
        model = os.path.join(CORPUS, f"{stem}.onnx")
        est = json.loads(sh([args.memplan, "estimate", model, *dim_args(dims), "--json"]))
        low = json.loads(sh([args.memplan, "optimize", model, *dim_args(dims), "--budget", "lowest", "--json",
                             "-o", os.path.join(work, "low.onnx")], ok=(0, 3)))
        budget = max(int(est["peak_bytes"] * args.ratio), low["floor"]["bytes"])
        files = {}
        for tag, extra in (("unoptimized", []), ("chunked", ["--budget", f"{budget}B"])):
            out, plan = os.path.join(work, f"{tag}.onnx"), os.path.join(work, f"{tag}.plan.json")
            sh([args.memplan, "optimize", model, *dim_args(dims), "-o", out, "--plan-out", plan, *extra],
               ok=(0, 3))
            files[tag] = (out, plan)
        ref = os.path.join(work, "ref.npz")
        timed_run(args.memplan, *files["unoptimized"], dims, args.threads, out=ref)
        t = {(b, tag): [] for b in ("base", "new") for tag in files}
        for _ in range(args.repeat):
            for tag, (out, plan) in files.items():
                for b, binary in (("base", args.base), ("new", args.memplan)):
                    t[(b, tag)].append(timed_run(binary, out, plan, dims, args.threads, ref=ref))
        med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in t.items()}
        dims_s = " ".join(f"{k}={v}" for k, v in dims.items())
        for tag in files:
            (bs, bw), (ns, nw) = med[("base", tag)], med[("new", tag)]
            if tag == "chunked":
                rb = bs / med[("base", "unoptimized")][0]
                rn = ns / med[("new", "unoptimized")][0]
                ratio = f"{rb:.2f} → {rn:.2f}"
            else:
                ratio = ""
            print(f"| {stem} | {dims_s} | {tag} | {bs * 1e3:.1f} | {ns * 1e3:.1f} | {ns / bs:.2f} | {bw:.2f} | "
                  f"{nw:.2f} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
