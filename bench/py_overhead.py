"""What calling `memplan.estimate` from Python costs over the Rust library call, on a 2,000-node model.

The Rust side is `memplan_cli::estimate::estimate_model`, timed inside the extension
(`Estimate.rust_seconds`); the Python side is the whole `memplan.estimate(model, dims)` call on a model
already read (`memplan.load`), so the difference is the binding: argument conversion, releasing the GIL,
serializing the report to JSON, `json.loads` and building the `Estimate`. The model is generated here:
500 blocks of MatMul, Add, Relu, Mul over [N, 64] with N symbolic (2,000 nodes, one live tensor set
per step), so nothing is downloaded. Run it with the package installed (or `PYTHONPATH` at a staged
copy):

    python bench/py_overhead.py [--blocks 500] [--repeat 200]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import memplan


def chain_model(blocks: int, width: int = 64) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "x"
    for i in range(blocks):
        w, b, s = f"w{i}", f"b{i}", f"s{i}"
        inits += [
            numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32), w),
            numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), b),
            numpy_helper.from_array(np.float32(0.5).reshape(()), s),
        ]
        nodes += [
            helper.make_node("MatMul", [x, w], [f"m{i}"], name=f"matmul_{i}"),
            helper.make_node("Add", [f"m{i}", b], [f"a{i}"], name=f"add_{i}"),
            helper.make_node("Relu", [f"a{i}"], [f"r{i}"], name=f"relu_{i}"),
            helper.make_node("Mul", [f"r{i}", s], [f"y{i}"], name=f"mul_{i}"),
        ]
        x = f"y{i}"
    g = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", width])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=200)
    a = ap.parse_args()
    model = memplan.load(chain_model(a.blocks))
    nodes = model.inspect()["nodes"]
    dims = {"N": 4096}
    for _ in range(10):  # warm up
        memplan.estimate(model, dims, budget="1GiB")
    total, rust = [], []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        est = memplan.estimate(model, dims, budget="1GiB")
        total.append(time.perf_counter() - t0)
        rust.append(est.rust_seconds)
    over = [t - r for t, r in zip(total, rust)]
    ms = lambda v: f"{1e3 * v:.3f} ms"  # noqa: E731
    print(f"model        {nodes} nodes, dims N={dims['N']}, {len(est.live_at_peak)} tensors live at the peak")
    print(f"rust call    median {ms(statistics.median(rust))}")
    print(f"python call  median {ms(statistics.median(total))}")
    print(f"overhead     median {ms(statistics.median(over))}, p90 {ms(sorted(over)[int(0.9 * len(over))])}, max {ms(max(over))}")
    t0 = time.perf_counter()
    memplan.estimate(chain_model(a.blocks).SerializeToString(), dims)
    print(f"from bytes   {ms(time.perf_counter() - t0)} (reading and inferring the model included)")


if __name__ == "__main__":
    main()
