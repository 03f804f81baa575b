#!/usr/bin/env python3
"""Planned peaks of two memplan binaries side by side (`optimize --json` only: planned peaks are
deterministic, so this needs no repeats; optimize's own wall time is given too).

Cases: every AlphaFold-family corpus model, both exports, at N=256 and N=512 (budget 0.15x the
estimated peak; `lowest` for attn_pair_bias and tri_mul_out, whose floors are above 0.15x); wide
corpus transformers (T5, Llama, BLOOM, torch's encoder, BERT; both exports) at S=2048 and DeBERTa v2
at S=256 (its position table ends there), budget 0.15x; the PairFormer block at N=512, `lowest`.
A cell is the planned peak as a fraction of the estimated one, and optimize's wall time.

Usage: .venv/bin/python bench/plan_peaks.py OLD_MEMPLAN NEW_MEMPLAN [--only SUBSTRING] [--skip SUBSTRING]
(--only keeps the cases whose model path has SUBSTRING; --skip drops those whose "MODEL.onnx BUDGET"
has it, e.g. --skip "pairformer_block.onnx lowest".)
"""
import argparse
import json
import os
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def js(cmd):
    return json.loads(subprocess.run(cmd, capture_output=True, text=True).stdout)


def cases(memplan):
    out = []
    for m in ["of3_attn_pair_bias", "of3_pair_transition", "of3_pairformer_block", "of3_tri_att_start",
              "of3_tri_mul_out", "of3_token_frame_atoms_gather"]:
        for ex in ["", ".legacy"]:
            for n in [256, 512]:
                d = ["--dim", f"N_token={n}", "--dim", f"N_atom={461 * n // 128}"] if "token" in m else ["--dim", f"N={n}"]
                r = "lowest" if m in ("of3_attn_pair_bias", "of3_tri_mul_out") else "0.15"
                out.append((f"{ROOT}/tests/corpus/models/{m}{ex}.onnx", d, r))
    for m in ["t5_encoder", "llama_decoder", "bloom", "torch_transformer_encoder", "deberta_v2", "bert_encoder"]:
        for ex in ["", ".legacy"]:
            p = f"{ROOT}/tests/wide/models/{m}{ex}.onnx"
            if not os.path.exists(p):
                p = f"{ROOT}/tests/corpus/models/{m}{ex}.onnx"
            if not os.path.exists(p):
                continue
            seq = 256 if m == "deberta_v2" else 2048
            syms = js([memplan, "inspect", p, "--json"]).get("symbols", [])
            d = [a for s in sorted(syms) for a in ("--dim", f"{s}={1 if s == 'B' else seq}")]
            out.append((p, d, "0.15"))
    for ex in ["", ".legacy"]:
        out.append((f"{ROOT}/tests/corpus/models/of3_pairformer_block{ex}.onnx", ["--dim", "N=512"], "lowest"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--only", default=None)
    ap.add_argument("--skip", default=None)
    a = ap.parse_args()
    print("| model | dims | budget | old: planned / estimated (optimize time) | new |")
    print("|---|---|---|---:|---:|")
    for p, d, r in cases(a.new):
        if a.only and a.only not in p:
            continue
        if a.skip and a.skip in f"{os.path.basename(p)} {r}":
            continue
        peak = js([a.new, "estimate", p, *d, "--json"])["peak_bytes"]
        bud = "lowest" if r == "lowest" else f"{int(peak * float(r))}B"
        row = [os.path.basename(p), " ".join(d[1::2]), r if r == "lowest" else f"{r}x"]
        for b in [a.old, a.new]:
            t = time.time()
            out = subprocess.run([b, "optimize", p, *d, "--budget", bud, "--json"], capture_output=True, text=True)
            t = time.time() - t
            try:
                row.append(f"{json.loads(out.stdout)['peak_bytes_after'] / peak:.3f} ({t:.1f} s)")
            except (ValueError, KeyError):
                row.append("error: " + out.stderr.strip().splitlines()[-1][:80])
        print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
