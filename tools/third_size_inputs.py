#!/usr/bin/env python3
"""Inputs for the corpus tests' third size where random inputs are not valid.

`of3_token_frame_atoms_gather` derives gather indices from its inputs (token start atoms, atoms per
token, atom-to-token map), so `memplan run --random` would index out of range. Its third-size inputs are
the first N_TOKEN tokens of the size-128 inputs (`tests/corpus/inputs/of3_token_frame_atoms_gather_128.npz`)
and the atoms they own: a consistent structure at N_token=81, N_atom=(atoms of those tokens).
Writes `tests/fixtures/third_size/of3_token_frame_atoms_gather.npz` and prints the dims.

Usage: .venv/bin/python tools/third_size_inputs.py
"""

import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N_TOKEN = 81


def main():
    src = np.load(os.path.join(ROOT, "tests", "corpus", "inputs", "of3_token_frame_atoms_gather_128.npz"))
    d = {k: src[k] for k in src.files}
    start, count = d["start_atom_index"][0], d["num_atoms_per_token"][0]
    n_atom = int(start[N_TOKEN - 1] + count[N_TOKEN - 1])
    assert (d["atom_to_token"][0, :n_atom] < N_TOKEN).all()
    out = {}
    for k, v in d.items():
        if v.shape[1] == 128:
            out[k] = np.ascontiguousarray(v[:, :N_TOKEN])
        else:
            out[k] = np.ascontiguousarray(v[:, :n_atom])
    path = os.path.join(ROOT, "tests", "fixtures", "third_size", "of3_token_frame_atoms_gather.npz")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.savez(path, **out)
    print(f"N_token={N_TOKEN} N_atom={n_atom} -> {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
