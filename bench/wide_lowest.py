#!/usr/bin/env python3
"""The lowest plan of every wide-corpus file, run bit for bit (a robustness sweep).

For every model file of `tests/wide/manifest.json` (both exporters) at its first size, with the
sequence-like dims (S, T, N, M) times --scale: a plain `memplan run` (the manifest's inputs at scale
1, seeded random inputs otherwise) writes the reference outputs; `memplan optimize --budget lowest`
writes the rewritten model and its plan; `memplan run --plan` runs them on the same inputs and
compares every output bit for bit. Prints one JSON line per file: the estimated and planned peaks,
the chunking steps (and how many were tiled), whether the planned run is bit-identical and its
measured peak equals the planned one, the seconds it all took, or the first error line.

Usage: .venv/bin/python bench/wide_lowest.py [--memplan target/release/memplan] [--scale 8] [--only STEM ...]
"""
import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wide_table as wt  # noqa: E402

SCALED = ("S", "T", "N", "M")


def row(exe, tmp, stem, variant, entry, scale):
    tag, dims = next(iter(entry["sizes"].items()))
    dims = {k: (v * scale if k in SCALED else v) for k, v in dims.items()}
    fstem = stem if variant == "dynamo" else f"{stem}.legacy"
    model = os.path.join(wt.WIDE, "models", f"{fstem}.onnx")
    if not os.path.exists(model):
        return None
    feeds = (["--inputs-npz", os.path.join(wt.WIDE, "inputs", f"{stem}_{tag}.npz")] if scale == 1
             else ["--random", "--seed", "1"])
    r = {"file": fstem, "dims": dims}
    t0 = time.time()
    try:
        out = os.path.join(tmp, f"{fstem}.out.npz")
        run = wt.memplan(exe, "run", model, *feeds, "--out", out, *[f"--dim={k}={v}" for k, v in dims.items()])
        rflags = [f"--dim={k}={v}" for k, v in run["dims"].items()]
        opt, plan = os.path.join(tmp, f"{fstem}.opt.onnx"), os.path.join(tmp, f"{fstem}.plan.json")
        rep = wt.memplan(exe, "optimize", model, "--budget", "lowest", "-o", opt, "--plan-out", plan, *rflags)
        r["estimated"], r["planned"] = rep["peak_bytes_before"], rep["peak_bytes_after"]
        steps = (rep.get("chunking") or {}).get("steps", [])
        r["steps"], r["tiled"] = len(steps), sum(1 for s in steps if s.get("tiles"))
        prun = wt.memplan(exe, "run", opt, *feeds, "--plan", plan, "--compare", out, "--exact", *rflags)
        r["bit_identical"] = not prun["mismatches"]
        r["measured_is_planned"] = prun["peak_bytes"] == rep["peak_bytes_after"]
    except wt.Fail as e:
        r["error"] = str(e)
    r["seconds"] = round(time.time() - t0, 1)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memplan", default=os.path.join(wt.ROOT, "target", "release", "memplan"))
    ap.add_argument("--scale", type=int, default=1, help="multiply the S, T, N, M dims (random inputs when > 1)")
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    with open(os.path.join(wt.WIDE, "manifest.json")) as f:
        models = json.load(f)["models"]
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for stem, entry in sorted(models.items()):
            if args.only and stem not in args.only:
                continue
            for variant in ("dynamo", "legacy"):
                r = row(args.memplan, tmp, stem, variant, entry, args.scale)
                if r is None:
                    continue
                bad += not (r.get("bit_identical") and r.get("measured_is_planned"))
                print(json.dumps(r), flush=True)
    print(f"{bad} file(s) failed or differed", file=sys.stderr)


if __name__ == "__main__":
    main()
