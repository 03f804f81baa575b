"""Narrowing on real exports: which wide-corpus models hold a tensor of few values (a mask) live at
the peak, and what storing it in one byte per element gives.

For every wide-corpus model (both exports) whose symbols are a batch B and a sequence S, at B=1 and
S = --seq: the graph-order peak (`memplan estimate`), then `memplan optimize --budget` one byte
below it, with and without narrowing (`--no-narrow`). For the models where narrowing stores
something: the narrowed values (bytes before and after), the graph-order peak after narrowing, the
planned peak with and without narrowing, the measured peak of the narrowed plan's run (`memplan
run --plan`, random inputs), whether its outputs are bit-identical to the plain run's, and the wall
time of the narrowed plan's run over the plan without narrowing (whole process, 2 threads, median
of --repeat alternating runs). Prints a Markdown table.

Usage: .venv/bin/python bench/narrow_table.py [--seq 2048] [--repeat 5] [--memplan target/release/memplan]
"""

import argparse
import json
import os
import sys

from benchcli import js as run_json, planned_time_ratio

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDE = os.path.join(REPO, "tests/wide")
OUT = os.path.join(REPO, "bench/out/narrow")


def jsok(args):
    """memplan's JSON; `optimize` exits 3 when a budget is not met, still reporting."""
    return run_json(args, ok=(0, 3))


def mib(b):
    if b < 2**20:
        return f"{b / 2**10:.1f} KiB"
    return f"{b / 2**20:.1f} MiB"


def narrowed(m, path, seq, file):
    """Optimizes at B=1, S=seq with and without narrowing and runs the narrowed plan; `None`s
    when nothing is narrowed."""
    dims = ["--dim", "B=1", "--dim", f"S={seq}"]
    est = jsok([m, "estimate", path, *dims, "--json"])["peak_bytes"]
    budget = f"{est - 1}B"
    base = os.path.join(OUT, file[: -len(".onnx")])
    on = jsok([m, "optimize", path, *dims, "--budget", budget, "-o", base + ".n.onnx",
             "--plan-out", base + ".n.json", "--json"])
    n = on.get("narrowing")
    if not n:
        return None, None, None, None, None, None
    off = jsok([m, "optimize", path, *dims, "--budget", budget, "--no-narrow", "-o", base + ".o.onnx",
              "--plan-out", base + ".o.json", "--json"])
    ref = base + ".ref.npz"
    jsok([m, "run", path, *dims, "--random", "--out", ref, "--json"])
    got = jsok([m, "run", base + ".n.onnx", "--plan", base + ".n.json", *dims, "--random",
              "--compare", ref, "--exact", "--json"])
    return n, on, off, got, base, dims


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--memplan", default=os.path.join(REPO, "target/release/memplan"))
    a = ap.parse_args()
    m = a.memplan
    os.makedirs(OUT, exist_ok=True)
    manifest = json.load(open(os.path.join(WIDE, "manifest.json")))["models"]
    rows, scanned = [], 0
    for stem, e in sorted(manifest.items()):
        if sorted(e.get("symbols", [])) != ["B", "S"]:
            continue
        for exp in e["exports"].values():
            if not isinstance(exp, dict) or not exp.get("ok", True) or "file" not in exp:
                continue
            path = os.path.join(WIDE, "models", exp["file"])
            if not os.path.exists(path):
                continue
            scanned += 1
            # Learned position tables bound the sequence: where S fails, the table's length.
            cfg = e.get("config", {})
            seqs = [a.seq] + [cfg[k] for k in ("max_position_embeddings", "n_positions") if cfg.get(k, a.seq) < a.seq]
            done = None
            for seq in sorted(set(seqs), reverse=True):
                try:
                    done = (seq, *narrowed(m, path, seq, exp["file"]))
                    break
                except RuntimeError as err:
                    print(f"{exp['file']} at S={seq}: {err}", file=sys.stderr)
            if done is None or done[1] is None:
                continue
            seq, n, on, off, got, base, dims = done
            identical = got["compared"] and not got["mismatches"]
            ratio = planned_time_ratio(m, base + ".n", base + ".o", [*dims, "--random"], a.repeat)
            values = "; ".join(
                f"`{s['value']}` {s['dtype']} {mib(s['bytes'])} -> {s['stored_as']} {mib(s['narrow_bytes'])}"
                for s in n["steps"]
            )
            rows.append(
                f"| {exp['file']} | {seq} | {values} | {mib(n['peak_bytes_before'])} | {mib(n['peak_bytes_after'])} "
                f"| {mib(off['peak_bytes_after'])} | {mib(on['peak_bytes_after'])} | {mib(got['peak_bytes'])} "
                f"| {'yes' if identical else 'NO'} | {ratio:.2f}x |"
            )
    print(f"{scanned} exports scanned at B=1, S={a.seq} (or the model's position table); {len(rows)} narrowed.\n")
    print("| model | S | narrowed | graph-order peak | after narrowing | planned, no narrowing | planned, narrowed "
          "| measured (planned run) | bit-identical | time vs no narrowing |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---|---:|")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
