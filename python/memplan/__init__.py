"""memplan from Python: predict and cut the peak memory of ONNX tensor programs.

The functions mirror the command line, without files or flags::

    import memplan
    est = memplan.estimate("model.onnx", dims={"N": 512}, budget="80GiB")
    est.peak_bytes, est.formula, est.formula(N=1024), est.max_fitting
    opt = memplan.optimize("model.onnx", dims={"N": 512}, budget="1GiB")
    res = memplan.run(opt, {"x": x})          # outputs as numpy arrays, measured peak and time

A model is a path, the bytes of an ONNX file, an ``onnx.ModelProto`` or a :class:`Model` (read once,
reused). Every report is the CLI's JSON (``.json``), computed by the same library code. Errors raise
:class:`Error` (subclasses :class:`ModelError`, :class:`UsageError`, :class:`PlanError`,
:class:`RunError`) with the one line the CLI prints. ``memplan.torch`` exports and fits PyTorch modules.
"""

from __future__ import annotations

import html
import json
import os
from typing import Any, Callable, Iterator, Mapping, Optional, Union

from . import _memplan as _core
from ._memplan import Error, ModelError, PlanError, RunError, UsageError, __version__

__all__ = [
    "Error",
    "ModelError",
    "UsageError",
    "PlanError",
    "RunError",
    "Model",
    "Estimate",
    "Formula",
    "Sweep",
    "Plan",
    "Optimized",
    "RunResult",
    "load",
    "estimate",
    "sweep",
    "optimize",
    "run",
    "parse_size",
    "human_bytes",
    "__version__",
]

Dims = Mapping[str, int]
Size = Union[int, str]


def _budget(size: Size, peak: Callable[[], int]) -> int:
    """A budget: a size, ``"lowest"`` (0: as low as it goes), or a fraction of the estimated peak
    (``"0.15x"``, of ``peak()``, rounded down), as the CLI's ``--budget``."""
    if isinstance(size, str):
        b, fraction = _core.parse_budget(size)
        return b if b is not None else int(peak() * fraction)
    return parse_size(size)


def parse_size(size: Size) -> int:
    """Bytes of a size: an int, or a string like the CLI's ``--budget`` (``80GiB``, ``512MB``)."""
    if isinstance(size, bool):
        raise UsageError(f"size {size!r}: expected bytes (int) or a string like '80GiB'")
    if isinstance(size, int):
        if size < 0:
            raise UsageError(f"size {size} is out of range")
        return size
    if isinstance(size, str):
        return _core.parse_size(size)
    raise UsageError(f"size {size!r}: expected bytes (int) or a string like '80GiB'")


def human_bytes(n: int) -> str:
    """``1.5 GiB``-style rendering with binary units, as the CLI's reports write sizes."""
    return _core.human_bytes(int(n))


class Model:
    """A model read into memplan's IR with its shapes inferred, reusable across calls."""

    def __init__(self, loaded: "_core.LoadedModel"):
        self._loaded = loaded

    @property
    def label(self) -> str:
        """What errors and reports call the model: its path, or ``<bytes>``."""
        return self._loaded.label

    @property
    def symbols(self) -> list[str]:
        """The symbolic dims of its shapes."""
        return list(self._loaded.symbols)

    def inspect(self) -> dict:
        """``memplan inspect --json``: interface, op histogram, weights, unsupported ops."""
        return json.loads(self._loaded.inspect_json())

    def to_bytes(self) -> bytes:
        """The model as ONNX bytes (every payload inline)."""
        return self._loaded.to_onnx()

    def to_onnx(self) -> Any:
        """An ``onnx.ModelProto`` when the ``onnx`` package is installed, else the ONNX bytes."""
        data = self.to_bytes()
        try:
            import onnx
        except ImportError:
            return data
        return onnx.load_from_string(data)

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Writes the model atomically, as ``memplan optimize -o`` does."""
        self._loaded.save(os.fspath(path))

    def __repr__(self) -> str:
        return f"<memplan.Model {self.label} symbols={self.symbols}>"


ModelLike = Union[str, os.PathLike, bytes, bytearray, memoryview, Model, Any]


def load(model: ModelLike) -> Model:
    """Reads a model once: a path, ONNX bytes, an ``onnx.ModelProto``, an :class:`Optimized` (its
    rewritten model) or a :class:`Model` (returned as is)."""
    if isinstance(model, Model):
        return model
    if isinstance(model, Optimized):
        return model.model
    if isinstance(model, (str, os.PathLike)):
        return Model(_core.LoadedModel.from_path(os.fspath(model)))
    if isinstance(model, (bytes, bytearray, memoryview)):
        return Model(_core.LoadedModel.from_bytes(bytes(model), "<bytes>"))
    if hasattr(model, "SerializeToString"):
        return Model(_core.LoadedModel.from_bytes(model.SerializeToString(), "<onnx.ModelProto>"))
    raise TypeError(
        f"model: expected a path, ONNX bytes, an onnx.ModelProto or a memplan.Model, got {type(model).__name__}"
    )


def _dims(dims: Optional[Dims]) -> dict[str, int]:
    """Dims checked as the CLI checks ``--dim NAME=VALUE`` (same messages)."""
    return _core.parse_dims([f"{k}={v}" for k, v in (dims or {}).items()])


class Formula:
    """The peak as a formula of one symbol (the others fixed): printable (``str``) and callable
    (``formula(N=1024)`` gives the exact peak in bytes at those dims, the others as estimated)."""

    def __init__(self, report: dict, model: Model, dims: dict[str, int]):
        self.report = report
        self._model = model
        self._dims = dims

    @property
    def text(self) -> str:
        """``peak ≈ 16·N³ + ... (for N ≥ 88)``: the dominant regime along ``symbol``, readable."""
        return self.report["text"]

    @property
    def symbol(self) -> str:
        """The symbol grown (the others fixed at the estimate's dims)."""
        return self.report["symbol"]

    @property
    def dominant(self) -> str:
        """The dominant regime's live bytes, exact, in every symbol."""
        return self.report["dominant"]

    @property
    def valid_from(self) -> int:
        """The dominant regime is the peak for every ``symbol >= valid_from``."""
        return self.report["valid_from"]

    @property
    def node(self) -> str:
        """The node where the dominant regime's peak sits."""
        return self.report["node"]

    def __call__(self, **dims: int) -> int:
        """The exact peak (bytes, over the graph's own order) at ``dims``; symbols not given keep
        the estimate's values."""
        return _core.peak_at(self._model._loaded, {**self._dims, **_dims(dims)})

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"<memplan.Formula {self.text} at {self.node}>"


class Sweep:
    """An estimate at each value of one symbol: ``rows`` (value, peak, arena, peak node, fits), the
    formula along it and the largest value that fits the budget. ``json`` is
    ``memplan estimate --sweep --json``."""

    def __init__(self, report: dict):
        self.json = report
        self.symbol: str = report["symbol"]
        self.rows: list[dict] = report["rows"]
        self.formula: Optional[dict] = report["formula"]
        self.max_fitting: Optional[dict] = report["max_fitting"]

    def __iter__(self) -> Iterator[dict]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        vals = ", ".join(f"{r['value']}: {human_bytes(r['peak_bytes'])}" for r in self.rows)
        return f"<memplan.Sweep {self.symbol} {{{vals}}}>"


class Estimate:
    """The peak memory of a model at given dims, before running it (``memplan estimate``).

    ``json`` is the CLI's ``--json`` report; the attributes are its fields: ``peak_bytes``,
    ``arena_bytes``, ``live_at_peak`` (every tensor live at the peak, largest first), ``breakdown``
    (weights, inputs, activations, outputs, scratch), ``formula`` (a :class:`Formula`),
    ``max_fitting`` (with a budget: the largest value of the formula's symbol that fits) and
    ``max_fitting_optimized`` (with ``optimized=True``). In Jupyter it shows a summary and the
    memory-over-time plot."""

    def __init__(self, report: dict, model: Model, budget: Optional[int], solve: Optional[str], rust_seconds: float):
        self.json = report
        self.model = model
        self._budget = budget
        self._solve = solve
        #: Seconds the library call took (the Rust side), for overhead measurements.
        self.rust_seconds = rust_seconds
        self.dims: dict[str, int] = report["dims"]
        self.peak_bytes: int = report["peak_bytes"]
        self.arena_bytes: int = report["arena_bytes"]
        self.resident_bytes: int = report["resident_bytes"]
        self.peak_node: Optional[str] = report["peak_node"]
        self.live_at_peak: list[dict] = report["live_at_peak"]
        self.breakdown: dict = report["breakdown"]
        self.budget_bytes: Optional[int] = report["budget_bytes"]
        self.fits: Optional[bool] = report["fits"]
        self.max_fitting: Optional[dict] = report["max_fitting"]
        self.max_fitting_optimized: Optional[dict] = report.get("max_fitting_optimized")
        f = report["formula"]
        self.formula: Optional[Formula] = Formula(f, model, self.dims) if f else None

    def sweep(self, spec: Union[str, Dims, None] = None, /, **ranges: Any) -> Sweep:
        """The estimate over values of one symbol, the other dims as here: ``est.sweep("N=64..8192")``
        (the CLI's spelling), or ``est.sweep(N=[64, 128, 256])``."""
        return sweep(self.model, spec if spec is not None else ranges, dims=self.dims, budget=self._budget)

    def svg(self) -> str:
        """The memory-over-time plot (``memplan estimate --plot``) as SVG text."""
        return _core.estimate_svg(self.model._loaded, self.dims, self._budget, self._solve)

    def _repr_html_(self) -> str:
        rows = [
            ("peak", f"{human_bytes(self.peak_bytes)} ({self.peak_bytes} B) at {self.peak_node or '-'}"),
            ("arena", human_bytes(self.arena_bytes)),
            ("resident", human_bytes(self.resident_bytes)),
        ]
        if self.formula is not None:
            rows.append(("formula", self.formula.text))
        if self.budget_bytes is not None:
            rows.append(("budget", f"{human_bytes(self.budget_bytes)}: {'fits' if self.fits else 'does NOT fit'}"))
        m = self.max_fitting
        if m and m.get("value") is not None:
            rows.append(("largest fitting", f"{m['symbol']} = {m['value']}"))
        live = "".join(
            f"<tr><td>{html.escape(t['name'])}</td><td>{human_bytes(t['bytes'])}</td>"
            f"<td>{html.escape(t['producer'] or t['category'])}</td></tr>"
            for t in self.live_at_peak[:8]
        )
        summary = "".join(f"<tr><th style='text-align:left'>{k}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
        dims = " ".join(f"{k}={v}" for k, v in self.dims.items()) or "-"
        return (
            f"<div><b>memplan estimate</b> {html.escape(self.model.label)} &nbsp; dims: {html.escape(dims)}"
            f"<table>{summary}</table><details><summary>live at the peak</summary>"
            f"<table><tr><th>tensor</th><th>bytes</th><th>made by</th></tr>{live}</table></details>"
            f"{self.svg()}</div>"
        )

    def __repr__(self) -> str:
        dims = " ".join(f"{k}={v}" for k, v in self.dims.items()) or "-"
        return f"<memplan.Estimate {dims}: peak {human_bytes(self.peak_bytes)} at {self.peak_node}>"


def estimate(
    model: ModelLike,
    dims: Optional[Dims] = None,
    budget: Optional[Size] = None,
    optimized: bool = False,
    solve: Optional[str] = None,
) -> Estimate:
    """The peak memory of ``model`` at ``dims`` before running it: ``memplan estimate --json``.

    ``budget`` (bytes or ``"80GiB"``) adds whether it fits and the largest value of the formula's
    symbol (``solve``, default the one the peak grows fastest with) that fits; ``optimized=True``
    also searches the largest value that fits once chunked and planned (one plan per probe)."""
    m = load(model)
    b = None if budget is None else parse_size(budget)
    text, secs = _core.estimate(m._loaded, _dims(dims), b, solve, optimized, None)
    return Estimate(json.loads(text), m, b, solve, secs)


def sweep(
    model: ModelLike,
    spec: Union[str, Dims],
    dims: Optional[Dims] = None,
    budget: Optional[Size] = None,
) -> Sweep:
    """``memplan estimate --sweep``: ``spec`` is ``"N=64..8192"`` (doubling), ``"N=64..512:64"``, or
    ``{"N": [64, 128, ...]}``; ``dims`` fixes the other symbols."""
    m = load(model)
    if isinstance(spec, str):
        sym, values = _core.parse_sweep(spec)
    else:
        if len(spec) != 1:
            raise UsageError("sweep: give one symbol and its values, e.g. {'N': [64, 128]}")
        ((sym, vals),) = spec.items()
        values = [int(v) for v in vals]
        if not values or any(v < 1 for v in values):
            raise UsageError(f"sweep {sym}: values must be positive integers")
    base = {k: v for k, v in _dims(dims).items() if k != sym}
    b = None if budget is None else parse_size(budget)
    text, _ = _core.estimate(m._loaded, base, b, None, False, (sym, values))
    return Sweep(json.loads(text))


class Plan:
    """A checked memory plan (``memplan optimize --plan-out``): schedule, arena offsets, in-place
    decisions. ``json`` is its text; ``memplan run --plan`` and :func:`run` take it."""

    def __init__(self, text: str):
        self.json = text

    def to_dict(self) -> dict:
        return json.loads(self.json)

    @property
    def arena_bytes(self) -> int:
        return self.to_dict()["arena_bytes"]

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Writes the plan as ``--plan-out`` does."""
        with open(path, "w") as f:
            f.write(self.json + "\n")

    def __repr__(self) -> str:
        return f"<memplan.Plan arena {human_bytes(self.arena_bytes)}>"


class Optimized:
    """A model planned at given dims (``memplan optimize``): ``model`` (rewritten: chunked under a
    budget, nodes in the planned order), ``plan`` (checked against it) and ``report`` (the CLI's
    ``--json``, without the file names)."""

    def __init__(self, model: Model, plan: Plan, report: dict):
        self.model = model
        self.plan = plan
        self.report = report
        self.fits: Optional[bool] = report.get("fits")
        self.peak_bytes_before: int = report["peak_bytes_before"]
        self.peak_bytes_after: int = report["peak_bytes_after"]
        #: The dims the plan was made for (a chunked model holds them as constants).
        self.dims: dict[str, int] = dict(report["dims"])

    def to_onnx(self) -> Any:
        """The rewritten model: an ``onnx.ModelProto`` when ``onnx`` is installed, else bytes."""
        return self.model.to_onnx()

    def to_bytes(self) -> bytes:
        return self.model.to_bytes()

    def save(self, path: Union[str, os.PathLike], plan_path: Union[str, os.PathLike, None] = None) -> None:
        """Writes the rewritten model (and the plan), as ``-o`` and ``--plan-out`` do."""
        self.model.save(path)
        if plan_path is not None:
            self.plan.save(plan_path)

    def __repr__(self) -> str:
        return (
            f"<memplan.Optimized peak {human_bytes(self.peak_bytes_before)} -> "
            f"{human_bytes(self.peak_bytes_after)}{'' if self.fits is None else (', fits' if self.fits else ', does NOT fit')}>"
        )


def optimize(
    model: ModelLike,
    dims: Optional[Dims] = None,
    budget: Optional[Size] = None,
    chunks: Optional[list[int]] = None,
    recompute: bool = False,
    exact_work: Optional[int] = None,
    narrow: bool = True,
    device_budget: Optional[Size] = None,
) -> Optimized:
    """``memplan optimize``: a checked plan at ``dims`` (memory-aware order, in-place reuse, one
    arena); with ``budget`` (bytes, ``"1GiB"``, or ``"0.15x"`` of the estimated peak), tensors proven to hold few values (masks) are first stored narrow
    (``narrow=False`` turns it off), then regions are chunked (standard ONNX) until the plan fits,
    or the lowest plan reached is returned with ``fits`` False; ``budget="lowest"`` asks for that
    plan (``fits`` None), and a budget below the floor (the bound no plan goes below) raises
    :class:`UsageError`. ``device_budget`` (instead of ``budget``) fits to it the same way, then
    moves buffers idle across the peak to a host tier until the device tier fits (the plan carries
    it; :func:`run` performs the copies)."""
    m = load(model)

    def peak() -> int:
        return estimate(m, dims).peak_bytes

    b = None if budget is None else _budget(budget, peak)
    db = None if device_budget is None else _budget(device_budget, peak)
    loaded, plan, report = _core.optimize(
        m._loaded, _dims(dims), b, list(chunks or []), recompute, exact_work, narrow, db
    )
    return Optimized(Model(loaded), Plan(plan), json.loads(report))


class RunResult:
    """A run: ``outputs`` (name -> numpy array, in graph order; the arrays view the executor's
    memory, read-only), ``peak_bytes`` (measured tensor peak), ``process_peak_bytes``, ``seconds``
    and ``report`` (``memplan run --json``)."""

    def __init__(self, report: dict, outputs: dict):
        self.report = report
        self.outputs = outputs
        self.peak_bytes: int = report["peak_bytes"]
        self.process_peak_bytes: int = report["process_peak_bytes"]
        self.seconds: float = report["seconds"]

    def __getitem__(self, name: str) -> Any:
        return self.outputs[name]

    def __repr__(self) -> str:
        return f"<memplan.RunResult peak {human_bytes(self.peak_bytes)}, {self.seconds:.4f} s, outputs {list(self.outputs)}>"


_TO_ONNX = {
    "float32": "float",
    "float64": "double",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "bool": "bool",
}
_FROM_ONNX = {v: k for k, v in _TO_ONNX.items()}


def _np_dtype(onnx_name: str) -> Any:
    import numpy as np

    name = _FROM_ONNX.get(onnx_name)
    if name is None:
        raise RunError(f"output type {onnx_name} has no numpy equivalent")
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError as e:
            raise RunError("bfloat16 outputs need the ml_dtypes package") from e
        return ml_dtypes.bfloat16
    return np.dtype(name)


def _input(name: str, value: Any) -> tuple:
    import numpy as np

    a = np.asarray(value)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    onnx_name = _TO_ONNX.get(a.dtype.name)
    if onnx_name is None:
        raise UsageError(f"input '{name}': numpy type {a.dtype} has no ONNX equivalent")
    a = np.ascontiguousarray(a)
    return (name, onnx_name, list(a.shape), memoryview(a.reshape(-1)).cast("B"))


def run(
    model: ModelLike,
    inputs: Optional[Mapping[str, Any]] = None,
    plan: Union[Plan, str, os.PathLike, None] = None,
    threads: Optional[int] = None,
    dims: Optional[Dims] = None,
    random: bool = False,
    seed: int = 0,
    force: bool = False,
    repeat: int = 1,
) -> RunResult:
    """``memplan run``: runs ``model`` on CPU with memplan's executor.

    ``inputs`` maps input names to numpy arrays (read in place, not copied); with ``random=True``
    the others are drawn as ``--random --seed`` draws them. ``plan`` (a :class:`Plan`, its JSON, or a
    plan file) runs from one arena; an :class:`Optimized` model brings its own plan. ``threads``
    sizes a thread pool for this run (default: all cores)."""
    if isinstance(model, Optimized):
        if plan is None:
            plan = model.plan
        if dims is None:
            dims = model.dims
    m = load(model)
    if isinstance(plan, Plan):
        plan_text: Optional[str] = plan.json
    elif isinstance(plan, str) and plan.lstrip().startswith("{"):
        plan_text = plan
    elif plan is not None:
        with open(plan) as f:
            plan_text = f.read()
    else:
        plan_text = None
    given = [_input(k, v) for k, v in (inputs or {}).items()]
    report, outs = _core.run(m._loaded, given, plan_text, _dims(dims), random, seed, 2, force, repeat, threads)
    import numpy as np

    arrays = {}
    for name, dtype, shape, buf in outs:
        arrays[name] = np.frombuffer(buf, dtype=_np_dtype(dtype)).reshape(shape)
    return RunResult(json.loads(report), arrays)
