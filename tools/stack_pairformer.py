"""Composes the corpus OpenFold3 PairFormer block K times into one model with a scalar loss.

`python tools/stack_pairformer.py [-k 4] [-o OUT.onnx]` reads tests/corpus/models/of3_pairformer_block.onnx
(dynamo export) and writes a model whose block i reads block i-1's `s_out`/`z_out` (every block
reads the same `single_mask`/`pair_mask`), with each block's weights its own copy, and one extra
output `loss = ReduceSum(s_out) + ReduceSum(z_out)` of the last block, so that `memplan grad --of
loss` differentiates every weight of every block. Used by bench/train_stack.py.
"""

import argparse
import copy
import os

import onnx
from onnx import helper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = {"single_mask", "pair_mask"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", type=int, default=4)
    ap.add_argument("-o", default="/tmp/of3_pairformer_stack.onnx")
    a = ap.parse_args()
    block = onnx.load(os.path.join(REPO, "tests/corpus/models/of3_pairformer_block.onnx"))
    g = block.graph
    nodes, inits = [], []
    prev = {"s": "s", "z": "z"}
    for k in range(a.k):
        pre = f"b{k}/"

        def ren(n):
            if n == "" or n in SHARED:
                return n
            if n in ("s", "z"):
                return prev[n]
            return pre + n

        for t in g.initializer:
            t2 = copy.deepcopy(t)
            t2.name = ren(t.name)
            inits.append(t2)
        for n in g.node:
            n2 = copy.deepcopy(n)
            n2.name = pre + n.name
            n2.input[:] = [ren(x) for x in n.input]
            n2.output[:] = [ren(x) for x in n.output]
            nodes.append(n2)
        prev = {"s": pre + "s_out", "z": pre + "z_out"}
    nodes.append(helper.make_node("ReduceSum", [prev["s"]], ["loss_s"], keepdims=0))
    nodes.append(helper.make_node("ReduceSum", [prev["z"]], ["loss_z"], keepdims=0))
    nodes.append(helper.make_node("Add", ["loss_s", "loss_z"], ["loss"]))
    outs = [copy.deepcopy(o) for o in g.output]
    outs[0].name = prev["s"]
    outs[1].name = prev["z"]
    outs.append(helper.make_tensor_value_info("loss", onnx.TensorProto.FLOAT, []))
    graph = helper.make_graph(nodes, f"pairformer_stack_{a.k}", list(g.input), outs, inits)
    m = helper.make_model(graph, opset_imports=block.opset_import, ir_version=block.ir_version)
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, a.o)
    print(f"wrote {a.o}: {a.k} blocks, {len(nodes)} nodes, {len(inits)} initializers")


if __name__ == "__main__":
    main()
