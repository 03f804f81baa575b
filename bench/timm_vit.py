#!/usr/bin/env python3
"""A model from a package the corpus does not use: timm's ViT (vit_small_patch16_224, depth 2,
random weights) at a 1024 x 1024 image, 4097 tokens, exported by both torch exporters.

Per export:
  budget 0.15x  `memplan optimize MODEL --budget 0.15 x the estimated peak`; the unoptimized run
                and the planned run alternately, --repeat times each, fresh processes, 2 threads:
                planned and measured peak, median whole-process wall time of each, outputs
                bit-identical or not.
  fold          the same budget with `--chunks 128 --scan-from 2 / 0`: 4097 rows in chunks of 33
                leave a last chunk of 5, so the leading 124 chunks fold into a `Scan` and the last
                stays unrolled. Node counts, planned = measured, bit-identical; onnxruntime runs both
                files (its output's max abs difference from memplan's).

Needs `pip install timm onnxscript onnxruntime`. Prints a markdown table.

Usage: .venv/bin/python bench/timm_vit.py [--memplan target/release/memplan] [--repeat 5]
"""

import argparse
import os
import statistics

import numpy as np

from benchcli import js, sh, timed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 1024 * 1024


def export(work, img):
    import timm
    import torch

    torch.manual_seed(0)
    m = timm.create_model("vit_small_patch16_224", pretrained=False, img_size=img, depth=2,
                          num_classes=10).eval()
    x = torch.randn(1, 3, img, img)
    with torch.no_grad():
        torch.onnx.export(m, (x,), os.path.join(work, "vit.legacy.onnx"), dynamo=False,
                          opset_version=17, input_names=["x"], output_names=["y"])
        torch.onnx.export(m, (x,), dynamo=True, input_names=["x"],
                          output_names=["y"]).save(os.path.join(work, "vit.onnx"))
    np.savez(os.path.join(work, "in.npz"), x=x.numpy())


def ort_max_diff(model, inputs, ref):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.log_severity_level = 3
    s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    y = s.run(None, {s.get_inputs()[0].name: np.load(inputs)["x"]})[0]
    r = np.load(ref)
    return float(np.abs(y - r[r.files[0]]).max())


def nodes(model):
    import onnx

    return len(onnx.load(model, load_external_data=False).graph.node)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memplan", default=os.path.join(ROOT, "target", "release", "memplan"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--img", type=int, default=1024)
    ap.add_argument("--work", default=os.path.join(ROOT, "target", "timm_vit"))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    m, w = a.memplan, a.work
    inputs = os.path.join(w, "in.npz")
    if not os.path.exists(inputs):
        export(w, a.img)
    print("| export | form | nodes | planned MiB (x unoptimized) | measured MiB | bit-identical | "
          "wall s, unoptimized / planned (ratio) | ORT max abs diff |")
    print("|---|---|---:|---:|---:|---|---|---:|")
    for stem in ("vit", "vit.legacy"):
        model = os.path.join(w, stem + ".onnx")
        ref = os.path.join(w, stem + ".ref.npz")
        sh([m, "run", model, "--inputs-npz", inputs, "--out", ref, "--threads", "2"])
        peak = js([m, "estimate", model, "--json"])["peak_bytes"]
        budget = f"{int(peak * 0.15)}B"
        forms = [("budget 0.15x", []), ("fold: 128 chunks, Scan", ["--chunks", "128", "--scan-from", "2"]),
                 ("fold: 128 chunks, unrolled", ["--chunks", "128", "--scan-from", "0"])]
        for form, extra in forms:
            base = os.path.join(w, f"{stem}.{len(extra)}{extra[-1] if extra else ''}")
            rep = js([m, "optimize", model, "--budget", budget, *extra, "-o", base + ".onnx",
                      "--plan-out", base + ".json", "--json"], ok=(0, 3))
            planned = rep["peak_bytes_after"]
            run = [m, "run", base + ".onnx", "--plan", base + ".json", "--inputs-npz", inputs,
                   "--threads", "2", "--compare", ref, "--exact", "--json"]
            out = js(run, ok=(0, 1))
            same = out.get("compared") and not out.get("mismatches")
            wall = "-"
            if not extra:
                tu, tp = [], []
                for _ in range(a.repeat):
                    tu.append(timed([m, "run", model, "--inputs-npz", inputs, "--threads", "2", "--json"]))
                    tp.append(timed(run))
                mu, mp = statistics.median(tu), statistics.median(tp)
                wall = f"{mu:.2f} / {mp:.2f} ({mp / mu:.2f}x)"
            print(f"| {stem} | {form} | {nodes(base + '.onnx')} | {planned / MIB:.2f} ({planned / peak:.3f}) "
                  f"| {out['peak_bytes'] / MIB:.2f} | {'yes' if same else 'NO'} | {wall} "
                  f"| {ort_max_diff(base + '.onnx', inputs, ref):.1e} |", flush=True)


if __name__ == "__main__":
    main()
