"""Bad input raises memplan.Error (the subclass of its kind) with the CLI's one-line message."""

from __future__ import annotations

import pytest

import memplan
from conftest import MODELS, cli_error

PAIR = MODELS / "of3_pairformer_block.onnx"


def test_missing_dims():
    with pytest.raises(memplan.UsageError) as e:
        memplan.estimate(PAIR)
    assert str(e.value) == cli_error("estimate", PAIR)


def test_unknown_dim():
    with pytest.raises(memplan.UsageError) as e:
        memplan.estimate(PAIR, dims={"N": 8, "Q": 3})
    assert str(e.value) == cli_error("estimate", PAIR, "--dim", "N=8", "--dim", "Q=3")


def test_bad_dim_value():
    with pytest.raises(memplan.UsageError) as e:
        memplan.estimate(PAIR, dims={"N": 0})
    assert str(e.value) == cli_error("estimate", PAIR, "--dim", "N=0")


def test_bad_budget():
    with pytest.raises(memplan.UsageError) as e:
        memplan.estimate(PAIR, dims={"N": 8}, budget="12XB")
    assert str(e.value) == cli_error("estimate", PAIR, "--dim", "N=8", "--budget", "12XB")


def test_bad_sweep():
    with pytest.raises(memplan.UsageError) as e:
        memplan.sweep(PAIR, "N=9..3")
    assert str(e.value) == cli_error("estimate", PAIR, "--sweep", "N=9..3")


def test_missing_file(tmp_path):
    p = tmp_path / "nope.onnx"
    with pytest.raises(memplan.ModelError) as e:
        memplan.estimate(p)
    assert str(e.value) == cli_error("estimate", p)


def test_not_onnx(tmp_path):
    p = tmp_path / "junk.onnx"
    p.write_bytes(b"\x07\x07 not a model")
    with pytest.raises(memplan.ModelError) as e:
        memplan.load(p)
    assert str(e.value) == cli_error("inspect", p)
    with pytest.raises(memplan.Error):
        memplan.estimate(b"\x07\x07 not a model")


def test_optimize_without_budget_rejects_chunks():
    with pytest.raises(memplan.UsageError) as e:
        memplan.optimize(PAIR, dims={"N": 8}, chunks=[4])
    assert str(e.value) == cli_error("optimize", PAIR, "--dim", "N=8", "--chunks", "4")


def test_run_missing_input():
    with pytest.raises(memplan.UsageError) as e:
        memplan.run(PAIR, {})
    assert str(e.value) == cli_error("run", PAIR)


def test_run_wrong_shape_is_a_run_error(tmp_path):
    import numpy as np

    from conftest import SMALL_CASES, npz_inputs

    inputs = npz_inputs(SMALL_CASES["of3_pairformer_block"][1])
    s = inputs["s"]
    inputs["s"] = np.zeros((s.shape[0], s.shape[1] + 1, s.shape[2]), s.dtype)
    bad = tmp_path / "bad.npz"
    np.savez(bad, **inputs)
    with pytest.raises(memplan.RunError) as e:
        memplan.run(PAIR, inputs)
    assert str(e.value) == cli_error("run", PAIR, "--inputs-npz", bad)


def test_errors_are_one_class_tree():
    for cls in (memplan.ModelError, memplan.UsageError, memplan.PlanError, memplan.RunError):
        assert issubclass(cls, memplan.Error)
    assert issubclass(memplan.Error, Exception)
