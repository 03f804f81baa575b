"""Offload to a host tier on the training step of a 4-block OpenFold3 PairFormer stack.

For each N: builds the stack (tools/stack_pairformer.py) and its training step w.r.t. every weight
(`memplan grad --of loss`), finds the lowest device peak recomputation and chunking reach
(`optimize --recompute --budget lowest`: the lowest plan), then asks for a device budget 10%
below it (`optimize --recompute --device-budget`): buffers idle across the peak wait in the host
tier. Runs the unoptimized training step and the offloaded plan (`memplan run --plan`, 2 threads):
device tier planned and measured, host tier planned and measured, the copies' predicted time (16 GB/s
link) in all and the part the compute waits for (not overlapped, at the plan's predicted step
times), beside the copies' measured time (memcpy on this machine, on the executor's copier thread)
and the time the compute waited for them (and what it waits for with the same copies made
synchronously, right after the last use and right before the reader; medians of --repeat runs of
each, alternating); wall time of the offloaded run over the recompute-only
plan's (whole process, median of --repeat alternating runs), and bit-identity of every gradient.
Prints a Markdown table.

Usage: .venv/bin/python bench/offload_stack.py [--sizes 64] [--repeat 3] [--host-bandwidth 16]
    [--memplan target/release/memplan]
"""

import argparse
import json
import os
import statistics
import sys
import time

from benchcli import js, planned_time_ratio, sh

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "bench/out/offload_stack")


def mib(b):
    return f"{b / 2**20:.2f} MiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[64])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--host-bandwidth", type=float, default=16.0,
                    help="GB/s the plan's copy windows are sized for (optimize --host-bandwidth)")
    ap.add_argument("--memplan", default=os.path.join(REPO, "target/release/memplan"))
    a = ap.parse_args()
    m = a.memplan
    os.makedirs(OUT, exist_ok=True)
    stack = os.path.join(OUT, f"stack{a.blocks}.onnx")
    train = os.path.join(OUT, f"stack{a.blocks}_train.onnx")
    sh([sys.executable, os.path.join(REPO, "tools/stack_pairformer.py"), "-k", str(a.blocks), "-o", stack])
    sh([m, "grad", stack, "--of", "loss", "-o", train])
    rows = []
    for n in a.sizes:
        d = ["--dim", f"N={n}"]
        base = os.path.join(OUT, f"n{n}")
        low = js([m, "optimize", train, *d, "--recompute", "--budget", "lowest", "-o", base + ".r.onnx",
                  "--plan-out", base + ".r.json", "--json"], ok=(0, 3))
        reached = low["peak_bytes_after"]
        device = reached * 9 // 10
        t0 = time.perf_counter()
        o = js([m, "optimize", train, *d, "--recompute", "--device-budget", f"{device}B",
                  "--host-bandwidth", str(a.host_bandwidth), "-o",
                base + ".o.onnx", "--plan-out", base + ".o.json", "--json"], ok=(0, 3))
        opt_s = time.perf_counter() - t0
        off = o.get("offload") or {}
        ref = base + ".ref.npz"
        plain = js([m, "run", train, *d, "--random", "--out", ref, "--threads", "2", "--json"])
        got = js([m, "run", base + ".o.onnx", "--plan", base + ".o.json", *d, "--random", "--compare", ref,
                  "--exact", "--threads", "2", "--json"])
        identical = got["compared"] and not got["mismatches"]
        # The same moves with every copy synchronous (right after the last use, right before the
        # reader), at the same device ranges: what the compute waits for without the overlap.
        with open(base + ".o.json") as f:
            plan = json.load(f)
        for mv in plan.get("offloads", []):
            mv["out_done"], mv["in_start"] = mv["out_after"], mv["in_before"]
        with open(base + ".s.json", "w") as f:
            json.dump(plan, f)
        sync = js([m, "run", base + ".o.onnx", "--plan", base + ".s.json", *d, "--random", "--compare", ref,
                   "--exact", "--threads", "2", "--json"])
        identical = identical and sync["compared"] and not sync["mismatches"]
        # Copy and wait times: medians of --repeat runs of each, alternating.
        times = {"o": [], "s": []}
        for _ in range(a.repeat):
            for k in times:
                r = js([m, "run", base + ".o.onnx", "--plan", f"{base}.{k}.json", *d, "--random", "--threads", "2",
                        "--json"])
                times[k].append((r.get("host_transfer_seconds", 0), r.get("host_transfer_wait_seconds", 0)))
        med = {k: [statistics.median(x[i] for x in v) * 1e3 for i in (0, 1)] for k, v in times.items()}
        ratio = planned_time_ratio(m, base + ".o", base + ".r", [*d, "--random"], a.repeat)
        rows.append(
            f"| {n} | {mib(plain['peak_bytes'])} | {mib(reached)} | {mib(device)} "
            f"| {mib(off.get('device_peak_after', o['peak_bytes_after']))} | {mib(got['peak_bytes'])} "
            f"| {len(off.get('moved', []))} | {mib(off.get('host_bytes', 0))} | {mib(got.get('host_peak_bytes', 0))} "
            f"| {off.get('predicted_seconds', 0) * 1e3:.2f} / {off.get('predicted_exposed_seconds', 0) * 1e3:.2f} ms "
            f"| {med['o'][0]:.2f} / {med['o'][1]:.2f} ms | {med['s'][0]:.2f} / {med['s'][1]:.2f} ms "
            f"| {ratio:.2f}x | {'yes' if identical else 'NO'} "
            f"| {opt_s:.0f} s |"
        )
    print("| N | training step (unoptimized) | lowest with recompute + chunking | device budget "
          "| device tier planned | device tier measured | buffers moved | host tier planned "
          f"| host tier measured | copies predicted ({a.host_bandwidth:g} GB/s): all / exposed | copies measured: all / waited for "
          "| same copies synchronous: all / waited for | time vs recompute-only plan "
          "| gradients bit-identical | optimize time |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
