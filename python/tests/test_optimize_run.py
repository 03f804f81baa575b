"""memplan.optimize and memplan.run against `memplan optimize` and `memplan run` on the corpus:
the same rewritten model and plan, bit-identical outputs, the measured peak equal to the plan."""

from __future__ import annotations

import json

import numpy as np
import pytest

import memplan
from conftest import MODELS, ROOT, SMALL_CASES, cli, cli_json, dim_flags, npz_inputs

IGNORED = {"model", "output", "plan", "plan_ms"}  # file names and wall time


def _report(j: dict) -> dict:
    return {k: v for k, v in j.items() if k not in IGNORED}


@pytest.mark.parametrize("name", sorted(SMALL_CASES))
def test_optimize_and_run_equal_cli(name, corpus_dims, tmp_path):
    path = MODELS / f"{name}.onnx"
    npz = SMALL_CASES[name][1]
    dims = corpus_dims[name]
    est = memplan.estimate(path, dims)
    # Three quarters of the peak, not below the floor (which is refused).
    floor = memplan.optimize(path, dims, budget="lowest").report["floor"]["bytes"]
    budget = max(est.peak_bytes * 3 // 4, floor)
    opt = memplan.optimize(path, dims, budget=budget)

    out_model, out_plan = tmp_path / "o.onnx", tmp_path / "plan.json"
    r = cli("optimize", path, *dim_flags(dims), "--budget", budget, "-o", out_model, "--plan-out", out_plan,
            "--json", check=False)
    # Exit status 3: the budget is not met and the lowest plan reached is written.
    assert r.returncode in (0, 3), r.stderr
    want = json.loads(r.stdout)
    assert opt.fits == (r.returncode == 0)
    assert _report(opt.report) == _report(want)
    assert opt.plan.to_dict() == json.loads(out_plan.read_text())
    mine = tmp_path / "mine.onnx"
    opt.save(mine)
    assert mine.read_bytes() == out_model.read_bytes()
    assert opt.to_bytes() == memplan.load(out_model).to_bytes()

    inputs = npz_inputs(npz)
    res = memplan.run(opt, inputs, threads=2)
    cli_out = tmp_path / "out.npz"
    want_run = cli_json("run", out_model, "--inputs-npz", npz, "--plan", out_plan, "--out", cli_out)
    ref = npz_inputs(cli_out)
    assert list(res.outputs) == list(ref)
    for k, v in res.outputs.items():
        assert v.dtype == ref[k].dtype and v.shape == ref[k].shape
        assert v.tobytes() == ref[k].tobytes(), k
    assert res.peak_bytes == want_run["peak_bytes"] == want_run["planned_peak_bytes"]
    assert res.report["planned"] and res.report["plan_misses"] == []

    # The plan's outputs are the unplanned run's, bit for bit; the plan lowers the measured peak.
    plain = memplan.run(path, inputs)
    for k, v in plain.outputs.items():
        assert v.tobytes() == res.outputs[k].tobytes(), k
    assert plain.peak_bytes == est.peak_bytes
    assert res.peak_bytes <= plain.peak_bytes


def test_random_inputs_equal_cli(tmp_path):
    path = MODELS / "of3_tri_mul_out.onnx"
    res = memplan.run(path, dims={"N": 24}, random=True, seed=7)
    out = tmp_path / "o.npz"
    cli("run", path, "--dim", "N=24", "--random", "--seed", "7", "--out", out)
    ref = npz_inputs(out)
    for k, v in res.outputs.items():
        assert v.tobytes() == ref[k].tobytes()


def test_optimize_without_budget_keeps_model_and_fits_none():
    path = MODELS / "of3_attn_pair_bias.onnx"
    opt = memplan.optimize(path, {"N": 32})
    assert opt.fits is None
    assert opt.peak_bytes_after <= opt.peak_bytes_before
    proto = opt.to_onnx()
    onnx = pytest.importorskip("onnx")
    assert isinstance(proto, onnx.ModelProto)
    onnx.checker.check_model(proto)


def test_a_budget_as_a_fraction_of_the_peak():
    """``"0.5x"``: half the estimated peak at the dims, rounded down, as the CLI takes it."""
    path, dims = MODELS / "of3_tri_att_start.onnx", {"N": 32}
    peak = memplan.estimate(path, dims).peak_bytes
    half = memplan.optimize(path, dims, budget="0.5x")
    assert half.report["budget_bytes"] == peak // 2
    assert half.fits and half.peak_bytes_after <= peak // 2
    cli_half = cli_json("optimize", path, *dim_flags(dims), "--budget", "0.5x")
    assert cli_half["budget_bytes"] == peak // 2
    with pytest.raises(memplan.UsageError, match="0.15x"):
        memplan.optimize(path, dims, budget="0x")


def test_outputs_are_numpy_views_without_copy():
    path = MODELS / "of3_pair_transition.onnx"
    res = memplan.run(path, dims={"N": 16}, random=True)
    for v in res.outputs.values():
        assert isinstance(v, np.ndarray)
        assert not v.flags.owndata and not v.flags.writeable
        v2 = v.copy()
        v2 += 1  # a copy is an ordinary array
    # The arrays keep the executor's memory alive after the result is gone.
    arrays = list(res.outputs.values())
    del res
    assert all(np.isfinite(a).all() for a in arrays)


DTYPES = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
          np.uint32, np.uint64, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_identity_roundtrip_of_each_dtype(dtype, tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import helper

    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Reshape", ["x", "shape"], ["flat"])],
        "g",
        [helper.make_tensor_value_info("x", elem, ["A", 3])],
        [helper.make_tensor_value_info("y", elem, ["A", 3]), helper.make_tensor_value_info("flat", elem, None)],
        [helper.make_tensor("shape", onnx.TensorProto.INT64, [1], [-1])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    x = (np.arange(15).reshape(5, 3) % 7).astype(dtype)
    res = memplan.run(model, {"x": x})
    assert res["y"].dtype == x.dtype and res["y"].shape == x.shape
    assert res["y"].tobytes() == x.tobytes()
    assert res["flat"].tobytes() == x.reshape(-1).tobytes()
    # Non-contiguous and big-endian inputs are made contiguous little-endian first.
    xt = np.asfortranarray(x)
    assert memplan.run(model, {"x": xt})["y"].tobytes() == x.tobytes()
    if np.dtype(dtype).itemsize > 1:
        xb = x.astype(np.dtype(dtype).newbyteorder(">"))
        assert memplan.run(model, {"x": xb})["y"].tobytes() == x.tobytes()


def test_plan_forms_and_save(tmp_path):
    path = MODELS / "of3_tri_att_start.onnx"
    opt = memplan.optimize(path, {"N": 24})
    model_file, plan_file = tmp_path / "m.onnx", tmp_path / "p.json"
    opt.save(model_file, plan_file)
    assert plan_file.read_text() == opt.plan.json + "\n"
    assert opt.plan.arena_bytes == opt.report["arena_bytes"]
    by_object = memplan.run(opt.model, dims={"N": 24}, random=True, plan=opt.plan)
    by_text = memplan.run(model_file, dims={"N": 24}, random=True, plan=opt.plan.json)
    by_file = memplan.run(model_file, dims={"N": 24}, random=True, plan=plan_file)
    for r in (by_text, by_file):
        assert r.peak_bytes == by_object.peak_bytes
        for k in r.outputs:
            assert r[k].tobytes() == by_object[k].tobytes()
    # A plan is checked against the model it runs: the original's node order differs.
    with pytest.raises(memplan.PlanError):
        other = memplan.optimize(MODELS / "of3_tri_mul_out.onnx", {"N": 24})
        memplan.run(model_file, dims={"N": 24}, random=True, plan=other.plan)


def test_narrow_stores_a_mask_narrow_and_can_be_turned_off():
    """The dynamo export of transformers' LlamaModel keeps a float causal mask across its layers:
    under a budget just below its peak it is stored as bool, outputs stay bit-identical."""
    path = ROOT / "tests" / "wide" / "models" / "llama_decoder.onnx"
    dims = {"B": 1, "S": 256}
    plain = memplan.run(path, dims=dims, random=True)
    opt = memplan.optimize(path, dims, budget=plain.peak_bytes - 1)
    steps = opt.report["narrowing"]["steps"]
    assert [s["stored_as"] for s in steps] == ["bool"]
    assert steps[0]["bytes"] == 4 * 256 * 256 and steps[0]["narrow_bytes"] == 256 * 256
    res = memplan.run(opt, dims=dims, random=True)
    assert res.peak_bytes == opt.peak_bytes_after
    for k, v in plain.outputs.items():
        assert v.tobytes() == res.outputs[k].tobytes(), k
    off = memplan.optimize(path, dims, budget=plain.peak_bytes - 1, narrow=False)
    assert "narrowing" not in off.report


def test_device_budget_moves_idle_buffers_to_the_host(tmp_path):
    """The training step of the corpus PairFormer block at N=32: halfway between the lowest device
    tier recomputation and chunking reach and what a host tier makes of it, only the host tier
    fits; the run measures what was planned. Below the floor, a budget is refused."""
    train = tmp_path / "train.onnx"
    cli("grad", MODELS / "of3_pairformer_block.onnx", "--of", "z_out", "-o", train)
    dims = {"N": 32}
    plain = memplan.run(train, dims=dims, random=True)
    low = memplan.optimize(train, dims, recompute=True, device_budget="lowest")
    assert low.fits is None
    lowest, offloaded = low.report["offload"]["device_peak_before"], low.report["offload"]["device_peak_after"]
    assert offloaded < lowest
    device = (lowest + offloaded) // 2
    opt = memplan.optimize(train, dims, recompute=True, device_budget=device)
    off = opt.report["offload"]
    assert off["fits"] and off["device_peak_before"] > device >= off["device_peak_after"]
    with pytest.raises(memplan.UsageError, match="below the floor"):
        memplan.optimize(train, dims, device_budget=low.report["floor"]["bytes"] - 1)
    res = memplan.run(opt, dims=dims, random=True)
    assert res.peak_bytes == off["device_peak_after"]
    assert res.report["host_peak_bytes"] == off["host_bytes"]
    for k, v in plain.outputs.items():
        assert v.tobytes() == res.outputs[k].tobytes(), k
