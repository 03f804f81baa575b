"""memplan.estimate / sweep / load against `memplan estimate --json` on the corpus."""

from __future__ import annotations

import pytest

import memplan
from conftest import MODELS, SMALL_CASES, cli, cli_json, dim_flags


@pytest.mark.parametrize("name", sorted(SMALL_CASES))
def test_estimate_equals_cli_json(name, corpus_dims):
    path = MODELS / f"{name}.onnx"
    dims = corpus_dims[name]
    est = memplan.estimate(path, dims=dims, budget="64MiB")
    want = cli_json("estimate", path, *dim_flags(dims), "--budget", "64MiB")
    assert est.json == want
    assert est.peak_bytes == want["peak_bytes"]
    assert est.live_at_peak == want["live_at_peak"]
    assert est.breakdown == want["breakdown"]
    assert est.max_fitting == want["max_fitting"]
    assert sum(est.breakdown.values()) == est.peak_bytes


def test_model_forms_give_one_report(corpus_dims):
    onnx = pytest.importorskip("onnx")
    path = MODELS / "of3_pairformer_block.onnx"
    dims = corpus_dims["of3_pairformer_block"]
    by_path = memplan.estimate(path, dims).json
    assert memplan.estimate(str(path), dims).json == by_path
    assert memplan.estimate(path.read_bytes(), dims).json == by_path
    assert memplan.estimate(onnx.load(str(path)), dims).json == by_path
    loaded = memplan.load(path)
    assert memplan.estimate(loaded, dims).json == by_path
    assert loaded.symbols == ["N"]


def test_formula_is_printable_and_callable(corpus_dims):
    path = MODELS / "of3_pairformer_block.onnx"
    est = memplan.estimate(path, dims={"N": 48})
    assert str(est.formula) == est.json["formula"]["text"]
    assert "N" in str(est.formula)
    assert est.formula(N=48) == est.peak_bytes
    for n in (17, 100, 300):
        assert est.formula(N=n) == memplan.estimate(path, dims={"N": n}).peak_bytes
    assert est.formula(N=300) > est.formula(N=100)


def test_sweep_equals_cli_json():
    path = MODELS / "of3_tri_mul_out.onnx"
    sw = memplan.sweep(path, "N=16..256", budget="8MiB")
    assert sw.json == cli_json("estimate", path, "--sweep", "N=16..256", "--budget", "8MiB")
    assert [r["value"] for r in sw] == [16, 32, 64, 128, 256]
    est = memplan.estimate(path, dims={"N": 64}, budget="8MiB")
    again = est.sweep(N=[16, 32, 64, 128, 256])
    assert again.rows == sw.rows and again.max_fitting == sw.max_fitting


def test_optimized_max_fitting_equals_cli():
    path = MODELS / "of3_pair_transition.onnx"
    est = memplan.estimate(path, dims={"N": 32}, budget="16MiB", optimized=True)
    want = cli_json("estimate", path, "--dim", "N=32", "--budget", "16MiB", "--optimized")
    assert est.json == want
    assert est.max_fitting_optimized["value"] >= est.max_fitting["value"]


def test_plot_and_html(tmp_path):
    path = MODELS / "of3_tri_att_start.onnx"
    svg_file = tmp_path / "p.svg"
    cli("estimate", path, "--dim", "N=48", "--plot", svg_file)
    est = memplan.estimate(str(path), dims={"N": 48})
    assert est.svg() == svg_file.read_text()
    page = est._repr_html_()
    assert "<svg" in page and memplan.human_bytes(est.peak_bytes) in page
    assert str(est.formula).split(" ")[0] in page


def test_load_inspect_and_roundtrip(tmp_path):
    path = MODELS / "of3_tri_mul_out.onnx"
    m = memplan.load(path)
    want = cli_json("inspect", path)
    assert m.inspect() == want
    out = tmp_path / "copy.onnx"
    m.save(out)
    assert memplan.estimate(out, {"N": 40}).json == memplan.estimate(m, {"N": 40}).json
    assert memplan.estimate(m.to_bytes(), {"N": 40}).json == memplan.estimate(m, {"N": 40}).json
