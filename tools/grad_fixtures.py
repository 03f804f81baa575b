"""Reference gradients of the corpus models from onnxruntime, for `crates/cli/tests/grad_corpus.rs`.

For every model in tests/corpus/models (both exporters) this runs `memplan grad` (the binary given by
--memplan, default target/release/memplan) with respect to a selection of values, runs the training
graph in onnxruntime (CPU, 1 thread, ORT_DISABLE_ALL) on the size-1 corpus inputs, and writes
`tests/fixtures/grad_ort/<file stem>.npz` (the gradient outputs of the training graph) and
`tests/fixtures/grad_ort/<file stem>.json` ({"wrt": [...], "dims": {...}, "inputs": "<npz>"}).

Selection: every float initializer of rank >= 1 with at most 4096 elements (all of the small OpenFold3 blocks'
weights, and the biases, norms and small matrices of the transformers, so that the fixtures stay
small while the backward pass still runs through every layer); for models whose output does not
depend on a weight (log-space chain, token frame), the float graph inputs.

Usage: .venv/bin/python tools/grad_fixtures.py [--memplan PATH] [STEM ...]
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(REPO, "tests/corpus/models")
INPUTS = os.path.join(REPO, "tests/corpus/inputs")
OUT = os.path.join(REPO, "tests/fixtures/grad_ort")
MAX_ELEMS = 4096
INPUT_WRT = {"logspace_matrix_chain", "of3_token_frame_atoms_gather"}


def size1_inputs(base):
    """The size-1 inputs: the corpus npz with the larger size (the shared corpus copy)."""
    m = json.load(open(os.path.join(REPO, "tests/corpus/manifest.json")))
    cands = sorted(f for f in os.listdir(INPUTS) if f.startswith(base + "_") and f.endswith(".npz"))
    # The smaller size keeps the fixtures small.
    sizes = sorted(cands, key=lambda f: int(f[len(base) + 1 : -4]))
    return os.path.join(INPUTS, sizes[0])


def wrt_of(path, base):
    m = onnx.load(path)
    if base in INPUT_WRT:
        return "inputs"
    names = []
    for t in m.graph.initializer:
        if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16):
            n = int(np.prod(t.dims)) if len(t.dims) else 1
            # 0-d constants (mask fill values, epsilons) are not trained weights.
            if len(t.dims) > 0 and n <= MAX_ELEMS:
                names.append(t.name)
    return ",".join(names)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", default=os.path.join(REPO, "target/release/memplan"))
    ap.add_argument("stems", nargs="*")
    a = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    files = sorted(f for f in os.listdir(MODELS) if f.endswith(".onnx"))
    for f in files:
        stem = f[:-5]
        base = stem[: -len(".legacy")] if stem.endswith(".legacy") else stem
        if a.stems and stem not in a.stems and base not in a.stems:
            continue
        path = os.path.join(MODELS, f)
        wrt = wrt_of(path, base)
        train = os.path.join("/tmp", f"grad_{stem}.onnx")
        subprocess.run([a.memplan, "grad", path, "--wrt", wrt, "-o", train], check=True,
                       stdout=subprocess.DEVNULL)
        onnx.checker.check_model(onnx.load(train), full_check=True)
        inp_path = size1_inputs(base)
        feeds_all = dict(np.load(inp_path))
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(train, so, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        feeds = {k: feeds_all[k] for k in names}
        outs = sess.run(None, feeds)
        out_names = [o.name for o in sess.get_outputs()]
        # Only the gradients: the forward outputs are checked against tests/fixtures/ort_outputs.
        forward = {o.name for o in onnx.load(path).graph.output}
        grads = {n: o for n, o in zip(out_names, outs) if n not in forward}
        np.savez(os.path.join(OUT, f"{stem}.npz"), **grads)
        dims = {}
        for i in sess.get_inputs():
            for d, v in zip(i.shape, feeds[i.name].shape):
                if isinstance(d, str):
                    dims[d] = int(v)
        meta = {"wrt": wrt, "dims": dims, "inputs": os.path.relpath(inp_path, REPO)}
        with open(os.path.join(OUT, f"{stem}.json"), "w") as fh:
            json.dump(meta, fh, indent=1, sort_keys=True)
            fh.write("\n")
        kb = os.path.getsize(os.path.join(OUT, f"{stem}.npz")) // 1024
        print(f"{stem}: {len(grads)} gradients, {kb} KiB, dims {dims}")


if __name__ == "__main__":
    sys.exit(main())
