"""memplan for PyTorch modules: estimate the peak memory of a module, and fit it to a budget.

``torch`` is imported when these functions are called, never by ``import memplan``::

    import memplan.torch
    est = memplan.torch.estimate(block, (s, z), dynamic_shapes=..., budget="80GB")
    fitted = memplan.torch.fit(block, (s, z), budget="2GiB")
    out = fitted(s, z)                        # onnxruntime, the rewritten graph

A module is exported with ``torch.onnx.export(dynamo=True)``; when that fails, with the TorchScript
exporter (a warning says so and why). The export's dims are bound from ``args`` unless ``dims``
gives them.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
import warnings
from typing import Any, Mapping, Optional, Sequence

import memplan

__all__ = ["export", "estimate", "fit", "Fitted", "ort_peak_bytes"]


def _flat_tensors(args: Any) -> list:
    import torch

    if isinstance(args, torch.Tensor):
        return [args]
    if isinstance(args, (list, tuple)):
        return [t for a in args for t in _flat_tensors(a)]
    if isinstance(args, Mapping):
        return [t for a in args.values() for t in _flat_tensors(a)]
    return []


def _dynamic_axes(dynamic_shapes: Any, names: Sequence[str]) -> Optional[dict]:
    """The TorchScript exporter's ``dynamic_axes`` for dynamo's ``dynamic_shapes`` (positional
    specs of ``{axis: torch.export.Dim}``): each Dim by its name."""
    if dynamic_shapes is None:
        return None
    specs = list(dynamic_shapes.values()) if isinstance(dynamic_shapes, Mapping) else list(dynamic_shapes)
    axes = {}
    for name, spec in zip(names, specs):
        if isinstance(spec, Mapping):
            axes[name] = {int(ax): getattr(d, "__name__", str(d)) for ax, d in spec.items()}
    return axes


def export(module: Any, args: Any, dynamic_shapes: Any = None, kwargs: Optional[dict] = None) -> tuple[memplan.Model, str]:
    """Exports ``module`` called on ``args`` to ONNX and reads it: the model and the exporter used
    (``"dynamo"``, or ``"torchscript"`` after a warning when dynamo failed)."""
    import torch

    args = args if isinstance(args, tuple) else (args,)
    with tempfile.TemporaryDirectory(prefix="memplan-torch-") as d:
        path = os.path.join(d, "model.onnx")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prog = torch.onnx.export(
                    module, args, kwargs=kwargs, dynamic_shapes=dynamic_shapes, dynamo=True, verbose=False
                )
            prog.save(path)
            how = "dynamo"
        except Exception as e:  # the dynamo exporter's failures have no common type
            warnings.warn(
                f"memplan.torch: torch.onnx.export(dynamo=True) failed ({type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}); exporting with the TorchScript exporter",
                stacklevel=3,
            )
            names = [f"input_{i}" for i in range(len(_flat_tensors(args)))]
            torch.onnx.export(
                module,
                args,
                path,
                dynamo=False,
                input_names=names,
                dynamic_axes=_dynamic_axes(dynamic_shapes, names),
                opset_version=18,
            )
            how = "torchscript"
        # The model's tensors are read (mapped) now, so the directory can go.
        return memplan.load(path), how


def _bind_dims(model: memplan.Model, args: Any) -> dict[str, int]:
    """Symbol values from the export's declared input shapes and the example tensors' sizes."""
    tensors = _flat_tensors(args)
    inputs = model.inspect()["inputs"]
    dims: dict[str, int] = {}
    for port, t in zip(inputs, tensors):
        for d, size in zip(port.get("shape") or [], t.shape):
            if isinstance(d, str) and d.isidentifier() and d in model.symbols:
                dims.setdefault(d, int(size))
    return dims


def _module_paths(model: memplan.Model) -> dict[str, str]:
    """Node name -> the path of the torch module whose forward made it (``""`` for the exported
    module itself), from the name scopes the dynamo exporter records (``[module paths..., fx
    node]``)."""
    try:
        import onnx
    except ImportError:
        return {}
    proto = onnx.load_from_string(model.to_bytes())
    out = {}
    for n in proto.graph.node:
        for p in n.metadata_props:
            if p.key != "pkg.torch.onnx.name_scopes":
                continue
            try:
                scopes = ast.literal_eval(p.value)
            except (ValueError, SyntaxError):
                continue
            if isinstance(scopes, list) and len(scopes) >= 2:
                out[n.name] = str(scopes[-2])
    return out


def estimate(
    module: Any,
    args: Any,
    dynamic_shapes: Any = None,
    dims: Optional[Mapping[str, int]] = None,
    budget: Optional[memplan.Size] = None,
    optimized: bool = False,
    kwargs: Optional[dict] = None,
) -> memplan.Estimate:
    """The peak memory of ``module(*args)`` as exported: :func:`memplan.estimate` of the export at
    ``dims`` (default: the sizes of ``args``). Each entry of ``live_at_peak`` gains ``module``,
    the torch module path of the node that made it, where the export recorded one;
    ``est.exporter`` says which exporter was used."""
    model, how = export(module, args, dynamic_shapes, kwargs)
    d = {**_bind_dims(model, args), **dict(dims or {})}
    est = memplan.estimate(model, d, budget=budget, optimized=optimized)
    paths = _module_paths(model)
    live = []
    for t in est.live_at_peak:
        t = dict(t)
        node = (t.get("producer") or "").rsplit(" (", 1)[0]
        t["module"] = paths.get(node)
        live.append(t)
    est.live_at_peak = live
    est.exporter = how  # type: ignore[attr-defined]
    return est


class Fitted:
    """A module's rewritten graph running in onnxruntime: called with the module's tensor
    arguments (at the sizes it was fitted for), returns its outputs as torch tensors (one, or a
    tuple). ``optimized`` is the :class:`memplan.Optimized` (report, plan, ``fits``)."""

    def __init__(self, optimized: memplan.Optimized, providers: Optional[Sequence[str]], exporter: str):
        import onnxruntime as ort

        self.optimized = optimized
        self.exporter = exporter
        self.dims = optimized.dims
        opts = ort.SessionOptions()
        opts.log_severity_level = 3  # the rewritten graph's unused constants are not worth a warning
        self.session = ort.InferenceSession(
            optimized.to_bytes(), opts, providers=list(providers or ["CPUExecutionProvider"])
        )
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self._input_shapes = [list(i.shape) for i in self.session.get_inputs()]

    @property
    def fits(self) -> Optional[bool]:
        return self.optimized.fits

    def feeds(self, *args: Any) -> dict:
        """The onnxruntime feeds for the module's arguments (numpy arrays by input name)."""
        tensors = _flat_tensors(args)
        if len(tensors) != len(self.input_names):
            raise memplan.UsageError(
                f"the fitted graph takes {len(self.input_names)} tensors ({', '.join(self.input_names)}), got {len(tensors)}"
            )
        feeds = {}
        for name, t, want in zip(self.input_names, tensors, self._input_shapes):
            have = list(t.shape)
            # A chunked graph is made for its dims (its slice bounds are constants): a symbolic dim
            # must have the value the graph was fitted for.
            fixed = [w if isinstance(w, int) else self.dims.get(w) for w in want]
            if len(want) != len(have) or any(f is not None and f != h for f, h in zip(fixed, have)):
                raise memplan.UsageError(
                    f"input '{name}': shape {have}, but the graph was fitted for {want} (dims {self.dims}); fit again"
                )
            feeds[name] = t.detach().cpu().numpy()
        return feeds

    def __call__(self, *args: Any) -> Any:
        import torch

        outs = self.session.run(self.output_names, self.feeds(*args))
        ts = tuple(torch.from_numpy(o) for o in outs)
        return ts[0] if len(ts) == 1 else ts

    def __repr__(self) -> str:
        return f"<memplan.torch.Fitted {self.optimized!r} providers={self.session.get_providers()}>"


def fit(
    module: Any,
    args: Any,
    budget: memplan.Size,
    dynamic_shapes: Any = None,
    dims: Optional[Mapping[str, int]] = None,
    providers: Optional[Sequence[str]] = None,
    kwargs: Optional[dict] = None,
) -> Fitted:
    """Exports ``module(*args)``, optimizes it to ``budget`` at the sizes of ``args`` (or ``dims``)
    with :func:`memplan.optimize`, and returns a callable running the rewritten graph in
    onnxruntime with ``providers`` (default CPU). When the budget cannot be met the lowest plan
    reached is used and ``fitted.fits`` is False."""
    model, how = export(module, args, dynamic_shapes, kwargs)
    d = {**_bind_dims(model, args), **dict(dims or {})}
    opt = memplan.optimize(model, d, budget=budget)
    return Fitted(opt, providers, how)


_PEAK_PROBE = r"""
import sys, numpy as np, onnxruntime as ort
model, feeds = sys.argv[1], np.load(sys.argv[2])
opts = ort.SessionOptions(); opts.intra_op_num_threads = 1; opts.inter_op_num_threads = 1
opts.log_severity_level = 3
s = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
feeds = {k: feeds[k] for k in feeds.files}
def kb(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])
open("/proc/self/clear_refs", "w").write("5")
before = kb("VmRSS:")
s.run(None, feeds)
print((kb("VmHWM:") - before) * 1024)
"""


def ort_peak_bytes(model: Any, feeds: Mapping[str, Any]) -> int:
    """The memory one onnxruntime CPU run of ``model`` (ONNX bytes, ``ModelProto``,
    :class:`memplan.Model` or :class:`Fitted`) takes on ``feeds``: the process's resident high-water
    mark over the run minus its resident size before it, in a fresh process (Linux)."""
    import numpy as np

    if isinstance(model, Fitted):
        data = model.optimized.to_bytes()
    elif isinstance(model, memplan.Model):
        data = model.to_bytes()
    elif hasattr(model, "SerializeToString"):
        data = model.SerializeToString()
    else:
        data = bytes(model)
    with tempfile.TemporaryDirectory(prefix="memplan-ort-") as d:
        mp, fp = os.path.join(d, "m.onnx"), os.path.join(d, "feeds.npz")
        with open(mp, "wb") as f:
            f.write(data)
        np.savez(fp, **{k: np.asarray(v) for k, v in feeds.items()})
        r = subprocess.run([sys.executable, "-c", _PEAK_PROBE, mp, fp], capture_output=True, text=True)
        if r.returncode != 0:
            raise memplan.RunError(f"onnxruntime run failed: {r.stderr.strip().splitlines()[-1] if r.stderr else r.returncode}")
        return int(r.stdout.strip().splitlines()[-1])
