#!/usr/bin/env python3
"""torchvision's CNNs (a package the corpus does not use): classification, and with --models also
segmentation (the `out` map) and video (clips of --frames frames), with a symbolic batch, both torch
exporters, random weights: the lowest plan (`memplan optimize --budget lowest`) at --batch, and
another memplan build's (`--base`, e.g. one from before a change) side by side.

Per model and export: the estimated peak, the floor (and what holds it up), the lowest planned peak
(and the base build's), measured = planned, outputs bit-identical to the unoptimized run, and the
median whole-process wall time of the unoptimized and the planned run over --repeat alternating runs
(2 threads).

Needs `pip install torch torchvision onnxscript`. Prints a markdown table.

Usage: .venv/bin/python bench/torchvision_cnns.py [--memplan target/release/memplan] [--base OTHER/memplan]
       [--repeat 3] [--batch 16] [--img 224] [--frames 8] [--models resnet18 lraspp_mobilenet_v3_large r3d_18 ...]
"""

import argparse
import os

import numpy as np

from benchcli import lowest_against_whole, lowest_row, torch_exports

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ["resnet18", "googlenet", "squeezenet1_1", "mobilenet_v3_small", "densenet121", "alexnet"]


def build(name):
    """torchvision model `name` (classification, segmentation or video), random weights, eval mode,
    as a module returning one tensor (a segmentation model's `out`), and whether it reads video."""
    import torch
    import torchvision

    torch.manual_seed(0)
    tm = torchvision.models
    for family, video in ((tm, False), (tm.segmentation, False), (tm.video, True)):
        if hasattr(family, name) and callable(getattr(family, name)):
            if family is tm.segmentation:
                kw = {"weights_backbone": None, "aux_loss": False}
            elif name == "googlenet":
                kw = {"aux_logits": False, "init_weights": True}
            else:
                kw = {}
            m = getattr(family, name)(weights=None, **kw).eval()
            if family is tm.segmentation:

                class Out(torch.nn.Module):
                    def __init__(self, inner):
                        super().__init__()
                        self.inner = inner

                    def forward(self, x):
                        return self.inner(x)["out"]

                m = Out(m).eval()
            return m, video
    raise SystemExit(f"no torchvision model {name}")


def image_shape(batch, img, video, frames):
    return (batch, 3, frames, img, img) if video else (batch, 3, img, img)


def export(name, img, work, frames):
    """Both exports of torchvision model `name` with its batch axis named B; returns their paths
    and whether the model reads video."""
    import torch

    m, video = build(name)
    x = torch.randn(*image_shape(2, img, video, frames))
    return torch_exports(m, x, os.path.join(work, name), batch="B"), video


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memplan", default=os.path.join(ROOT, "target", "release", "memplan"))
    ap.add_argument("--base", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--img", type=int, default=224)
    ap.add_argument("--frames", type=int, default=8, help="frames of a video model's clip")
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--work", default=os.path.join(ROOT, "target", "torchvision_cnns"))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    m, w = a.memplan, a.work
    print(f"B={a.batch}, {a.img} x {a.img}, `--budget lowest`, 2 threads, median of {a.repeat} alternating runs\n")
    print("| model | export | peak unoptimized | floor (held by) | lowest planned (x) | base build's lowest | "
          "measured = planned | bit-identical | wall s, unoptimized / lowest |")
    print("|---|---|---:|---|---:|---:|---|---|---|")
    for name in a.models:
        paths, video = export(name, a.img, w, a.frames)
        for variant, model in paths.items():
            stem = os.path.join(w, f"{name}.{variant}")
            shape = image_shape(a.batch, a.img, video, a.frames)
            x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
            inputs = stem + f".in{a.batch}.npz"
            np.savez(inputs, x=x)
            r = lowest_against_whole(m, a.base, model, inputs, ["--dim", f"B={a.batch}"], stem, a.repeat)
            print(lowest_row(name, variant, r, held_by=True), flush=True)


if __name__ == "__main__":
    main()
