#!/usr/bin/env python3
"""Regenerate the ONNX backend *node* conformance cases with onnx's own generators and writer.

The onnx wheel ships the node test-case generators (onnx/backend/test/case/node/*.py) but not the
generated data/node directory. This writes, for every case, the same layout as onnx's data/node:
    <out>/<case>/model.onnx
    <out>/<case>/test_data_set_<i>/input_<j>.pb, output_<j>.pb
Serialisation is onnx.backend.test.cmd_tools.generate_data's (tensor/sequence/map/optional protos).

Usage: python3 tools/gen_onnx_node_tests.py [OUT_DIR]     (default: target/onnx-node-tests/node,
relative to the repo root). Existing case directories are replaced; other files in OUT_DIR are kept.
With onnx 1.23.2 this produces 1884 cases (same as /work/shared/onnx-node-tests/node).
"""
import os
import shutil
import sys

import onnx
import onnx.backend.test.case.node as node_test
from onnx import TensorProto, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "target", "onnx-node-tests", "node")


def serialize(value, vi):
    """Same choices as onnx.backend.test.cmd_tools.generate_data."""
    if vi.type.HasField("map_type"):
        return numpy_helper.from_dict(value, vi.name).SerializeToString()
    if vi.type.HasField("sequence_type"):
        return numpy_helper.from_list(value, vi.name).SerializeToString()
    if vi.type.HasField("optional_type"):
        return numpy_helper.from_optional(value, vi.name).SerializeToString()
    assert vi.type.HasField("tensor_type"), vi
    if isinstance(value, TensorProto):
        return value.SerializeToString()
    return numpy_helper.from_array(value, vi.name).SerializeToString()


def main():
    out = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT)
    os.makedirs(out, exist_ok=True)
    cases = [c for c in node_test.collect_testcases() if c.kind == "node"]
    for case in cases:
        case_dir = os.path.join(out, case.name)
        if os.path.exists(case_dir):
            shutil.rmtree(case_dir)
        os.makedirs(case_dir)
        assert case.model and case.data_sets, case.name
        with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        graph = case.model.graph
        for i, (inputs, outputs) in enumerate(case.data_sets):
            ds = os.path.join(case_dir, f"test_data_set_{i}")
            os.makedirs(ds)
            for j, value in enumerate(inputs):
                with open(os.path.join(ds, f"input_{j}.pb"), "wb") as f:
                    f.write(serialize(value, graph.input[j]))
            for j, value in enumerate(outputs):
                with open(os.path.join(ds, f"output_{j}.pb"), "wb") as f:
                    f.write(serialize(value, graph.output[j]))
    print(f"onnx {onnx.__version__}: wrote {len(cases)} node cases into {out}")


if __name__ == "__main__":
    main()
