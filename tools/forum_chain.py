#!/usr/bin/env python3
"""The forum program (issue 13) written in PyTorch as its author would, exported by both torch exporters.

A log-space chain of v matrices of size c x c per (n, t), multiplied pairwise in a tree: an odd stack
is padded with a zero matrix, split into even and odd matrices with strided slices, each pair is
multiplied in log space (max-shift, exp, matmul, log, add the maxima back), until one matrix is
left; then a logsumexp over it with the boundary vectors. Every slice bound and the padding are
computed from the shape of the big tensor, so the TorchScript exporter writes them as `Shape`
arithmetic.

Inputs: x [n, t, v, c], bulk [1, t, v-1, c, c], p0 [1, t, c]; n and t are symbolic, v and c fixed at
export. The defaults (v=10, c=16) keep test inputs small and still pad at three levels of the tree
(9 -> 10, 5 -> 6, 3 -> 4 matrices); the forum's sizes are --v 40 --c 200.

Usage: .venv/bin/python tools/forum_chain.py OUTDIR [--v 10] [--c 16] [--inputs n,t ...]
writes OUTDIR/models/logspace_forum.onnx (dynamo), OUTDIR/models/logspace_forum.legacy.onnx
(TorchScript) and, per --inputs size, OUTDIR/inputs/logspace_forum_<n>.npz (seeded; t as given).
"""

import argparse
import os
import warnings

import numpy as np
import torch
import torch.nn.functional as F


class LogChain(torch.nn.Module):
    def forward(self, x, bulk, p0):
        # [n, t, v-1, c, c]: the v-1 transition matrices of each chain, in log space.
        middle = x[:, :, :-1, :, None] + torch.log(bulk)
        while middle.shape[2] > 1:
            k = middle.shape[2]
            if k % 2 == 1:
                # Pad the stack with a zero matrix so it splits into pairs.
                middle = F.pad(middle, (0, 0, 0, 0, 0, 1))
            a = middle[:, :, 0::2]
            b = middle[:, :, 1::2]
            ma = a.amax(dim=-1, keepdim=True)
            mb = b.amax(dim=-2, keepdim=True)
            middle = torch.log(torch.exp(a - ma) @ torch.exp(b - mb)) + ma + mb
        last = x[:, :, -1, None, :]
        scores = middle[:, :, 0] + torch.log(p0)[..., None] + last
        return torch.logsumexp(scores.flatten(-2), dim=-1)


def inputs(n, t, v, c, seed):
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((n, t, v, c)).astype(np.float32) * 0.1,
        "bulk": rng.uniform(0.5, 1.5, (1, t, v - 1, c, c)).astype(np.float32),
        "p0": rng.uniform(0.5, 1.5, (1, t, c)).astype(np.float32),
    }


def export(out_dir, v, c):
    m = LogChain().eval()
    ex = inputs(2, 3, v, c, 0)
    args = tuple(torch.from_numpy(ex[k]) for k in ("x", "bulk", "p0"))
    models = os.path.join(out_dir, "models")
    os.makedirs(models, exist_ok=True)
    n, t = torch.export.Dim("n"), torch.export.Dim("t")
    path = os.path.join(models, "logspace_forum.onnx")
    torch.onnx.export(
        m, args, path, dynamo=True, opset_version=18, input_names=["x", "bulk", "p0"],
        output_names=["logz"],
        dynamic_shapes={"x": {0: n, 1: t}, "bulk": {1: t}, "p0": {1: t}},
        external_data=False,
    )
    print("wrote", path)
    path = os.path.join(models, "logspace_forum.legacy.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            m, args, path, dynamo=False, opset_version=18, input_names=["x", "bulk", "p0"],
            output_names=["logz"],
            dynamic_axes={"x": {0: "n", 1: "t"}, "bulk": {1: "t"}, "p0": {1: "t"}, "logz": {0: "n", 1: "t"}},
        )
    print("wrote", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--v", type=int, default=10)
    ap.add_argument("--c", type=int, default=16)
    ap.add_argument("--inputs", nargs="*", default=[], help="sizes n,t to write seeded inputs for")
    ap.add_argument("--no-export", action="store_true")
    a = ap.parse_args()
    if not a.no_export:
        export(a.out_dir, a.v, a.c)
    for s in a.inputs:
        n, t = (int(x) for x in s.split(","))
        os.makedirs(os.path.join(a.out_dir, "inputs"), exist_ok=True)
        path = os.path.join(a.out_dir, "inputs", f"logspace_forum_{n}.npz")
        np.savez(path, **inputs(n, t, a.v, a.c, 1000 + n * 7 + t))
        print("wrote", path)


if __name__ == "__main__":
    main()
