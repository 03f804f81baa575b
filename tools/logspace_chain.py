#!/usr/bin/env python3
"""Writes the log-space matrix chain (the forum case of issue 6) as ONNX, for any v and c.

The program, as the corpus model `logspace_matrix_chain` computes it (there with v=16, c=32):

    middle = x[..., :-1, :, None] + log(bulk)              # [n, t, v-1, c, c]
    while middle has more than one matrix:                 # pairwise, left to right
        pairs  = logmatmul(middle[:, :, 0:k-1:2], middle[:, :, 1:k:2])
        middle = cat(pairs, middle[:, :, k-1:]) if k is odd else pairs
    logZ = logsumexp(middle[:, :, 0] + log(p0)[..., None] + x[:, :, -1, None, :], over c*c)   # [n, t]

with logmatmul(a, b) = log(exp(a - max_a) @ exp(b - max_b)) + max_a + max_b (max_a over a's rows,
max_b over b's columns). Inputs: x [n, t, v, c], bulk [1, t, v-1, c, c], p0 [1, t, c]; n and t are
symbolic. Built with onnx.helper (opset 18), so it needs no torch.

Usage: .venv/bin/python tools/logspace_chain.py OUT.onnx [--v 40] [--c 200]
       [--inputs OUT.npz --n 500 --t 1]   (also write seeded inputs)
"""

import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(v, c):
    nodes, inits = [], []
    counter = [0]

    def name(base):
        counter[0] += 1
        return f"{base}_{counter[0]}"

    def const(vals):
        n = name("c")
        inits.append(numpy_helper.from_array(np.array(vals, dtype=np.int64), n))
        return n

    def op(kind, inputs, **attrs):
        out = name(kind.lower())
        nodes.append(helper.make_node(kind, inputs, [out], name=out + "_node", **attrs))
        return out

    def slice_(x, start, end, axis, step=1):
        return op("Slice", [x, const([start]), const([end]), const([axis]), const([step])])

    def logmatmul(a, b):
        ma = op("ReduceMax", [a, const([-1])], keepdims=1)
        mb = op("ReduceMax", [b, const([-2])], keepdims=1)
        ea = op("Exp", [op("Sub", [a, ma])])
        eb = op("Exp", [op("Sub", [b, mb])])
        return op("Add", [op("Add", [op("Log", [op("MatMul", [ea, eb])]), ma]), mb])

    x_head = slice_("x", 0, v - 1, 2)
    middle = op("Add", [op("Unsqueeze", [x_head, const([4])]), op("Log", ["bulk"])])
    k = v - 1
    while k > 1:
        pairs = logmatmul(slice_(middle, 0, k - 1, 2, 2), slice_(middle, 1, k, 2, 2))
        if k % 2:
            middle = op("Concat", [pairs, slice_(middle, k - 1, k, 2)], axis=2)
        else:
            middle = pairs
        k = (k + 1) // 2
    first = op("Gather", [middle, const(0)], axis=2)  # [n, t, c, c]
    logp0 = op("Unsqueeze", [op("Log", ["p0"]), const([3])])  # [1, t, c, 1]
    last = op("Unsqueeze", [op("Gather", ["x", const(-1)], axis=2), const([2])])  # [n, t, 1, c]
    s = op("Add", [op("Add", [first, logp0]), last])
    flat = op("Reshape", [s, const([0, 0, c * c])])
    nodes.append(
        helper.make_node("ReduceLogSumExp", [flat, const([-1])], ["logZ"], name="logZ_node", keepdims=0)
    )
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        f"logspace_matrix_chain_v{v}_c{c}",
        [
            helper.make_tensor_value_info("x", f, ["n", "t", v, c]),
            helper.make_tensor_value_info("bulk", f, [1, "t", v - 1, c, c]),
            helper.make_tensor_value_info("p0", f, [1, "t", c]),
        ],
        [helper.make_tensor_value_info("logZ", f, ["n", "t"])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="memplan tools")
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--v", type=int, default=40)
    ap.add_argument("--c", type=int, default=200)
    ap.add_argument("--inputs", default=None)
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--t", type=int, default=1)
    a = ap.parse_args()
    onnx.save(build(a.v, a.c), a.out)
    if a.inputs:
        rng = np.random.default_rng(7)
        z = rng.standard_normal((1, a.t, a.c))
        np.savez(
            a.inputs,
            x=rng.standard_normal((a.n, a.t, a.v, a.c)).astype(np.float32),
            bulk=rng.uniform(0.05, 1.05, (1, a.t, a.v - 1, a.c, a.c)).astype(np.float32),
            p0=(np.exp(z) / np.exp(z).sum(-1, keepdims=True)).astype(np.float32),
        )


if __name__ == "__main__":
    main()
