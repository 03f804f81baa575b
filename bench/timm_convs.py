#!/usr/bin/env python3
"""Convolutional models from timm (a package the corpus does not use) at 512 x 512, both torch
exporters, random weights: the lowest plan (`memplan optimize --budget lowest`), against another
memplan build's (`--base`, e.g. one from before a change) when given.

Per model and export: the estimated peak, the floor, the lowest planned peak (and the base build's),
measured = planned, outputs bit-identical to the unoptimized run, and the median whole-process wall
time of the unoptimized and the planned run over --repeat alternating runs (2 threads).

Needs `pip install timm onnxscript`. Prints a markdown table.

Usage: .venv/bin/python bench/timm_convs.py [--memplan target/release/memplan] [--base OTHER/memplan]
       [--repeat 3] [--img 512] [--models convnext_atto poolformer_s12 mobilevit_xxs]
"""

import argparse
import os

import numpy as np

from benchcli import lowest_against_whole, lowest_row, torch_exports

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def export(name, img, work):
    import timm
    import torch

    torch.manual_seed(0)
    m = timm.create_model(name, pretrained=False, num_classes=10).eval()
    x = torch.randn(1, 3, img, img)
    inputs = os.path.join(work, f"{name}.in.npz")
    np.savez(inputs, x=x.numpy())
    paths = torch_exports(m, x, os.path.join(work, name))
    return inputs, paths


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memplan", default=os.path.join(ROOT, "target", "release", "memplan"))
    ap.add_argument("--base", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--img", type=int, default=512)
    ap.add_argument("--models", nargs="+", default=["convnext_atto", "poolformer_s12", "mobilevit_xxs"])
    ap.add_argument("--work", default=os.path.join(ROOT, "target", "timm_convs"))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    m, w = a.memplan, a.work
    print("| model | export | peak unoptimized | floor | lowest planned (x) | base build's lowest | "
          "measured = planned | bit-identical | wall s, unoptimized / lowest |")
    print("|---|---|---:|---:|---:|---:|---|---|---|")
    for name in a.models:
        inputs, paths = export(name, a.img, w)
        for variant, model in paths.items():
            r = lowest_against_whole(m, a.base, model, inputs, [], os.path.join(w, f"{name}.{variant}"), a.repeat)
            print(lowest_row(name, variant, r, held_by=False), flush=True)


if __name__ == "__main__":
    main()
