"""Helpers the plan benches share: running the memplan binary, reading its JSON, timing two planned
runs side by side (alternating, medians), and a model's lowest plan against its unoptimized run, as
BENCHMARKS.md reports them."""

import json
import os
import statistics
import subprocess
import time


def sh(args, ok=(0,)):
    """Runs `args`; an exit status outside `ok` raises with the command and its stderr."""
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode not in ok:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")
    return r


def js(args, ok=(0,)):
    """`sh`, its stdout parsed as JSON."""
    return json.loads(sh(args, ok).stdout)


def timed(args):
    """Whole-process wall time of one successful run."""
    t = time.perf_counter()
    sh(args)
    return time.perf_counter() - t


def planned_time_ratio(memplan, a, b, extra, repeat):
    """Median wall time of `memplan run A.onnx --plan A.json` over that of B, the two alternating
    `repeat` times (`a`, `b`: paths without the extension; `extra`: dims and input flags)."""
    ta, tb = [], []
    for _ in range(repeat):
        for base, acc in ((a, ta), (b, tb)):
            acc.append(timed([memplan, "run", f"{base}.onnx", "--plan", f"{base}.json", *extra,
                              "--threads", "2", "--json"]))
    return statistics.median(ta) / statistics.median(tb)


def lowest_against_whole(memplan, base, model, inputs, dims, stem, repeat):
    """`memplan optimize --budget lowest` of `model` at `dims` (flags), written to STEM.lowest.onnx
    and .json, and `base`'s (another build, or None) to STEM.base.*; the planned run compared bit
    for bit with the unoptimized one (its outputs written to STEM.ref.npz) on `inputs` (an npz), and
    both timed, whole process, `repeat` alternating runs, 2 threads.

    Returns a dict: `report` (optimize's JSON), `base_peak` (base's planned peak, or None), `exact`
    (measured = planned), `same` (outputs bit-identical), `wall` (median seconds: unoptimized, lowest).
    """
    ref = stem + ".ref.npz"
    sh([memplan, "run", model, "--inputs-npz", inputs, "--out", ref, "--threads", "2"])

    def lowest(binary, out):
        return js([binary, "optimize", model, *dims, "--budget", "lowest", "-o", out + ".onnx",
                   "--plan-out", out + ".json", "--json"], ok=(0, 3))

    rep = lowest(memplan, stem + ".lowest")
    base_peak = lowest(base, stem + ".base")["peak_bytes_after"] if base else None
    run = [memplan, "run", stem + ".lowest.onnx", "--plan", stem + ".lowest.json", "--inputs-npz", inputs,
           "--threads", "2", "--compare", ref, "--exact", "--json"]
    got = js(run, ok=(0, 1))
    tu, tp = [], []
    for _ in range(repeat):
        tu.append(timed([memplan, "run", model, "--inputs-npz", inputs, "--threads", "2", "--json"]))
        tp.append(timed(run))
    return {
        "report": rep,
        "base_peak": base_peak,
        "exact": got["peak_bytes"] == rep["peak_bytes_after"],
        "same": bool(got.get("compared")) and not got.get("mismatches"),
        "wall": (statistics.median(tu), statistics.median(tp)),
    }


def lowest_row(name, variant, r, held_by=False):
    """One markdown row of `lowest_against_whole`'s result `r`: model, export, peak unoptimized, floor
    (with what holds it up when `held_by`), lowest planned (x), base build's lowest, measured =
    planned, bit-identical, wall s unoptimized / lowest."""
    mib = 1024 * 1024
    rep = r["report"]
    before, after, fl = rep["peak_bytes_before"], rep["peak_bytes_after"], rep["floor"]
    base = "-" if r["base_peak"] is None else f"{r['base_peak'] / mib:.1f} MiB"
    floor = f"{fl['bytes'] / mib:.1f} MiB" + (f" ({fl.get('held_by', '')})" if held_by else "")
    return (f"| {name} | {variant} | {before / mib:.1f} MiB | {floor} | {after / mib:.1f} MiB ({after / before:.3f}) "
            f"| {base} | {'yes' if r['exact'] else 'NO'} | {'yes' if r['same'] else 'NO'} "
            f"| {r['wall'][0]:.2f} / {r['wall'][1]:.2f} |")


def each_export(stem, export_one):
    """STEM.dynamo.onnx and STEM.legacy.onnx, each made once by `export_one(variant, path)`. Returns
    {variant: path} without an exporter that fails (its error is printed to stderr: torch's own
    limits, such as the TorchScript exporter refusing `aten::_native_multi_head_attention`)."""
    import sys

    paths = {}
    for variant in ("dynamo", "legacy"):
        p = f"{stem}.{variant}.onnx"
        if not os.path.exists(p):
            try:
                export_one(variant, p)
            except Exception as e:  # noqa: BLE001 - any exporter failure skips that export
                print(f"{os.path.basename(stem)}: the {variant} exporter failed: {type(e).__name__}: "
                      f"{str(e).splitlines()[-1] if str(e) else ''}", file=sys.stderr)
                if os.path.exists(p):
                    os.remove(p)
                continue
        paths[variant] = p
    return paths


def torch_exports(module, x, stem, batch=None):
    """STEM.dynamo.onnx and STEM.legacy.onnx: `module` (a torch module in eval mode) on image `x`
    exported by both torch exporters (input `x`, output `y`), each made once ([`each_export`]); with
    `batch`, axis 0 of `x` and `y` is the symbol of that name."""
    import torch

    def export_one(variant, p):
        with torch.no_grad():
            if variant == "legacy":
                axes = {"x": {0: batch}, "y": {0: batch}} if batch else None
                torch.onnx.export(module, (x,), p, dynamo=False, opset_version=17, input_names=["x"],
                                  output_names=["y"], dynamic_axes=axes)
            else:
                shapes = {"x": {0: torch.export.Dim(batch, min=1, max=4096)}} if batch else None
                torch.onnx.export(module, (x,), dynamo=True, input_names=["x"], output_names=["y"],
                                  dynamic_shapes=shapes).save(p)

    return each_export(stem, export_one)
