"""Helpers the plan benches share: running the memplan binary, reading its JSON, and timing two
planned runs side by side (alternating, medians), as BENCHMARKS.md reports them."""

import json
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
