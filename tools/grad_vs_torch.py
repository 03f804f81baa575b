"""A second implementation of the corpus models' gradients: PyTorch autograd on the model converted
back to torch by onnx2torch, against `memplan grad` run by memplan's executor.

For each corpus model (both exports) that onnx2torch converts: `memplan grad MODEL --wrt inputs --of
<first output>` (the gradient of the sum of the output with respect to every float graph input; for
a model whose inputs are all integers, token ids, `--wrt weights`, each weight matched to the one
torch tensor of the same shape and bits), run on the corpus inputs of the smaller size; torch: the
converted module, `output.sum().backward()`. Reports per model the largest error over the tolerance
`1e-4 |torch| + 1e-4 max|torch| + 1e-6` (at most 1 passes).

Exporters write `Reshape(allowzero=1)`, which onnx2torch does not take; it means the same as
allowzero=0 unless a shape holds 0, which needs a zero-sized dim, and the corpus inputs have none, so
the script writes 0. onnx2torch lacks GreaterOrEqual, LessOrEqual and ReduceMax at these opsets; the
script registers them (one torch function each). Needs torch and onnx2torch (not part of the
project's dependencies).

Usage: .venv/bin/python tools/grad_vs_torch.py [--memplan target/release/memplan]
"""

import argparse
import os
import subprocess
import tempfile
import warnings

import numpy as np
import onnx
import torch

warnings.filterwarnings("ignore")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(REPO, "tests/corpus/models")
INPUTS = os.path.join(REPO, "tests/corpus/inputs")


def without_allowzero(model):
    """allowzero=1 -> 0 on every Reshape: the two differ only where a shape holds 0, which needs a
    zero-sized dim, and the corpus inputs have none."""
    for n in model.graph.node:
        if n.op_type == "Reshape":
            for a in n.attribute:
                if a.name == "allowzero":
                    a.i = 0
    return model


def register_missing_converters():
    """onnx2torch lacks GreaterOrEqual, LessOrEqual and ReduceMax with axes as an input (opset 18);
    each is a one-line torch function."""
    from onnx2torch.node_converters.registry import add_converter
    from onnx2torch.utils.common import OperationConverterResult, onnx_mapping_from_node

    class Fn(torch.nn.Module):
        def __init__(self, f):
            super().__init__()
            self.f = f

        def forward(self, *xs):
            return self.f(*xs)

    def simple(op, f):
        for version in (12, 16):
            try:
                @add_converter(operation_type=op, version=version)
                def _(node, graph, f=f):
                    return OperationConverterResult(torch_module=Fn(f), onnx_mapping=onnx_mapping_from_node(node))
            except ValueError:  # already there
                pass

    simple("GreaterOrEqual", lambda a, b: a >= b)
    simple("LessOrEqual", lambda a, b: a <= b)

    def reduce_max(node, graph):
        keep = bool(node.attributes.get("keepdims", 1))
        attr_axes = node.attributes.get("axes")

        def f(x, axes=None):
            dims = attr_axes if axes is None else [int(v) for v in axes.tolist()]
            if dims is None:
                return x.amax(dim=tuple(range(x.dim())), keepdim=keep)
            return x.amax(dim=tuple(int(d) for d in dims), keepdim=keep)

        return OperationConverterResult(torch_module=Fn(f), onnx_mapping=onnx_mapping_from_node(node))

    for version in (1, 11, 12, 13, 18, 20):
        try:
            add_converter(operation_type="ReduceMax", version=version)(reduce_max)
        except ValueError:  # already there
            pass


def compare(pairs):
    """(elements, max relative difference, allclose) over (memplan, torch) gradient pairs."""
    worst, elems = 0.0, 0
    for got, want in pairs:
        tol = 1e-4 * np.abs(want) + 1e-6 + 1e-4 * np.abs(want).max()
        worst = max(worst, float(np.max(np.abs(got - want) / tol)))
        elems += want.size
    return elems, worst, worst <= 1.0


def weights_row(memplan, f, model, module, feeds, names, npz, tmp):
    """A model whose inputs are all integers (token ids): gradients with respect to its weights.
    onnx2torch keeps initializers as buffers or module parameters under its own names; each weight
    is matched to the one torch tensor with the same shape and bits (ambiguous ones are skipped)."""
    out = model.graph.output[0].name
    train = os.path.join(tmp, f"{f}.train.onnx")
    r = subprocess.run([memplan, "grad", os.path.join(MODELS, f), "--wrt", "weights", "--of", out, "-o", train],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"| {f} | memplan grad: {r.stderr.strip()[:80]} | | | |")
        return
    res = os.path.join(tmp, f"{f}.out.npz")
    subprocess.run([memplan, "run", train, "--inputs-npz", npz, "--out", res], check=True, capture_output=True)
    mine = dict(np.load(res))
    tensors = dict(module.named_parameters())
    tensors.update(dict(module.named_buffers()))
    for t in tensors.values():
        if t.dtype.is_floating_point:
            t.requires_grad_(True)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    matched = {}
    for name, w in inits.items():
        if f"{name}_grad" not in mine or w.dtype.kind != "f":
            continue
        same = [k for k, t in tensors.items()
                if tuple(t.shape) == w.shape and np.array_equal(t.detach().numpy(), w)]
        if len(same) == 1:
            matched[name] = same[0]
    try:
        y = module(*[torch.tensor(feeds[n]) for n in names])
    except Exception as e:  # noqa: BLE001 - a converter bug is reported, not fatal
        print(f"| {f} | onnx2torch's module fails: {str(e).splitlines()[0][:80]} | | | |")
        return
    y = y[0] if isinstance(y, (tuple, list)) else y
    y.sum().backward()
    pairs = []
    for name, k in matched.items():
        g = tensors[k].grad
        want = g.numpy() if g is not None else np.zeros_like(inits[name])
        pairs.append((mine[f"{name}_grad"], want))
    elems, worst, ok = compare(pairs)
    print(f"| {f} | {len(matched)} of {sum(1 for k in mine if k.endswith('_grad'))} weights (matched by bits) "
          f"| {elems} | {worst:.2e} | {'yes' if ok else 'NO'} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", default=os.path.join(REPO, "target/release/memplan"))
    a = ap.parse_args()
    import onnx2torch

    register_missing_converters()
    tmp = tempfile.mkdtemp()
    print("| model | differentiated | elements | max error / tolerance | within tolerance |")
    print("|---|---|---:|---:|---|")
    for f in sorted(os.listdir(MODELS)):
        stem = f.split(".")[0]
        sizes = sorted(int(p.rsplit("_", 1)[1][:-4]) for p in os.listdir(INPUTS) if p.rsplit("_", 1)[0] == stem)
        if not sizes:
            continue
        npz = os.path.join(INPUTS, f"{stem}_{sizes[0]}.npz")
        model = onnx.load(os.path.join(MODELS, f))
        try:
            module = onnx2torch.convert(without_allowzero(model))
        except Exception as e:  # noqa: BLE001 - a converter gap is reported, not fatal
            print(f"| {f} | onnx2torch cannot convert it: {str(e).splitlines()[0][:80]} | | | |")
            continue
        feeds = dict(np.load(npz))
        names = [i.name for i in model.graph.input]
        floats = [n for n in names if feeds[n].dtype.kind == "f"]
        if not floats:
            weights_row(a.memplan, f, model, module, feeds, names, npz, tmp)
            continue
        out = model.graph.output[0].name
        train = os.path.join(tmp, f"{f}.train.onnx")
        r = subprocess.run([a.memplan, "grad", os.path.join(MODELS, f), "--wrt", "inputs", "--of", out, "-o", train],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"| {f} | memplan grad: {r.stderr.strip()[:80]} | | | |")
            continue
        res = os.path.join(tmp, f"{f}.out.npz")
        subprocess.run([a.memplan, "run", train, "--inputs-npz", npz, "--out", res], check=True, capture_output=True)
        mine = dict(np.load(res))
        args = [torch.tensor(feeds[n], requires_grad=feeds[n].dtype.kind == "f") for n in names]
        y = module(*args)
        y = y[0] if isinstance(y, (tuple, list)) else y
        y.sum().backward()
        pairs = []
        for n, t in zip(names, args):
            if n not in floats:
                continue
            want = t.grad.numpy() if t.grad is not None else np.zeros_like(feeds[n])
            pairs.append((mine[f"{n}_grad"], want))
        elems, worst, ok = compare(pairs)
        print(f"| {f} | {', '.join(floats)} | {elems} | {worst:.2e} | {'yes' if ok else 'NO'} |")


if __name__ == "__main__":
    main()
