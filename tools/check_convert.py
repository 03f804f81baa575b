#!/usr/bin/env python3
"""Check a converted ONNX model against its original.

1. `onnx.checker.check_model(converted, full_check=True)` (by path, so external data and >2 GiB work).
2. Runs both models with onnxruntime (CPU, 1 thread, same session options) on the same inputs and
   compares every output bit for bit (dtype, shape and raw bytes; NaN payloads included).

Inputs come from an .npz (keys = graph input names, e.g. tests/corpus/inputs/*.npz) or are drawn at
random: symbolic dims take values from --dims NAME=VALUE (default --default-dim), floats are standard
normal, integers uniform in [0, --int-high), bools uniform.

Exit status: 0 identical, 1 an output differs or the checker failed, 2 usage or runtime error.

Example:
  python3 tools/check_convert.py orig.onnx conv.onnx --inputs tests/corpus/inputs/bert_encoder_s16.npz
  python3 tools/check_convert.py orig.onnx conv.onnx --dims N=16 --seed 1
"""

import argparse
import sys

import numpy as np

ORT_TO_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int16)": np.int16,
    "tensor(int8)": np.int8,
    "tensor(uint64)": np.uint64,
    "tensor(uint32)": np.uint32,
    "tensor(uint16)": np.uint16,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


def parse_dims(items):
    dims = {}
    for item in items or []:
        for part in item.split(","):
            if not part:
                continue
            name, sep, value = part.partition("=")
            if not sep:
                raise SystemExit(f"--dims: '{part}' is not NAME=VALUE")
            dims[name.strip()] = int(value)
    return dims


def session(path, opt_level):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = opt_level
    return ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])


def random_inputs(sess, dims, default_dim, int_high, rng):
    feeds = {}
    for inp in sess.get_inputs():
        dtype = ORT_TO_NUMPY.get(inp.type)
        if dtype is None:
            raise SystemExit(f"input '{inp.name}': type {inp.type} has no random generator; pass --inputs")
        shape = []
        for d in inp.shape:
            if isinstance(d, int) and d >= 0:
                shape.append(d)
            else:
                shape.append(dims.get(str(d), default_dim) if d is not None else default_dim)
        if np.issubdtype(dtype, np.floating):
            feeds[inp.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype is np.bool_:
            feeds[inp.name] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            feeds[inp.name] = rng.integers(0, int_high, shape).astype(dtype)
    return feeds


def same_bits(a, b):
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False, f"dtype/shape {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
    if a.dtype == object:
        return (a.tolist() == b.tolist()), "string values differ"
    if a.tobytes() == b.tobytes():
        return True, ""
    detail = "bytes differ"
    if np.issubdtype(a.dtype, np.number):
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        n = int(np.count_nonzero(a.view(np.uint8).reshape(a.size, -1) != b.view(np.uint8).reshape(b.size, -1)))
        detail = f"{n} byte(s) differ, max |diff| {np.nanmax(diff) if diff.size else 0}"
    return False, detail


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("original", help="the model before conversion")
    ap.add_argument("converted", help="the model after conversion (checked with onnx.checker full_check)")
    ap.add_argument("--inputs", help=".npz with one array per graph input name")
    ap.add_argument("--dims", action="append", help="symbolic dim values, NAME=VALUE[,NAME=VALUE...]")
    ap.add_argument("--default-dim", type=int, default=4, help="value of unnamed/unlisted symbolic dims (4)")
    ap.add_argument("--int-high", type=int, default=2, help="random integer inputs are in [0, INT_HIGH) (2)")
    ap.add_argument("--seed", type=int, default=0, help="random input seed (0)")
    ap.add_argument("--runs", type=int, default=1, help="random input sets to try (1; ignored with --inputs)")
    ap.add_argument("--no-opt", action="store_true", help="disable onnxruntime graph optimizations")
    ap.add_argument("--skip-checker", action="store_true", help="do not run onnx.checker")
    args = ap.parse_args(argv)

    import onnx
    import onnxruntime as ort

    ok = True
    if not args.skip_checker:
        try:
            onnx.checker.check_model(args.converted, full_check=True)
            print(f"checker: {args.converted}: ok")
        except Exception as e:  # the checker raises several exception types
            print(f"checker: {args.converted}: FAILED: {e}".splitlines()[0])
            ok = False

    level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL if args.no_opt else ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    try:
        s_orig = session(args.original, level)
        s_conv = session(args.converted, level)
    except Exception as e:
        print(f"onnxruntime: cannot load: {e}".splitlines()[0])
        return 2

    orig_out = [o.name for o in s_orig.get_outputs()]
    conv_out = [o.name for o in s_conv.get_outputs()]
    if len(orig_out) != len(conv_out):
        print(f"outputs: original has {len(orig_out)}, converted has {len(conv_out)}")
        return 1
    if orig_out != conv_out:
        print(f"note: output names differ, comparing by position: {orig_out} vs {conv_out}")

    if args.inputs:
        with np.load(args.inputs, allow_pickle=False) as z:
            input_sets = [{k: z[k] for k in z.files}]
    else:
        rng = np.random.default_rng(args.seed)
        dims = parse_dims(args.dims)
        input_sets = [random_inputs(s_orig, dims, args.default_dim, args.int_high, rng) for _ in range(args.runs)]

    for i, feeds in enumerate(input_sets):
        names = {x.name for x in s_orig.get_inputs()}
        missing = sorted(names - feeds.keys())
        if missing:
            print(f"inputs: missing {missing}")
            return 2
        feeds = {k: v for k, v in feeds.items() if k in names}
        try:
            a = s_orig.run(None, feeds)
            b = s_conv.run(None, feeds)
        except Exception as e:
            print(f"onnxruntime: run failed: {e}".splitlines()[0])
            return 2
        for name, x, y in zip(orig_out, a, b):
            same, detail = same_bits(np.asarray(x), np.asarray(y))
            shape = list(np.asarray(x).shape)
            print(f"run {i}: output '{name}' {np.asarray(x).dtype}{shape}: {'identical' if same else 'DIFFERENT: ' + detail}")
            ok &= same
    print("result: " + ("identical" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
