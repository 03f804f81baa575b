#!/usr/bin/env python3
"""The planner's before/after table for the corpus (README, "Planner results").

For every corpus model (dynamo export; `--legacy` adds the TorchScript ones) at the manifest's sizes
(`measurements` keys, dims from their input shapes), runs `memplan optimize --json` and prints: the
peak in the graph's own order (`peak_bytes_before`: liveness peak, what `memplan estimate` reports),
the planned peak (`peak_bytes_after`: the planned arena plus the resident weights and inputs, what
`memplan run --plan` measures), the arena alone, the no-fragmentation bound of the chosen schedule,
and the change. With `--run`, also runs each plan (`memplan run --plan`, inputs chosen as in
`estimate_vs_measured.py`) and adds the measured tensor peak, which must equal the planned peak.
Writes a markdown table to stdout.

Usage: .venv/bin/python bench/corpus_plan_table.py [--memplan target/release/memplan] [--legacy]
           [--exact-work STATES] [--run]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import estimate_vs_measured as ev  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "corpus")
MIB = 1024 * 1024


def input_dims(path):
    import onnx

    m = onnx.load(path, load_external_data=False)
    return {
        i.name: [d.dim_param if d.dim_param else d.dim_value for d in i.type.tensor_type.shape.dim]
        for i in m.graph.input
    }


def dims_for(decl, shapes):
    dims = {}
    for name, ds in decl.items():
        for d, v in zip(ds, shapes.get(name, [])):
            if isinstance(d, str) and d:
                dims[d] = v
    return dims


def mib(b):
    return f"{b / MIB:.2f} MiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", default=os.path.join(ROOT, "target", "release", "memplan"))
    ap.add_argument("--legacy", action="store_true")
    ap.add_argument("--exact-work", default="2000000")
    ap.add_argument("--run", action="store_true")
    a = ap.parse_args()
    manifest = json.load(open(os.path.join(CORPUS, "manifest.json")))
    variants = [("dynamo", "")] + ([("legacy", ".legacy")] if a.legacy else [])
    run_col = (" measured (planned run) |", "---:|") if a.run else ("", "")
    print("| model | dims | graph-order peak | planned peak | arena | arena bound | in place | scheduler | change |" + run_col[0])
    print("|---|---|---:|---:|---:|---:|---:|---|---:|" + run_col[1])
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for m in manifest["models"]:
            for variant, suffix in variants:
                path = os.path.join(CORPUS, "models", m["name"] + suffix + ".onnx")
                if not os.path.exists(path):
                    continue
                decl = input_dims(path)
                name = m["name"] + ("" if variant == "dynamo" else " (legacy)")
                for size, meas in m["measurements"].items():
                    dims = dims_for(decl, meas["input_shapes"])
                    d = " ".join(f"{k}={v}" for k, v in sorted(dims.items()))
                    cmd = [a.memplan, "optimize", path, "--json", "--exact-work", a.exact_work,
                           "-o", os.path.join(tmp, "o.onnx"), "--plan-out", os.path.join(tmp, "p.json")]
                    cmd += [f"--dim={k}={v}" for k, v in sorted(dims.items())]
                    r = subprocess.run(cmd, capture_output=True, text=True)
                    if r.returncode != 0:
                        failed += 1
                        print(f"| {name} | {d} | error: {(r.stderr.strip().splitlines() or ['failed'])[-1]} | | | | | | |")
                        continue
                    j = json.loads(r.stdout)
                    before, after = j["peak_bytes_before"], j["peak_bytes_after"]
                    change = 100.0 * (after - before) / before if before else 0.0
                    measured = ""
                    if a.run:
                        given = ev.archive_for(m["name"], size, meas["input_shapes"])
                        if given is None and m["name"] == "of3_token_frame_atoms_gather":
                            given = ev.token_frame_inputs(meas["input_shapes"], os.path.join(tmp, "tf.npz"))
                        inputs = ["--inputs-npz", given] if given else ["--random", "--seed", "0"]
                        run = subprocess.run(
                            [a.memplan, "run", os.path.join(tmp, "o.onnx"), "--plan", os.path.join(tmp, "p.json"), "--json"]
                            + inputs + [f"--dim={k}={v}" for k, v in sorted(dims.items())],
                            capture_output=True, text=True,
                        )
                        if run.returncode != 0:
                            failed += 1
                            measured = " error |"
                        else:
                            r = json.loads(run.stdout)
                            same = r["peak_bytes"] == after and not r["plan_misses"] and not r["inplace_copied"]
                            failed += 0 if same else 1
                            measured = f" {mib(r['peak_bytes'])}{'' if same else ' (differs)'} |"
                    print(
                        f"| {name} | {d} | {mib(before)} | {mib(after)} | {mib(j['arena_bytes'])} | "
                        f"{mib(j['arena_lower_bound'])} | {j['inplace']} | {j['scheduler']} | {change:+.1f}% |"
                        + measured
                    )
                    print(f"{name} {d}: done", file=sys.stderr)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
