"""A second implementation of the corpus models' gradients: PyTorch autograd, against `memplan grad`
run by memplan's executor.

For each corpus model (both exports): `memplan grad MODEL --wrt inputs --of <first output>` (the
gradient of the sum of the output with respect to every float graph input; for a model whose inputs
are all integers, token ids, `--wrt weights`), run by `memplan run` on the corpus inputs of the
smaller size; torch: a second module computing the same function, `output.sum().backward()`.
Reports per model which torch module was used, the largest forward difference, and the largest
gradient error over the tolerance `1e-4 |torch| + 1e-4 max|torch| + 1e-6` (at most 1 passes).

The torch module is, per model:
- the model converted back to torch by onnx2torch (the OpenFold3 pieces), gradients with respect to
  the float inputs;
- GPT-2 and BERT (`gpt2_decoder`, `bert_encoder`; token-id inputs, so gradients with respect to the
  weights): the original transformers module, `GPT2LMHeadModel` / `BertModel`, built with the corpus
  config (GPT-2, manifest: n_embd 256, 4 heads, 2 layers, vocab 1024, 2048 positions, no KV cache;
  BERT: sizes from the weight shapes, 4 heads from the manifest, see `bert_module`), eval mode,
  eager attention, its parameters loaded from the ONNX initializers:
  by name (the exports keep the module path under a `model.` prefix; a tied weight under either
  name); else, for an unnamed initializer that a MatMul multiplies by before an Add of a named
  `<path>.bias`, as `<path>.weight` transposed (BERT's twelve Linear weights, `val_*` in the dynamo
  export, `onnx::MatMul_*` in the TorchScript one: a freshly built module holds other random
  weights, so bits cannot tell these apart); else, for an initializer memplan differentiates, by
  the shape and bits of a loaded parameter or of its transpose (the GPT-2 TorchScript export stores
  the tied `lm_head` transposed as `onnx::MatMul_*`). A tied parameter's gradient is compared with
  the sum of the gradients of every initializer it was matched to (transposed back). Differentiated
  initializers that match no parameter are listed as unmatched: the dynamo exports' folded float
  scalars (attention scale, mask values, GELU constants), which no torch parameter holds. BERT's
  word embedding is built without `padding_idx` (see `bert_module`);
- the log-space chain (`logspace_matrix_chain`): `LogspaceChain` below, the program
  `tools/logspace_chain.py` builds as ONNX, written in torch; its forward output must match
  onnxruntime's on the corpus inputs within 1e-5 (relative to max|out|) before gradients are
  compared.

onnx2torch: exporters write `Reshape(allowzero=1)`, which onnx2torch does not take; it means the same
as allowzero=0 unless a shape holds 0, which needs a zero-sized dim, and the corpus inputs have none,
so the script writes 0. onnx2torch lacks GreaterOrEqual, LessOrEqual and ReduceMax at these opsets;
the script registers them (one torch function each). Needs torch, onnx2torch, transformers and
onnxruntime (torch, onnx2torch and transformers are not part of the project's dependencies).

Usage: .venv/bin/python tools/grad_vs_torch.py [--memplan target/release/memplan] [STEM ...]
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
ONNX2TORCH = "onnx2torch conversion"
TRANSFORMERS = "original transformers module"
SAME_PROGRAM = "torch module of the same program"


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


class LogspaceChain(torch.nn.Module):
    """The corpus `logspace_matrix_chain` program, as `tools/logspace_chain.py` writes it in ONNX:
    middle = x[..., :-1, :, None] + log(bulk); pairwise log-space matmul left to right, an odd
    stack's last matrix carried to the next level; logsumexp over c*c with log(p0) and x's last
    vector. v and c come from the inputs' shapes."""

    @staticmethod
    def logmatmul(a, b):
        ma = a.amax(dim=-1, keepdim=True)
        mb = b.amax(dim=-2, keepdim=True)
        return torch.log(torch.exp(a - ma) @ torch.exp(b - mb)) + ma + mb

    def forward(self, x, bulk, p0):
        middle = x[:, :, :-1, :, None] + torch.log(bulk)
        k = middle.shape[2]
        while k > 1:
            pairs = self.logmatmul(middle[:, :, 0:k - 1:2], middle[:, :, 1:k:2])
            middle = torch.cat([pairs, middle[:, :, k - 1:k]], dim=2) if k % 2 else pairs
            k = (k + 1) // 2
        s = middle[:, :, 0] + torch.log(p0)[..., None] + x[:, :, -1, None, :]
        return torch.logsumexp(s.flatten(-2), dim=-1)


def compare(pairs):
    """(elements, max error over tolerance, within tolerance) over (memplan, torch) gradient pairs."""
    worst, elems = 0.0, 0
    for got, want in pairs:
        tol = 1e-4 * np.abs(want) + 1e-6 + 1e-4 * np.abs(want).max()
        worst = max(worst, float(np.max(np.abs(got - want) / tol)))
        elems += want.size
    return elems, worst, worst <= 1.0


def memplan_grads(memplan, f, wrt, npz, tmp):
    """`memplan grad MODEL --wrt WRT --of <first output>`, run by `memplan run` on npz: (the run's
    outputs, forward outputs and `<name>_grad` gradients, None) or (None, the error line)."""
    model = onnx.load(os.path.join(MODELS, f))
    out = model.graph.output[0].name
    train = os.path.join(tmp, f"{f}.{wrt}.train.onnx")
    r = subprocess.run([memplan, "grad", os.path.join(MODELS, f), "--wrt", wrt, "--of", out, "-o", train],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, f"memplan grad: {r.stderr.strip()[:80]}"
    res = os.path.join(tmp, f"{f}.{wrt}.out.npz")
    r = subprocess.run([memplan, "run", train, "--inputs-npz", npz, "--out", res], capture_output=True, text=True)
    if r.returncode != 0:
        return None, f"memplan run: {r.stderr.strip()[:80]}"
    return dict(np.load(res)), None


def same_bits(w, tensors, transposed=False):
    """Names of the torch tensors with w's shape and bits (with its transpose's, if transposed)."""
    if transposed:
        if w.ndim != 2:
            return []
        w = w.T
    return [k for k, t in tensors.items()
            if tuple(t.shape) == w.shape and np.array_equal(t.detach().numpy(), w)]


def forward_diff(got, want):
    return float(np.abs(got - want).max())


def row(f, impl, differentiated, fwd, elems, worst, ok):
    fwd = "" if fwd is None else f"{fwd:.1e}"
    print(f"| {f} | {impl} | {differentiated} | {fwd} | {elems} | {worst:.2e} | {'yes' if ok else 'NO'} |")


def failed(f, impl, why):
    print(f"| {f} | {impl} | {why} | | | | |")


def manifest_entry(stem):
    import json

    with open(os.path.join(REPO, "tests/corpus/manifest.json")) as fh:
        return next(m for m in json.load(fh)["models"] if m["name"] == stem)


def quiet_transformers():
    import transformers

    transformers.logging.set_verbosity_error()


def gpt2_module(inits):
    """transformers' GPT2LMHeadModel with the corpus config (tests/corpus/manifest.json: n_embd
    256, 4 heads, 2 layers, vocab 1024; the exports' position table has 2048 rows; no KV cache),
    eval mode (no dropout), eager attention."""
    from transformers import GPT2Config, GPT2LMHeadModel

    quiet_transformers()
    cfg = GPT2Config(vocab_size=1024, n_positions=2048, n_embd=256, n_layer=2, n_head=4, use_cache=False,
                     attn_implementation="eager")
    return GPT2LMHeadModel(cfg).eval()


def gpt2_call(module, feeds):
    ids = torch.tensor(feeds["input_ids"])
    mask = torch.tensor(feeds["attention_mask"])
    return module(input_ids=ids, attention_mask=mask).logits


def bert_module(inits):
    """transformers' BertModel (with its pooler) with the corpus config: hidden, vocab, position and
    token-type table sizes, FFN width and layer count from the exports' weight shapes (256, 1024,
    2048, 2, 1024, 2 layers), the head count from the manifest ("4 heads"), GELU (the exports' Erf),
    LayerNorm epsilon 1e-12 (the exports' LayerNormalization); eval mode (no dropout), eager
    attention. The word embedding's `padding_idx` (0, BERT's pad token) is cleared: it only stops
    the gradient of row 0 (the forward is the same), while the exported function, a plain `Gather`,
    has none; the corpus ids hold a 0 (size 40, batch 1, position 16)."""
    import re

    from transformers import BertConfig, BertModel

    quiet_transformers()
    p = "model.embeddings."
    vocab, hidden = inits[p + "word_embeddings.weight"].shape
    layers = 1 + max(int(m.group(1)) for n in inits for m in [re.match(r"model\.encoder\.layer\.(\d+)\.", n)] if m)
    heads = int(re.search(r"(\d+) heads", manifest_entry("bert_encoder")["description"]).group(1))
    cfg = BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                     intermediate_size=inits["model.encoder.layer.0.intermediate.dense.bias"].shape[0],
                     max_position_embeddings=inits[p + "position_embeddings.weight"].shape[0],
                     type_vocab_size=inits[p + "token_type_embeddings.weight"].shape[0], hidden_act="gelu",
                     layer_norm_eps=1e-12, attn_implementation="eager")
    module = BertModel(cfg).eval()
    module.embeddings.word_embeddings.padding_idx = None
    return module


def bert_call(module, feeds):
    ids = torch.tensor(feeds["input_ids"])
    mask = torch.tensor(feeds["attention_mask"])
    return module(input_ids=ids, attention_mask=mask).last_hidden_state


def linear_weights(model, inits, named):
    """Unnamed initializers that are the weight of a named Linear: `MatMul(x, W)` whose output only
    feeds `Add(., <path>.bias)` with `<path>.bias` a named initializer -> (`<path>.weight`, stored
    transposed: the exporters write `x @ W.T` with W.T folded into the initializer)."""
    consumers = {}
    for n in model.graph.node:
        for x in n.input:
            consumers.setdefault(x, []).append(n)
    found = {}
    for n in model.graph.node:
        if n.op_type != "MatMul" or n.input[1] not in inits or n.input[1] in named:
            continue
        after = consumers.get(n.output[0], [])
        if len(after) != 1 or after[0].op_type != "Add":
            continue
        bias = [x for x in after[0].input if x != n.output[0]]
        if len(bias) == 1 and bias[0] in named and bias[0].endswith(".bias"):
            found[n.input[1]] = named[bias[0]][:-len(".bias")] + ".weight"
    return found


def original_row(memplan, f, model, feeds, npz, tmp, build, call):
    """A token-id model against its original transformers module, gradients with respect to the
    weights. Parameters are loaded from the ONNX initializers by name (module path under the
    export wrapper's `model.` prefix), else, for an unnamed initializer, as the transposed weight
    of the Linear whose named bias its MatMul's output is added to; a gradient memplan computes for
    any other initializer is matched by the bits of a parameter or of its transpose (a unique hit),
    or listed as unmatched. A tied parameter's gradient is compared with the sum of the gradients
    of every initializer matched to it (transposed back)."""
    mine, err = memplan_grads(memplan, f, "weights", npz, tmp)
    if err:
        failed(f, TRANSFORMERS, err)
        return
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    module = build(inits)
    params = dict(module.named_parameters())  # a tied parameter once, under its first name
    aliases = {}  # every module path of each parameter -> its first name
    for k, p in module.named_parameters(remove_duplicate=False):
        aliases[k] = next(n for n, q in params.items() if q is p)
    grads = [k[:-len("_grad")] for k in mine if k.endswith("_grad")]
    # By name: the exports keep the module path under the wrapper's `model.` prefix.
    loaded = {}  # initializer -> (parameter, stored transposed)
    for name in inits:
        path = name[len("model."):] if name.startswith("model.") else name
        if path in aliases:
            loaded[name] = (aliases[path], False)
    # By structure: an unnamed Linear weight, from its named bias.
    structural = linear_weights(model, inits, {n: k for n, (k, _) in loaded.items()})
    for name, k in structural.items():
        loaded[name] = (k, True)
    for name, (k, t) in loaded.items():
        shape = inits[name].T.shape if t else inits[name].shape
        if shape != tuple(params[k].shape):
            failed(f, TRANSFORMERS, f"initializer {name} {inits[name].shape} vs {k} {tuple(params[k].shape)}")
            return
    missing = set(params) - {k for k, _ in loaded.values()}
    if missing:
        failed(f, TRANSFORMERS, f"no initializer for {', '.join(sorted(missing))}")
        return
    with torch.no_grad():
        for name, (k, t) in loaded.items():
            w = inits[name].T if t else inits[name]
            params[k].copy_(torch.from_numpy(np.ascontiguousarray(w)))
    # The rest by bits (a parameter's own or its transpose's): a unique match, or unmatched.
    matched = {name: loaded[name] for name in grads if name in loaded}
    by_bits, unmatched = [], []
    for name in grads:
        if name in matched:
            continue
        w = inits.get(name)
        hits = [] if w is None else [(k, False) for k in same_bits(w, params)] + \
            [(k, True) for k in same_bits(w, params, transposed=True)]
        if len(hits) == 1:
            matched[name] = hits[0]
            by_bits.append(name)
        else:
            unmatched.append(name)
    y = call(module, feeds)
    y.sum().backward()
    pairs = []
    for k, p in params.items():
        mine_k = [mine[f"{n}_grad"].T if t else mine[f"{n}_grad"] for n, (q, t) in matched.items() if q == k]
        if not mine_k:
            continue  # not differentiated by memplan: reported through the counts
        want = p.grad.numpy() if p.grad is not None else np.zeros(tuple(p.shape), np.float32)
        pairs.append((sum(mine_k), want))
    n_name = sum(1 for n in matched if n in loaded and n not in structural)
    n_struct = sum(1 for n in matched if n in structural)
    how = [f"{n_name} by name"] + ([f"{n_struct} as Linear weights by their bias"] if n_struct else []) + \
        ([f"{len(by_bits)} by bits ({', '.join(by_bits)})"] if by_bits else [])
    what = f"{len(matched)} of {len(grads)} weights ({'; '.join(how)}) onto {len(pairs)} of {len(params)} parameters"
    scalars = [n for n in unmatched if n in inits and inits[n].size == 1 and inits[n].dtype.kind == "f"]
    others = [n for n in unmatched if n not in scalars]
    if scalars:
        vals = ", ".join(f"{n} = {float(inits[n].reshape(())):.6g}" for n in scalars)
        what += f"; unmatched: {len(scalars)} exporter-made float scalars ({vals})"
    if others:
        what += f"; UNMATCHED: {len(others)} ({', '.join(others)})"
    row(f, TRANSFORMERS, what, forward_diff(mine[model.graph.output[0].name], y.detach().numpy()),
        *compare(pairs))


def gpt2_row(memplan, f, model, feeds, npz, tmp):
    original_row(memplan, f, model, feeds, npz, tmp, gpt2_module, gpt2_call)


def bert_row(memplan, f, model, feeds, npz, tmp):
    original_row(memplan, f, model, feeds, npz, tmp, bert_module, bert_call)


def logspace_row(memplan, f, model, feeds, npz, tmp):
    """The log-space chain against `LogspaceChain`, gradients with respect to the float inputs; its
    forward output is first checked against onnxruntime's."""
    import onnxruntime as ort

    names = [i.name for i in model.graph.input]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(os.path.join(MODELS, f), opts, providers=["CPUExecutionProvider"])
    ref = sess.run(None, {n: feeds[n] for n in names})[0]
    args = [torch.tensor(feeds[n], requires_grad=True) for n in names]
    y = LogspaceChain()(*args)
    fwd = forward_diff(y.detach().numpy(), ref)
    if fwd > 1e-5 * max(1.0, float(np.abs(ref).max())):
        failed(f, SAME_PROGRAM, f"forward differs from onnxruntime's by {fwd:.1e}: not the same program")
        return
    mine, err = memplan_grads(memplan, f, "inputs", npz, tmp)
    if err:
        failed(f, SAME_PROGRAM, err)
        return
    y.sum().backward()
    pairs = [(mine[f"{n}_grad"], t.grad.numpy()) for n, t in zip(names, args)]
    fwd = max(fwd, forward_diff(mine[model.graph.output[0].name], y.detach().numpy()))
    row(f, SAME_PROGRAM, ", ".join(names), fwd, *compare(pairs))


def onnx2torch_row(memplan, f, model, feeds, npz, tmp):
    import onnx2torch

    try:
        module = onnx2torch.convert(without_allowzero(model))
    except Exception as e:  # noqa: BLE001 - a converter gap is reported, not fatal
        failed(f, ONNX2TORCH, f"onnx2torch cannot convert it: {str(e).splitlines()[0][:80]}")
        return
    names = [i.name for i in model.graph.input]
    floats = [n for n in names if feeds[n].dtype.kind == "f"]
    mine, err = memplan_grads(memplan, f, "inputs", npz, tmp)
    if err:
        failed(f, ONNX2TORCH, err)
        return
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
    row(f, ONNX2TORCH, ", ".join(floats), forward_diff(mine[model.graph.output[0].name], y.detach().numpy()),
        *compare(pairs))


# Models compared with their original module (GPT-2, whose Split onnx2torch cannot convert; BERT,
# whose TorchScript export's onnx2torch module fails; the chain, whose reductions it cannot convert).
ORIGINAL = {"gpt2_decoder": gpt2_row, "bert_encoder": bert_row, "logspace_matrix_chain": logspace_row}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", default=os.path.join(REPO, "target/release/memplan"))
    ap.add_argument("stems", nargs="*", help="only these corpus models (file stems), both exports")
    a = ap.parse_args()
    torch.set_num_threads(1)
    register_missing_converters()
    tmp = tempfile.mkdtemp()
    print("| model | second implementation | differentiated | forward max abs diff | elements "
          "| max error / tolerance | within tolerance |")
    print("|---|---|---|---:|---:|---:|---|")
    for f in sorted(os.listdir(MODELS)):
        stem = f.split(".")[0]
        if a.stems and stem not in a.stems:
            continue
        sizes = sorted(int(p.rsplit("_", 1)[1][:-4]) for p in os.listdir(INPUTS) if p.rsplit("_", 1)[0] == stem)
        if not sizes:
            continue
        npz = os.path.join(INPUTS, f"{stem}_{sizes[0]}.npz")
        model = onnx.load(os.path.join(MODELS, f))
        feeds = dict(np.load(npz))
        ORIGINAL.get(stem, onnx2torch_row)(a.memplan, f, model, feeds, npz, tmp)


if __name__ == "__main__":
    main()
