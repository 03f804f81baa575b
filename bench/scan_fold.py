#!/usr/bin/env python3
"""Chunked regions unrolled against folded into one `Scan` (`memplan optimize --scan-from`), side by side.

For each corpus model (both exports) at the given dims, budget and chunk count:
  memplan optimize MODEL --budget B --chunks K --scan-from 0   (unrolled)
  memplan optimize MODEL --budget B --chunks K --scan-from 2 --scan-lanes 1   (every foldable region
                                                               folded, its iterations one after another)
  memplan optimize MODEL --budget B --chunks K --scan-from 2   (the same, in the default lanes where
                                                               they fit the budget: "S2" in the table)
then, per written file: its size and node count, whether a Scan is in it, the planned peak; `memplan run
--plan` (measured peak, bit-identical to the unoptimized model's outputs or not, median time over
--repeat alternating rounds of 5 runs each, and its ratio to the unoptimized model's `memplan run`,
timed in the same rounds); onnxruntime on the same file (CPU, --threads intra-op threads,
in a fresh subprocess: first-run peak as bench/run_vs_ort.py measures it, median of 5 later runs, and
whether its output equals memplan's within rtol 1e-4 / atol 1e-5).

Prints a markdown table.

Usage: .venv/bin/python bench/scan_fold.py [--models of3_pair_transition ...] [--dim N=256] [--budget 19.5MiB]
       [--chunks 64] [--threads 2] [--repeat 3]
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from run_vs_ort import compare, make_inputs, run_ort  # noqa: E402

MIB = 1024 * 1024


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode not in (0, 3):
        raise SystemExit(f"{' '.join(cmd)}: {r.stderr.strip()[-400:]}")
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", default=os.path.join(ROOT, "target", "release", "memplan"))
    ap.add_argument("--models", nargs="+", default=["of3_pair_transition"])
    ap.add_argument("--dim", action="append", default=None, help="NAME=VALUE (default N=256)")
    ap.add_argument("--budget", default="19.5MiB")
    ap.add_argument("--chunks", default="64")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    dims = dict(d.split("=") for d in (args.dim or ["N=256"]))
    dim_flags = [f"--dim={k}={v}" for k, v in dims.items()]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for base in args.models:
            npz = os.path.join(tmp, f"{base}.in.npz")
            make_inputs(base, {k: int(v) for k, v in dims.items()}, npz)
            for variant in ["", ".legacy"]:
                stem = base + variant
                model = os.path.join(ROOT, "tests", "corpus", "models", stem + ".onnx")
                ref = os.path.join(tmp, f"{stem}.ref.npz")
                sh([args.memplan, "run", model, "--inputs-npz", npz, "--out", ref, "--json"])
                files = {}
                for label, k, lanes in [("unrolled", "0", []), ("Scan, 1 lane", "2", ["--scan-lanes", "1"]),
                                        ("Scan", "2", [])]:
                    out = os.path.join(tmp, f"{stem}.{label.replace(', ', '_').replace(' ', '')}.onnx")
                    plan = out + ".plan.json"
                    rep = sh([args.memplan, "optimize", model, "--budget", args.budget, "--chunks", args.chunks,
                              "--scan-from", k, "-o", out, "--plan-out", plan, "--json"] + lanes + dim_flags)
                    files[label] = (out, plan, rep)
                times = {label: [] for label in files}
                plain = []
                runs = {}
                for _ in range(args.repeat):
                    plain.append(sh([args.memplan, "run", model, "--inputs-npz", npz, "--repeat", "5",
                                     "--threads", str(args.threads), "--json"])["seconds"])
                    for label, (out, plan, _) in files.items():
                        mine = out + ".mine.npz"
                        r = sh([args.memplan, "run", out, "--plan", plan, "--inputs-npz", npz, "--compare", ref,
                                "--exact", "--repeat", "5", "--threads", str(args.threads), "--json", "--out", mine])
                        times[label].append(r["seconds"])
                        runs[label] = (r, mine)
                for label, (out, plan, rep) in files.items():
                    r, mine = runs[label]
                    g = onnx.load(out, load_external_data=False).graph
                    scan = any(n.op_type == "Scan" for n in g.node)
                    theirs = out + ".ort.npz"
                    o, err = run_ort(out, npz, args.threads, theirs)
                    steps = (rep.get("chunking") or {}).get("steps") or []
                    rows.append([
                        stem, label, ",".join(str(s["chunks"]) + ("S" if s.get("scan") else "")
                                 + (str(s["lanes"]) if s.get("lanes", 1) > 1 else "") for s in steps),
                        f"{os.path.getsize(out) / 1024:.0f} KiB", str(len(g.node)), "yes" if scan else "no",
                        f"{rep['peak_bytes_after'] / MIB:.2f}", f"{r['peak_bytes'] / MIB:.2f}",
                        "yes" if not r["mismatches"] else "NO",
                        f"{statistics.median(times[label]) * 1e3:.1f}",
                        f"{statistics.median(times[label]) / statistics.median(plain):.2f}",
                        err or f"{o['first_run_peak_bytes'] / MIB:.1f}",
                        "" if err else f"{o['seconds'] * 1e3:.1f}",
                        "" if err else compare(theirs, mine),
                    ])
    head = ["model", "form", "chunks (S: Scan)", "file", "nodes", "Scan", "planned MiB", "measured MiB",
            "bit-identical", "memplan ms", "vs unoptimized", "ORT first-run peak MiB", "ORT ms", "ORT vs memplan"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
