"""Notebook-style walk through memplan's Python API on a PairFormer block.

The block is OpenFold3's PairFormer block (openfold3 0.5.0, random weights) as exported with
torch.onnx.export(dynamo=True) into the corpus (tests/corpus/models/of3_pairformer_block.onnx); the
second part builds a small pairformer-like torch module (triangle attention and a transition over
the pair tensor) and goes through memplan.torch. Each cell asks one question:

    python examples/pairformer_fit.py            # with memplan installed (pip install ./python)
"""

# %% The model and its symbols
from pathlib import Path

import numpy as np

import memplan

BLOCK = Path(__file__).resolve().parents[1] / "tests/corpus/models/of3_pairformer_block.onnx"
block = memplan.load(BLOCK)
print(block, "inputs:", [(p["name"], p["shape"]) for p in block.inspect()["inputs"]])

# %% The largest N on an 80 GB GPU: the peak as a formula of N, solved against the budget
est = memplan.estimate(block, dims={"N": 512}, budget="80GB")
print(est)
print("formula   ", est.formula)
print("at N=1024 ", memplan.human_bytes(est.formula(N=1024)))
print("largest N that fits 80 GB as exported:", est.max_fitting["value"])
for t in est.live_at_peak[:4]:
    print(f"  live at the peak: {t['name']:<24} {t['symbolic_shape']:<18} {memplan.human_bytes(t['bytes'])}")

# %% Fit it to a budget at a size that does not fit as exported: a third of the peak at N=96
N = 96
peak = memplan.estimate(block, dims={"N": N}).peak_bytes
opt = memplan.optimize(block, dims={"N": N}, budget=peak // 3)
print(opt, "chunked regions:", len((opt.report.get("chunking") or {}).get("steps", [])))


# %% Check outputs: the fitted graph against the original, bit for bit, and against onnxruntime
def random_inputs(model: memplan.Model, dims: dict, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for p in model.inspect()["inputs"]:
        shape = [dims[d] if d in dims else int(d) for d in p["shape"]]
        out[p["name"]] = rng.standard_normal(shape).astype(np.float32)
    out["single_mask"] = np.ones_like(out["single_mask"])
    out["pair_mask"] = np.ones_like(out["pair_mask"])
    return out


inputs = random_inputs(block, {"N": N})
plain = memplan.run(block, inputs)
fitted = memplan.run(opt, inputs)
for name in plain.outputs:
    assert plain[name].tobytes() == fitted[name].tobytes(), name
print(f"measured peak {memplan.human_bytes(plain.peak_bytes)} -> {memplan.human_bytes(fitted.peak_bytes)}, outputs bit-identical")
try:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(BLOCK), providers=["CPUExecutionProvider"])
    for name, want in zip([o.name for o in sess.get_outputs()], sess.run(None, inputs)):
        err = float(np.max(np.abs(fitted[name] - want)))
        print(f"vs onnxruntime: {name} max |diff| {err:.2e}")
        assert err < 1e-4
except ImportError:
    print("onnxruntime is not installed: skipped the comparison")

# %% The same questions for a torch module (memplan.torch exports it first)
try:
    import torch
except ImportError:
    torch = None
    print("torch is not installed: skipped memplan.torch")

if torch is not None:
    import memplan.torch as mt

    class TriangleAttention(torch.nn.Module):
        def __init__(self, c: int = 32, heads: int = 4):
            super().__init__()
            self.h, self.norm = heads, torch.nn.LayerNorm(c)
            self.qkv = torch.nn.Linear(c, 3 * c, bias=False)
            self.bias = torch.nn.Linear(c, heads, bias=False)
            self.gate = torch.nn.Linear(c, c)
            self.out = torch.nn.Linear(c, c)

        def forward(self, z):
            b, n, _, c = z.shape
            x = self.norm(z)
            q, k, v = self.qkv(x).reshape(b, n, n, 3, self.h, c // self.h).unbind(3)
            bias = self.bias(x).permute(0, 3, 1, 2).unsqueeze(1)
            a = torch.softmax(torch.einsum("bijhd,bikhd->bihjk", q, k) / (c // self.h) ** 0.5 + bias, -1)
            o = torch.einsum("bihjk,bikhd->bijhd", a, v).reshape(b, n, n, c)
            return z + self.out(torch.sigmoid(self.gate(x)) * o)

    class PairBlock(torch.nn.Module):
        def __init__(self, c: int = 32):
            super().__init__()
            self.tri = TriangleAttention(c)
            self.transition = torch.nn.Sequential(
                torch.nn.LayerNorm(c), torch.nn.Linear(c, 4 * c), torch.nn.ReLU(), torch.nn.Linear(4 * c, c)
            )

        def forward(self, z):
            z = self.tri(z)
            return z + self.transition(z)

    torch.manual_seed(0)
    module = PairBlock().eval()
    z = torch.randn(1, 96, 96, 32)
    n = torch.export.Dim("N", min=2, max=8192)
    shapes = ({1: n, 2: n},)
    est = mt.estimate(module, (z,), dynamic_shapes=shapes, budget="80GB")
    print(est, "| largest N on 80 GB:", est.max_fitting["value"])
    print("biggest live tensor made by module", est.live_at_peak[0]["module"])
    fit = mt.fit(module, (z,), budget=est.peak_bytes // 3, dynamic_shapes=shapes)
    with torch.no_grad():
        want = module(z)
    got = fit(z)
    print(fit, f"max |diff| vs torch {float((got - want).abs().max()):.2e}")
    assert torch.allclose(got, want, atol=1e-5, rtol=0)
    feeds = fit.feeds(z)
    before = mt.ort_peak_bytes(mt.export(module, (z,), shapes)[0], feeds)
    after = mt.ort_peak_bytes(fit, feeds)
    print(f"onnxruntime measured peak {memplan.human_bytes(before)} -> {memplan.human_bytes(after)}")
