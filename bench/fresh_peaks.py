"""Planned peaks of the long-sequence fresh exports at S=4096 (BENCHMARKS.md, "Heads as an axis of
the projections"): for each file, `memplan optimize --budget 0.15x` and `--budget lowest` with each
binary given, the planned peak and its ratio to the estimated peak, and the optimize wall time.

The files come from bench/fresh_exports.py: led, longformer, funnel (both, FUNNEL_S=4096), bigbird
(dynamo, BIGBIRD_S=4096) in OUT=target/fresh10; longt5 (legacy), pegasus_x (both) in
OUT=target/fresh11. Missing files are skipped.

Usage: python3 bench/fresh_peaks.py BIN [BIN ...]
"""
import json
import os
import subprocess
import sys
import time

CASES = [("target/fresh10/led_legacy.onnx", "S=4096"), ("target/fresh10/longformer_legacy.onnx", "S=4096"),
         ("target/fresh10/funnel_legacy.onnx", "S=4096"), ("target/fresh10/funnel_dynamo.onnx", ""),
         ("target/fresh10/bigbird_dynamo.onnx", ""), ("target/fresh11/longt5_legacy.onnx", "S=4096"),
         ("target/fresh11/pegasus_x_legacy.onnx", "S=4096"), ("target/fresh11/pegasus_x_dynamo.onnx", "S=4096")]


def planned(binary, model, dims, budget):
    args = [binary, "optimize", model] + sum([["--dim", d] for d in dims.split()], [])
    args += ["--budget", budget, "-o", "/tmp/fresh_peaks.onnx", "--plan-out", "/tmp/fresh_peaks.json", "--json"]
    t = time.time()
    r = subprocess.run(args, capture_output=True, text=True)
    t = time.time() - t
    try:
        d = json.loads(r.stdout)
        return f"{d['peak_bytes_after'] / 2**20:.2f} ({d['peak_bytes_after'] / d['peak_bytes_before']:.3f}x), {t:.1f} s"
    except (ValueError, KeyError):
        return "refused: " + r.stderr.strip().splitlines()[-1][:80] if r.stderr.strip() else f"failed ({r.returncode})"


def main():
    bins = sys.argv[1:]
    if not bins:
        sys.exit(__doc__)
    print("| file | dims | budget | " + " | ".join(bins) + " |")
    print("|---|---|---|" + "---|" * len(bins))
    for model, dims in CASES:
        if not os.path.exists(model):
            continue
        for budget in ["0.15x", "lowest"]:
            cells = [planned(b, model, dims, budget) for b in bins]
            print(f"| {os.path.basename(model)} | {dims} | {budget} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
