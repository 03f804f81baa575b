#!/usr/bin/env python3
"""torchvision's detection models (a package the corpus does not use; `NonZero`, `NonMaxSuppression`,
`TopK`, `RoiAlign`, `If`, `ScatterElements`: sizes made from the data), random weights, eval mode,
scores kept from 0 so that the outputs are not empty, exported by both torch exporters (an exporter
that fails is skipped with its error).

Per model and export: memplan's unoptimized run against onnxruntime's outputs (rtol 1e-3: the two
sum in different orders), the data-dependent dims that run found (`run --json`), and at those dims
the lowest plan (`memplan optimize --budget lowest`), written and run under its plan: measured =
planned, outputs bit-identical to the unoptimized run, whole-process wall time of both (median of
--repeat alternating runs, 2 threads).

Needs `pip install torch torchvision onnxscript onnxruntime`. Prints a markdown table.

Usage: .venv/bin/python bench/torchvision_detection.py [--memplan target/release/memplan] [--base OTHER/memplan]
       [--repeat 3] [--img 320] [--models fasterrcnn_mobilenet_v3_large_320_fpn ...]
"""

import argparse
import json
import os
import sys

import numpy as np

from benchcli import each_export, lowest_against_whole, lowest_row, sh

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ["fasterrcnn_mobilenet_v3_large_320_fpn", "ssdlite320_mobilenet_v3_large"]
OUTPUTS = ["boxes", "labels", "scores"]


def export(name, img, stem):
    """STEM.{dynamo,legacy}.onnx of detection model `name` on one `img` x `img` image, each made once;
    returns {variant: path} without the exporters that fail."""
    import torch
    import torchvision

    ctor = getattr(torchvision.models.detection, name)
    kwargs = {"weights": None, "weights_backbone": None}
    kwargs["score_thresh" if name.startswith("ssd") else "box_score_thresh"] = 0.0
    torch.manual_seed(0)
    model = ctor(**kwargs).eval()
    x = [torch.rand(3, img, img)]

    def export_one(variant, p):
        with torch.no_grad():
            if variant == "legacy":
                torch.onnx.export(model, (x,), p, dynamo=False, opset_version=17, input_names=["image"],
                                  output_names=OUTPUTS)
            else:
                torch.onnx.export(model, (x,), dynamo=True, input_names=["image"],
                                  output_names=OUTPUTS).save(p)

    return each_export(stem, export_one)


def against_ort(memplan, model, inputs, stem):
    """memplan's unoptimized run of `model` compared with onnxruntime's outputs (rtol 1e-3, atol
    1e-4); returns (agrees, the dims the run found, detections)."""
    import onnxruntime as ort

    feeds = dict(np.load(inputs))
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds)
    ref = stem + ".ort.npz"
    np.savez(ref, **{o.name: v for o, v in zip(sess.get_outputs(), outs)})
    r = sh([memplan, "run", model, "--inputs-npz", inputs, "--threads", "2", "--compare", ref,
            "--rtol", "1e-3", "--atol", "1e-4", "--json"], ok=(0, 1))
    got = json.loads(r.stdout)
    return bool(got.get("compared")) and not got.get("mismatches"), got.get("dims", {}), len(outs[2])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", default=os.path.join(ROOT, "target", "release", "memplan"))
    ap.add_argument("--base", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--img", type=int, default=320)
    ap.add_argument("--models", nargs="*", default=MODELS)
    args = ap.parse_args()
    work = os.path.join(ROOT, "target", "torchvision_detection")
    os.makedirs(work, exist_ok=True)
    rows = []
    for name in args.models:
        stem = os.path.join(work, name)
        inputs = stem + ".in.npz"
        np.savez(inputs, image=np.random.default_rng(0).random((3, args.img, args.img), dtype=np.float32))
        for variant, path in export(name, args.img, stem).items():
            agrees, dims, found = against_ort(args.memplan, path, inputs, f"{stem}.{variant}")
            flags = [f for k, v in sorted(dims.items()) for f in ("--dim", f"{k}={v}")]
            try:
                r = lowest_against_whole(args.memplan, args.base, path, inputs, flags, f"{stem}.{variant}",
                                         args.repeat)
            except RuntimeError as e:  # a command that failed: its error is the row
                rows.append(f"| {name} | {variant} | error: {str(e)[-300:]} |")
                continue
            rows.append(lowest_row(name, variant, r) + f" {'yes' if agrees else 'NO'} | {len(dims)} | {found} |")
            print(f"{name} {variant}: done", file=sys.stderr)
    print(f"memplan run, 2 threads, image {args.img} x {args.img}, median of {args.repeat} alternating runs\n")
    print("| model | export | peak unoptimized | floor | lowest planned (x) | base build's lowest "
          "| measured = planned | bit-identical | wall s, unoptimized / lowest | unoptimized = onnxruntime "
          "| data-dependent dims | detections |")
    print("|---|---|---:|---:|---:|---:|---|---|---|---|---:|---:|")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
