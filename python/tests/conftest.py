"""Shared fixtures: the corpus, the CLI binary of the same build, and a CLI runner."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus"
MODELS = CORPUS / "models"

# The dynamo exports of the corpus, each with the inputs of its smaller measured size.
CORPUS_CASES = sorted(
    (p.stem.rsplit("_", 1)[0], p)
    for p in (CORPUS / "inputs").glob("*.npz")
    if (MODELS / f"{p.stem.rsplit('_', 1)[0]}.onnx").exists()
)
SMALL_CASES = {}
for _name, _npz in CORPUS_CASES:
    size = int(_npz.stem.rsplit("_", 1)[1])
    if _name not in SMALL_CASES or size < SMALL_CASES[_name][0]:
        SMALL_CASES[_name] = (size, _npz)


def cli_path() -> Path:
    p = os.environ.get("MEMPLAN_BIN")
    path = Path(p) if p else ROOT / "target" / "release" / "memplan"
    if not path.exists():
        pytest.fail(f"the memplan binary is not built at {path}: set MEMPLAN_BIN or build it")
    return path


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Runs the memplan CLI; `check` requires exit status 0."""
    r = subprocess.run([str(cli_path()), *map(str, args)], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"memplan {' '.join(map(str, args))} failed ({r.returncode}): {r.stderr}")
    return r


def cli_json(*args: str) -> dict:
    return json.loads(cli(*args, "--json").stdout)


def cli_error(*args: str) -> str:
    """The CLI's error line (without `error: `) for a command that must fail with status 1."""
    r = cli(*args, check=False)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("error: "), line
    return line[len("error: "):]


def dim_flags(dims: dict) -> list[str]:
    return [f"--dim={k}={v}" for k, v in dims.items()]


def npz_inputs(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="session")
def corpus_dims() -> dict[str, dict[str, int]]:
    """Per small corpus case, the dims its inputs bind (as `memplan run` reports them)."""
    import memplan

    out = {}
    for name, (_, npz) in SMALL_CASES.items():
        m = memplan.load(MODELS / f"{name}.onnx")
        out[name] = memplan.run(m, npz_inputs(npz)).report["dims"]
    return out
