"""Chunking long-sequence transformers (issue 13): the wide corpus's exports of public packages
(transformers' T5 encoder with its relative position bias, Llama, Mistral, GPT-NeoX, BLOOM with
its ALiBi bias, Falcon, ESM; torch's TransformerEncoder), both exporters, at S=4096 (batch 1),
budget 0.15 x the estimated peak.

Per model: `memplan optimize --budget` (planned peak, chunk steps, light values made again per
layer, predicted extra time), then the unoptimized run (`memplan run`, no plan) and the planned run
(`memplan run OUT --plan PLAN`) alternately, --repeat times each, in fresh processes, --threads
threads, the same seeded random inputs (`--random --seed 0`: token ids uniform over the vocabulary,
masks fair coins); measured peak (the same every run), median whole-process wall time and median
run time (the run itself, as the executor reports it), and whether every planned run's outputs are
bit-identical to the unoptimized run's.

Usage: .venv/bin/python bench/transformer_chunks.py [--memplan target/release/memplan] [--seq 4096]
       [--repeat 5] [--threads 2] [--ratio 0.15] [--only NAME]
"""

import argparse
import os
import statistics
import sys
import time

from benchcli import js, sh

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDE = os.path.join(ROOT, "tests", "wide", "models")
MIB = 1024 * 1024
MODELS = ["t5_encoder", "llama_decoder", "mistral_decoder", "gpt_neox", "bloom", "falcon", "esm",
          "torch_transformer_encoder"]


def dims_of(memplan, path, seq):
    syms = js([memplan, "inspect", path, "--json"]).get("symbols", [])
    return [a for s in sorted(syms) for a in ("--dim", f"{s}={1 if s == 'B' else seq}")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memplan", default=os.path.join(ROOT, "target", "release", "memplan"))
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ratio", type=float, default=0.15)
    ap.add_argument("--only", default=None)
    ap.add_argument("--work", default=os.path.join(ROOT, "target", "transformer_chunks"))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    m = a.memplan
    rows = []
    for name in MODELS:
        for variant in ("", ".legacy"):
            stem = name + variant
            path = os.path.join(WIDE, stem + ".onnx")
            if not os.path.exists(path) or (a.only and a.only not in (stem, name)):
                continue
            d = dims_of(m, path, a.seq)
            est = js([m, "estimate", path, *d, "--json"])
            budget = max(int(est["peak_bytes"] * a.ratio),
                         js([m, "optimize", path, *d, "--budget", "lowest", "--exact-work", "0", "--json"])
                         ["floor"]["bytes"])
            base = os.path.join(a.work, stem)
            t0 = time.perf_counter()
            opt = js([m, "optimize", path, *d, "--budget", str(budget), "-o", base + ".opt.onnx",
                      "--plan-out", base + ".plan.json", "--json"], ok=(0, 3))
            opt_s = time.perf_counter() - t0
            ch = opt.get("chunking") or {}
            inputs = ["--random", "--seed", "0", "--threads", str(a.threads), "--json"]
            ref = base + ".ref.npz"
            walls = {"plain": [], "opt": []}
            runs = {"plain": [], "opt": []}
            peaks, identical = {}, True
            for i in range(a.repeat):
                for kind in ("plain", "opt"):
                    if kind == "plain":
                        args = [m, "run", path, *d, *inputs] + (["--out", ref] if i == 0 else [])
                    else:
                        args = [m, "run", base + ".opt.onnx", "--plan", base + ".plan.json", *d, *inputs,
                                "--compare", ref, "--exact"]
                    t = time.perf_counter()
                    r = js(args)
                    walls[kind].append(time.perf_counter() - t)
                    runs[kind].append(r["seconds"])
                    peaks[kind] = r["peak_bytes"]
                    if kind == "opt" and r["mismatches"]:
                        identical = False
            med = {k: statistics.median(v) for k, v in walls.items()}
            rmed = {k: statistics.median(v) for k, v in runs.items()}
            rows.append((stem, est["peak_bytes"], budget, opt["peak_bytes_after"], peaks["opt"], opt["fits"],
                         ", ".join(f"{s['nodes']}x{s['chunks']}" for s in ch.get("steps", [])),
                         len(ch.get("per_reader", [])), ch.get("predicted_seconds", 0.0),
                         med, rmed, identical, opt_s))
            print(f"{stem}: planned {opt['peak_bytes_after'] / MIB:.1f} MiB, measured {peaks['opt'] / MIB:.1f} MiB, "
                  f"wall {med['opt'] / med['plain']:.2f}x, identical {identical}", file=sys.stderr)
    print(f"S={a.seq}, B=1, budget {a.ratio} x the estimated peak; memplan run, {a.threads} threads, "
          f"median of {a.repeat} alternating runs each\n")
    print("| model | peak unoptimized | budget | chunks (nodes x count) | made per layer | planned | measured | "
          "ratio | fits | wall unoptimized | wall optimized | wall ratio | run ratio | predicted extra | outputs | optimize time |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---:|")
    for (stem, peak, budget, planned, measured, fits, steps, shared, pred, med, rmed, ident, opt_s) in rows:
        run_ratio = f"{rmed['opt'] / rmed['plain']:.2f}" if rmed["plain"] > 0 else "-"
        print(f"| {stem} | {peak / MIB:.1f} MiB | {budget / MIB:.1f} MiB | {steps} | {shared} | {planned / MIB:.1f} MiB | "
              f"{measured / MIB:.1f} MiB | {planned / peak:.3f} | {'yes' if fits else 'no'} | {med['plain']:.2f} s | "
              f"{med['opt']:.2f} s | {med['opt'] / med['plain']:.2f} | {run_ratio} | +{pred * 1e3:.1f} ms | "
              f"{'bit-identical' if ident else 'DIFFER'} | {opt_s:.1f} s |")


if __name__ == "__main__":
    main()
