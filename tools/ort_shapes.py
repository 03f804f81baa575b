#!/usr/bin/env python3
"""Record onnxruntime reference shapes/dtypes of every top-level value, and the graph outputs,
for each corpus model (both variants) at two concrete sizes.

Writes (relative to the repo root):
  tests/fixtures/ort_shapes/<file stem>.<size>.json   e.g. of3_tri_att_start.legacy.64.json
      {"dims": {sym: int}, "inputs": {name: {dtype, shape}}, "values": {name: {dtype, shape}}}
      "values" = every non-empty output of every node of the top-level graph (initializers and
      graph inputs are not in "values"; graph outputs are, since nodes produce them).
  tests/fixtures/ort_outputs/<file stem>.<size>.npz    graph outputs (keys = output names)
  tests/corpus/inputs/<stem>_<size2>.npz               size-2 inputs (only when missing, or --regen-inputs)

Size 1 = the input npz copied from the shared corpus (smallest size there); size 2 = inputs built here
deterministically (seeded, see make_size2_inputs). onnxruntime runs on CPU with 1 thread and graph
optimizations DISABLED, with every node output exposed as an extra graph output (elem types taken from
strict onnx shape inference; shapes left unspecified), so the intermediates are the original values.
Needs: python3 with onnx, onnxruntime, numpy.  Run: python3 tools/ort_shapes.py [--regen-inputs] [stem ...]
"""
import argparse
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, shape_inference

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "corpus")
MODELS = os.path.join(CORPUS, "models")
INPUTS = os.path.join(CORPUS, "inputs")
SHAPES_OUT = os.path.join(ROOT, "tests", "fixtures", "ort_shapes")
OUTPUTS_OUT = os.path.join(ROOT, "tests", "fixtures", "ort_outputs")

# stem -> (size 1 = copied shared npz, size 2 = generated here). The size is the manifest's size_meaning
# symbol (N, S, t, N_token); the full symbol assignment is recorded in each JSON's "dims".
SIZES = {
    "bert_encoder": (128, 40),
    "gpt2_decoder": (128, 40),
    "logspace_matrix_chain": (64, 24),
    "of3_attn_pair_bias": (64, 48),
    "of3_pair_transition": (64, 48),
    "of3_pairformer_block": (64, 48),
    "of3_token_frame_atoms_gather": (128, 40),
    "of3_tri_att_start": (64, 48),
    "of3_tri_mul_out": (64, 48),
}


def token_mask(n, n_masked):
    m = np.ones((1, n), np.float32)
    if n_masked:
        m[0, n - n_masked:] = 0.0
    return m


def make_size2_inputs(stem, size):
    """Deterministic size-2 inputs. Seed = 20240 + size (numpy default_rng)."""
    rng = np.random.default_rng(20240 + size)
    if stem.startswith("of3_") and stem != "of3_token_frame_atoms_gather":
        n = size
        sm = token_mask(n, 5)  # last 5 tokens padded out: exercises the masking paths
        pm = (sm[:, :, None] * sm[:, None, :]).astype(np.float32)
        z = rng.standard_normal((1, n, n, 32), dtype=np.float32)
        s = rng.standard_normal((1, n, 64), dtype=np.float32)
        return {
            "of3_pairformer_block": {"s": s, "z": z, "single_mask": sm, "pair_mask": pm},
            "of3_attn_pair_bias": {"s": s, "z": z, "single_mask": sm},
        }.get(stem, {"z": z, "pair_mask": pm})
    if stem in ("bert_encoder", "gpt2_decoder"):
        b, s = 2, size  # B=2 so that B differs from size 1 (B=1)
        ids = rng.integers(0, 1024, (b, s), dtype=np.int64)  # vocab 1024
        mask = np.ones((b, s), np.int64)
        mask[1, s - 8:] = 0  # second sequence right-padded by 8
        return {"input_ids": ids, "attention_mask": mask}
    if stem == "logspace_matrix_chain":
        n, t, v, c = 4, size, 16, 32  # n=4 so that n differs from size 1 (n=8)
        x = rng.standard_normal((n, t, v, c), dtype=np.float32)
        bulk = rng.uniform(0.05, 1.05, (1, t, v - 1, c, c)).astype(np.float32)
        g = rng.standard_normal((1, t, c))
        p0 = (np.exp(g) / np.exp(g).sum(-1, keepdims=True)).astype(np.float32)  # rows sum to 1
        return {"x": x, "bulk": bulk, "p0": p0}
    if stem == "of3_token_frame_atoms_gather":
        # A consistent sub-structure of the size-1 input (no RNG): the first 14/13/13 tokens of chains
        # 0/1/2 and all their atoms; start_atom_index / atom_to_token recomputed. Masks stay all ones
        # (as in the shared inputs) so TopK over atom distances has no ties.
        src = dict(np.load(os.path.join(INPUTS, f"{stem}_{SIZES[stem][0]}.npz")))
        asym = src["asym_id"][0]
        take = {0: 14, 1: 13, 2: 13}
        toks = np.concatenate([np.nonzero(asym == ch)[0][:k] for ch, k in take.items()])
        assert len(toks) == size
        start = src["start_atom_index"][0].astype(np.int64)
        cnt = src["num_atoms_per_token"][0].astype(np.int64)
        atoms = np.concatenate([np.arange(start[t], start[t] + cnt[t]) for t in toks])
        new_cnt = cnt[toks]
        out = {}
        for k, a in src.items():
            if k in ("x", "atom_mask"):
                out[k] = a[:, atoms]
            elif k not in ("atom_to_token",):
                out[k] = a[:, toks]
        out["num_atoms_per_token"] = new_cnt[None].astype(np.float32)
        out["start_atom_index"] = np.concatenate([[0], np.cumsum(new_cnt)[:-1]])[None].astype(np.float32)
        out["atom_to_token"] = np.repeat(np.arange(size, dtype=np.int64), new_cnt)[None]
        return {k: np.ascontiguousarray(out[k]) for k in src}
    raise KeyError(stem)


def load_inputs(stem, size, regen):
    path = os.path.join(INPUTS, f"{stem}_{size}.npz")
    if size == SIZES[stem][1] and (regen or not os.path.exists(path)):
        np.savez(path, **make_size2_inputs(stem, size))
        print("wrote", os.path.relpath(path, ROOT))
    with np.load(path) as d:
        return {k: d[k] for k in d.files}


def onnx_type_name(np_dtype):
    return onnx.TensorProto.DataType.Name(helper.np_dtype_to_tensor_dtype(np.dtype(np_dtype))).lower()


def elem_type_name(elem):
    return onnx.TensorProto.DataType.Name(elem).lower()


def expose_all(model):
    """Copy of model with every top-level node output added as a graph output."""
    inferred = shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    types = {}
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        if vi.type.HasField("tensor_type"):
            types[vi.name] = vi.type.tensor_type.elem_type
    m = onnx.ModelProto()
    m.CopyFrom(model)
    existing = {o.name for o in m.graph.output}
    names = []
    for node in m.graph.node:
        for o in node.output:
            if not o or o in names:
                continue
            names.append(o)
            if o not in existing:
                if not types.get(o):
                    raise RuntimeError(f"no inferred elem type for {o}")
                m.graph.output.append(helper.make_tensor_value_info(o, types[o], None))
    return m, names, types


def symbol_dims(model, feeds):
    dims = {}
    for inp in model.graph.input:
        if inp.name not in feeds:
            continue
        shape = feeds[inp.name].shape
        decl = inp.type.tensor_type.shape.dim
        assert len(decl) == len(shape), (inp.name, shape)
        for d, v in zip(decl, shape):
            if d.HasField("dim_param"):
                assert dims.setdefault(d.dim_param, int(v)) == int(v), (d.dim_param, v)
            elif d.HasField("dim_value"):
                assert d.dim_value == v, (inp.name, d.dim_value, v)
    return dims


def session(model_bytes, optimize=False):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def dump_json(path, doc):
    # sorted keys; one entry per line for the per-value maps (small, diff-friendly files)
    def entries(d):
        return ",\n".join(f"  {json.dumps(k)}: {json.dumps(d[k], sort_keys=True)}" for k in sorted(d))
    text = "{\n"
    text += f' "dims": {json.dumps(doc["dims"], sort_keys=True)},\n'
    text += ' "inputs": {\n' + entries(doc["inputs"]) + "\n },\n"
    text += ' "values": {\n' + entries(doc["values"]) + "\n }\n}\n"
    assert json.loads(text) == doc
    with open(path, "w") as f:
        f.write(text)


def process(fname, size, feeds_all, notes):
    fstem = fname[: -len(".onnx")]
    model = onnx.load(os.path.join(MODELS, fname))
    feeds = {i.name: feeds_all[i.name] for i in model.graph.input}  # legacy token_frame has fewer inputs
    dims = symbol_dims(model, feeds)
    exposed, names, inferred = expose_all(model)
    sess = session(exposed.SerializeToString())
    out_names = [o.name for o in sess.get_outputs()]
    res = dict(zip(out_names, sess.run(None, feeds)))
    values = {}
    for n in names:
        a = np.asarray(res[n])
        values[n] = {"dtype": onnx_type_name(a.dtype), "shape": [int(x) for x in a.shape]}
        if inferred.get(n) and elem_type_name(inferred[n]) != values[n]["dtype"]:
            notes.append(f"{fstem}: {n} inferred {elem_type_name(inferred[n])} but ORT gave {values[n]['dtype']}")
    doc = {
        "dims": dims,
        "inputs": {k: {"dtype": onnx_type_name(v.dtype), "shape": list(v.shape)} for k, v in feeds.items()},
        "values": values,
    }
    dump_json(os.path.join(SHAPES_OUT, f"{fstem}.{size}.json"), doc)

    graph_outs = [o.name for o in model.graph.output]
    outs = {k: np.asarray(res[k]) for k in graph_outs}
    for k, a in outs.items():
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            notes.append(f"{fstem}.{size}: output {k} has non-finite values")
    # sanity: the exposed DISABLE_ALL run agrees with a plain default-optimized run of the original model
    ref = session(model.SerializeToString(), optimize=True).run(graph_outs, feeds)
    for k, r in zip(graph_outs, ref):
        if not np.allclose(outs[k], r, rtol=1e-4, atol=1e-5, equal_nan=True):
            notes.append(f"{fstem}.{size}: output {k} differs from optimized run, "
                         f"max abs {np.max(np.abs(outs[k].astype(np.float64) - r)):.3g}")
    np.savez(os.path.join(OUTPUTS_OUT, f"{fstem}.{size}.npz"), **outs)
    print(f"{fstem}.{size}: dims {dims}, {len(values)} values, outputs "
          + ", ".join(f"{k}{list(v.shape)}" for k, v in outs.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stems", nargs="*", help="model stems (default: all)")
    ap.add_argument("--regen-inputs", action="store_true", help="rewrite the size-2 input npz files")
    args = ap.parse_args()
    os.makedirs(SHAPES_OUT, exist_ok=True)
    os.makedirs(OUTPUTS_OUT, exist_ok=True)
    notes = []
    for stem in args.stems or sorted(SIZES):
        for size in SIZES[stem]:
            feeds = load_inputs(stem, size, args.regen_inputs)
            for fname in (f"{stem}.onnx", f"{stem}.legacy.onnx"):
                process(fname, size, feeds, notes)
    for n in notes:
        print("NOTE:", n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
