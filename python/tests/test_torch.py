"""memplan.torch.estimate and fit on a pair-attention module and a transformers BERT from config:
outputs within 1e-5 of torch's, the fitted graph within its budget, and onnxruntime's measured
peak lowered. Skipped where torch (or transformers) is not installed."""

from __future__ import annotations

import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import memplan  # noqa: E402
import memplan.torch as mt  # noqa: E402


class PairAttention(torch.nn.Module):
    """Row-wise attention over a pair tensor z [B, N, N, C] with a pair bias (a triangle-attention
    shape): its [B, N, H, N, N] logits make the peak cubic in N."""

    def __init__(self, c: int = 16, heads: int = 4):
        super().__init__()
        self.h = heads
        self.norm = torch.nn.LayerNorm(c)
        self.qkv = torch.nn.Linear(c, 3 * c, bias=False)
        self.bias = torch.nn.Linear(c, heads, bias=False)
        self.out = torch.nn.Linear(c, c)

    def forward(self, z):
        b, n, _, c = z.shape
        x = self.norm(z)
        q, k, v = self.qkv(x).reshape(b, n, n, 3, self.h, c // self.h).unbind(3)
        bias = self.bias(x).permute(0, 3, 1, 2).unsqueeze(1)
        a = torch.softmax(torch.einsum("bijhd,bikhd->bihjk", q, k) + bias, -1)
        o = torch.einsum("bihjk,bikhd->bijhd", a, v).reshape(b, n, n, c)
        return z + self.out(o)


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(0)
    m = PairAttention().eval()
    z = torch.randn(1, 96, 96, 16)
    n = torch.export.Dim("N", min=2, max=4096)
    return m, (z,), ({1: n, 2: n},)


def test_pair_estimate(pair):
    m, args, ds = pair
    est = mt.estimate(m, args, dynamic_shapes=ds, budget="80GB")
    assert est.exporter == "dynamo"
    assert est.dims == {"N": 96}
    # The logits [1, N, 4, N, N] in float are live at the peak.
    big = [t for t in est.live_at_peak if t["bytes"] == 4 * 96 * 4 * 96 * 96]
    assert big and big[0]["symbolic_shape"] == "[1, N, 4, N, N]"
    assert "N³" in str(est.formula)
    assert est.formula(N=192) == memplan.estimate(mt.export(m, args, ds)[0], {"N": 192}).peak_bytes
    n = est.max_fitting["value"]
    assert est.formula(N=n) <= 80 * 10**9 < est.formula(N=n + 1)


def test_pair_fit_matches_torch_and_lowers_ort_peak(pair):
    m, args, ds = pair
    est = mt.estimate(m, args, dynamic_shapes=ds)
    fitted = mt.fit(m, args, budget=est.peak_bytes // 3, dynamic_shapes=ds)
    assert fitted.fits and fitted.optimized.peak_bytes_after <= est.peak_bytes // 3
    with torch.no_grad():
        want = m(*args)
    got = fitted(*args)
    assert got.shape == want.shape
    assert torch.allclose(got, want, rtol=0, atol=1e-5)
    if sys.platform.startswith("linux"):
        feeds = fitted.feeds(*args)
        before = mt.ort_peak_bytes(mt.export(m, args, ds)[0], feeds)
        after = mt.ort_peak_bytes(fitted, feeds)
        assert after < before, (after, before)


def test_fitted_refuses_other_sizes(pair):
    m, args, ds = pair
    est = mt.estimate(m, args, dynamic_shapes=ds)
    fitted = mt.fit(m, args, budget=est.peak_bytes // 2, dynamic_shapes=ds)
    with pytest.raises(memplan.UsageError):
        fitted(torch.randn(1, 64, 64, 16))


def test_torchscript_fallback_says_so(pair):
    m, args, _ = pair
    # dynamic_shapes keyed by a name the module's forward does not take: the dynamo exporter fails,
    # the TorchScript exporter reads the specs positionally.
    bad = {"nope": {1: torch.export.Dim("N"), 2: torch.export.Dim("N")}}
    with pytest.warns(UserWarning, match="TorchScript exporter"):
        est = mt.estimate(m, args, dynamic_shapes=bad)
    assert est.exporter == "torchscript"
    assert est.dims == {"N": 96}
    assert est.formula(N=192) > 7 * est.peak_bytes


def test_bert_from_config():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(
        vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256
    )
    torch.manual_seed(0)
    m = transformers.BertModel(cfg).eval()
    ids = torch.randint(0, 512, (2, 256))
    mask = torch.ones(2, 256, dtype=torch.int64)
    b, s = torch.export.Dim("B", min=1, max=64), torch.export.Dim("S", min=2, max=512)
    ds = {"input_ids": {0: b, 1: s}, "attention_mask": {0: b, 1: s}}
    est = mt.estimate(m, (ids, mask), dynamic_shapes=ds)
    assert est.dims == {"B": 2, "S": 256}
    assert any((t["module"] or "").startswith("encoder.layer.") for t in est.live_at_peak)
    fitted = mt.fit(m, (ids, mask), budget=int(est.peak_bytes * 0.8), dynamic_shapes=ds)
    assert fitted.fits
    with torch.no_grad():
        want = m(ids, mask)
    hidden, pooled = fitted(ids, mask)
    assert torch.allclose(hidden, want.last_hidden_state, rtol=0, atol=1e-5)
    assert torch.allclose(pooled, want.pooler_output, rtol=0, atol=1e-5)
    if sys.platform.startswith("linux"):
        feeds = fitted.feeds(ids, mask)
        before = mt.ort_peak_bytes(mt.export(m, (ids, mask), ds)[0], feeds)
        after = mt.ort_peak_bytes(fitted, feeds)
        assert after < before, (after, before)
