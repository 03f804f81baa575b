#!/usr/bin/env python3
"""Recurrent models as a user writes them in PyTorch (`nn.LSTM`, `nn.GRU`, batch first, two layers,
bidirectional, a linear head on every step), exported by both torch exporters with a symbolic batch
B: the lowest plan (`memplan optimize --budget lowest`) against the unoptimized run, and another
memplan build's (`--base`) side by side. The ONNX `LSTM`/`GRU` nodes pass their batch to chunks.

Usage: .venv/bin/python bench/recurrent_chunks.py [--memplan target/release/memplan] [--base OTHER]
       [--batch 256] [--steps 64] [--repeat 3]
"""

import argparse
import os

import numpy as np

from benchcli import lowest_against_whole, lowest_row, torch_exports

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def model(kind, features, hidden):
    import torch

    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            cell = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
            self.rnn = cell(features, hidden, num_layers=2, batch_first=True, bidirectional=True)
            self.head = torch.nn.Linear(2 * hidden, 16)

        def forward(self, x):
            y, _ = self.rnn(x)
            return torch.log_softmax(self.head(torch.relu(y)), dim=-1)

    torch.manual_seed(0)
    return Tagger().eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memplan", default=os.path.join(ROOT, "target", "release", "memplan"))
    ap.add_argument("--base", default=None)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", default=os.path.join(ROOT, "target", "recurrent_chunks"))
    a = ap.parse_args()
    import torch

    os.makedirs(a.work, exist_ok=True)
    print(f"B={a.batch}, {a.steps} steps, {a.features} features, hidden {a.hidden}, `--budget lowest`, "
          f"2 threads, median of {a.repeat} alternating runs\n")
    print("| model | export | peak unoptimized | floor | lowest planned (x) | base build's lowest | "
          "measured = planned | bit-identical | wall s, unoptimized / lowest |")
    print("|---|---|---:|---|---:|---:|---|---|---|")
    for kind in ("lstm", "gru"):
        x = torch.randn(2, a.steps, a.features)
        paths = torch_exports(model(kind, a.features, a.hidden), x, os.path.join(a.work, kind), batch="B")
        for variant, path in paths.items():
            stem = os.path.join(a.work, f"{kind}.{variant}")
            xs = np.random.default_rng(0).standard_normal((a.batch, a.steps, a.features), dtype=np.float32)
            inputs = stem + f".in{a.batch}.npz"
            np.savez(inputs, x=xs)
            r = lowest_against_whole(a.memplan, a.base, path, inputs, ["--dim", f"B={a.batch}"], stem, a.repeat)
            print(lowest_row(kind, variant, r), flush=True)


if __name__ == "__main__":
    main()
