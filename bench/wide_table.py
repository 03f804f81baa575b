#!/usr/bin/env python3
"""The wide corpus table (tests/wide, made by tools/export_wide.py), BENCHMARKS.md style.

For every model file of `tests/wide/manifest.json` (both exporters), at the first (smaller) input
size, runs the release `memplan` with `--json`:

- `inspect`: node count, unsupported ops;
- `inspect` again at the dims when the symbolic facts lack only contents (shape arithmetic with no
  formula over the symbols; the row's dims say "at a point");
- `run --inputs-npz --compare ort/...` and `estimate` at the run's dims (sizes made from the data
  included): the measured peak, the estimated one (equal to the byte when memplan is right) and agreement with onnxruntime (rtol 1e-4, atol 1e-5; models with
  random outputs are marked "random");
- `optimize --budget` at the resident bytes (weights, inputs) plus half of the rest of the estimated
  peak (`--half-total`: half the whole peak, out of reach when weights dominate), then `run --plan` on the rewritten model: the planned
  peak, whether the budget was met, and whether the planned run is bit-identical to the plain one.

A failing stage shows its memplan error line in the last column. Writes markdown to stdout.

Usage: .venv/bin/python bench/wide_table.py [--memplan target/release/memplan] [--size all]
           [--only STEM ...]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDE = os.path.join(ROOT, "tests", "wide")
KIB = 1024
HALF_TOTAL = False


def fmt(b):
    if b is None:
        return "-"
    if b >= 1024 * KIB:
        return f"{b / KIB / KIB:.2f} MiB"
    return f"{b / KIB:.1f} KiB"


class Fail(Exception):
    pass


def memplan(exe, *args):
    r = subprocess.run([exe, *args, "--json"], capture_output=True, text=True)
    # `optimize --budget` exits 3 when the budget is not met (the lowest plan is still reported).
    if r.returncode != 0 and not (args[0] == "optimize" and r.returncode == 3):
        line = next((l for l in r.stderr.splitlines() if l.strip()), "(no stderr)")
        raise Fail(f"{args[0]}: {line.strip()}")
    return json.loads(r.stdout)


def row(exe, tmp, stem, variant, entry, tag, dims):
    fstem = stem if variant == "dynamo" else f"{stem}.legacy"
    model = os.path.join(WIDE, "models", f"{fstem}.onnx")
    inputs = os.path.join(WIDE, "inputs", f"{stem}_{tag}.npz")
    ref = os.path.join(WIDE, "ort", f"{fstem}_{tag}.npz")
    dflags = [f"--dim={k}={v}" for k, v in dims.items()]
    r = {"model": stem, "exporter": variant, "dims": " ".join(f"{k}={v}" for k, v in dims.items())}
    try:
        ins = memplan(exe, "inspect", model)
        unknown = "needs unknown input facts"
        if ins["unsupported"] and all(u["reason"].startswith(unknown) for u in ins["unsupported"]):
            # Shape arithmetic with no formula over the symbols: inferred at the dims.
            ins = memplan(exe, "inspect", model, *dflags)
            r["dims"] += " (at a point)"
        r["nodes"] = ins["nodes"] if isinstance(ins["nodes"], int) else len(ins["nodes"])
        if ins["unsupported"]:
            roots = [u for u in ins["unsupported"] if not u["reason"].startswith("needs unknown input facts")]
            shown = roots or ins["unsupported"][:1]
            what = sorted({f"{u['op']} ({u['reason']})" for u in shown})
            raise Fail(f"{len(ins['unsupported'])} nodes without facts; causes: " + ", ".join(what))
        out = os.path.join(tmp, f"{fstem}.out.npz")
        compare = entry.get("compare_outputs", True)
        args = ["run", model, "--inputs-npz", inputs, "--out", out, *dflags]
        if compare:
            args += ["--compare", ref]
        run = memplan(exe, *args)
        # The run's dims: the given ones and the sizes it made from the data (NonZero, NMS).
        rflags = [f"--dim={k}={v}" for k, v in run["dims"].items()]
        est = memplan(exe, "estimate", model, *rflags)
        r["estimate"] = est["peak_bytes"]
        r["measured"] = run["peak_bytes"]
        r["ort"] = ("yes" if not run["mismatches"] else f"NO ({len(run['mismatches'])} outputs)") if compare else "random"
        # resident weights and inputs plus half of the rest (--half-total: half the whole peak)
        res = est["resident_bytes"]
        budget = est["peak_bytes"] // 2 if HALF_TOTAL else res + (est["peak_bytes"] - res) // 2
        # not below the floor (what no plan goes below), which is refused
        floor = memplan(exe, "optimize", model, "--budget", "lowest", "--exact-work", "0", *rflags)["floor"]["bytes"]
        budget = max(budget, floor)
        r["budget"] = budget
        opt = os.path.join(tmp, f"{fstem}.opt.onnx")
        plan = os.path.join(tmp, f"{fstem}.plan.json")
        rep = memplan(exe, "optimize", model, "--budget", str(budget), "--exact-work", "200000", "-o", opt,
                      "--plan-out", plan, *rflags)
        r["planned"] = rep["peak_bytes_after"]
        r["fits"] = rep["fits"]
        prun = memplan(exe, "run", opt, "--inputs-npz", inputs, "--plan", plan, "--compare", out, "--exact",
                       *rflags)
        r["bitident"] = "yes" if not prun["mismatches"] else "NO"
        r["planned_measured"] = prun["peak_bytes"]
    except Fail as e:
        r["error"] = str(e)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", default=os.path.join(ROOT, "target", "release", "memplan"))
    ap.add_argument("--size", choices=["first", "all"], default="first")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--half-total", action="store_true", help="budget = half the estimated peak")
    a = ap.parse_args()
    global HALF_TOTAL
    HALF_TOTAL = a.half_total
    with open(os.path.join(WIDE, "manifest.json")) as f:
        manifest = json.load(f)
    print("| model | exporter | dims | nodes | estimate | measured | = | ORT agrees | budget | planned peak"
          " | fits | planned run measured | bit-identical | error |")
    print("|---|---|---|---:|---:|---:|---|---|---:|---:|---|---:|---|---|")
    n = bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for stem, entry in manifest["models"].items():
            if a.only and stem not in a.only:
                continue
            sizes = list(entry["sizes"].items())
            if a.size == "first":
                sizes = sizes[:1]
            for variant, rec in entry["exports"].items():
                if not rec["ok"]:
                    print(f"| {stem} | {variant} | | | | | | | | | | | | export failed: {rec['error'][:120]} |")
                    continue
                for tag, dims in sizes:
                    r = row(a.memplan, tmp, stem, variant, entry, tag, dims)
                    n += 1
                    eq = ""
                    if "estimate" in r and "measured" in r:
                        eq = "yes" if r["estimate"] == r["measured"] else "NO"
                    if r.get("error") or eq == "NO" or r.get("ort", "yes").startswith("NO") or r.get("bitident") == "NO":
                        bad += 1
                    print(
                        f"| {r['model']} | {r['exporter']} | {r['dims']} | {r.get('nodes', '-')} | {fmt(r.get('estimate'))}"
                        f" | {fmt(r.get('measured'))} | {eq} | {r.get('ort', '-')} | {fmt(r.get('budget'))} | {fmt(r.get('planned'))}"
                        f" | {'' if 'fits' not in r else ('yes' if r['fits'] else 'no')}"
                        f" | {fmt(r.get('planned_measured'))} | {r.get('bitident', '-')}"
                        f" | {r.get('error', '').replace('|', '/')[:200]} |",
                        flush=True,
                    )
    print(f"\n{n} rows, {bad} with a failure", file=sys.stderr)


if __name__ == "__main__":
    main()
