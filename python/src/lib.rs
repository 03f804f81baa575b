//! `memplan._memplan`: the Python extension. Thin bindings over the library entries the CLI uses
//! (`memplan_cli::estimate::estimate_model`, `optimize::optimize_model`, `run::run_model`), so a
//! report from Python is the CLI's JSON by construction. Reports cross as JSON text (the CLI's own
//! serialization); tensors cross as buffers, without copies. The GIL is released while a model is
//! read, planned or run.

mod errors;
mod tensors;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, Context};
use prost::Message;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use memplan_cli::estimate::{estimate_model, EstimateOutcome, EstimateRequest, Sweep};
use memplan_cli::optimize::{optimize_model, OptimizeRequest};
use memplan_cli::run::{read_plan, run_model, RunRequest};
use memplan_ir::infer::Facts;
use memplan_ir::Model;

use errors::to_py_err;
use tensors::{input_tensor, OutputBuffer};

/// Counts the process heap so `run` can report its high-water mark, as the CLI does.
#[global_allocator]
static ALLOC: memplan_exec::mem::CountingAlloc = memplan_exec::mem::CountingAlloc;

/// A model read and inferred once, shared by every call that takes it.
struct Loaded {
    model: Model,
    facts: Facts,
    /// What errors and reports call the model: its path, or `<bytes>`.
    label: String,
}

/// A model read into memplan's IR with its inferred facts (`Model.from_path`, `Model.from_bytes`).
#[pyclass(module = "memplan._memplan", frozen)]
struct LoadedModel {
    inner: Arc<Loaded>,
}

fn load_path(path: &Path) -> anyhow::Result<Loaded> {
    let (model, facts) = memplan_cli::commands::load(&path.to_path_buf())?;
    Ok(Loaded {
        model,
        facts,
        label: path.display().to_string(),
    })
}

fn load_bytes(data: Vec<u8>, label: &str) -> anyhow::Result<Loaded> {
    let model = memplan_onnx::import_bytes(bytes::Bytes::from(data), Path::new(label))?;
    let facts = memplan_ir::infer_model(&model).with_context(|| label.to_string())?;
    Ok(Loaded {
        model,
        facts,
        label: label.to_string(),
    })
}

#[pymethods]
impl LoadedModel {
    /// Reads an ONNX file (external data resolved next to it) and infers its shapes.
    #[staticmethod]
    fn from_path(py: Python<'_>, path: PathBuf) -> PyResult<LoadedModel> {
        let l = py.allow_threads(|| load_path(&path)).map_err(to_py_err)?;
        Ok(LoadedModel { inner: Arc::new(l) })
    }

    /// Reads an encoded ONNX model (no external data); `label` names it in errors.
    #[staticmethod]
    fn from_bytes(py: Python<'_>, data: Vec<u8>, label: String) -> PyResult<LoadedModel> {
        let l = py
            .allow_threads(|| load_bytes(data, &label))
            .map_err(to_py_err)?;
        Ok(LoadedModel { inner: Arc::new(l) })
    }

    /// What errors and reports call the model.
    #[getter]
    fn label(&self) -> String {
        self.inner.label.clone()
    }

    /// The symbols of the model's shapes (declared, then introduced by inference).
    #[getter]
    fn symbols(&self) -> Vec<String> {
        let s = &self.inner.facts.symbols;
        let mut v = s.declared.clone();
        v.extend(s.introduced.iter().map(|i| i.name.clone()));
        v
    }

    /// `memplan inspect --json`.
    fn inspect_json(&self) -> PyResult<String> {
        let s = memplan_ir::summary::summarize(&self.inner.model, &self.inner.facts);
        serde_json::to_string(&s).map_err(|e| to_py_err(e.into()))
    }

    /// The model as ONNX bytes (every payload inline).
    fn to_onnx<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let b = py
            .allow_threads(|| encode(&self.inner.model))
            .map_err(to_py_err)?;
        Ok(PyBytes::new(py, &b))
    }

    /// Writes the model as `memplan convert` / `optimize -o` write it (atomically; external data
    /// when the model had it or is too large for protobuf).
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        let m = &self.inner.model;
        py.allow_threads(|| {
            memplan_onnx::save(m, &path, memplan_onnx::default_mode(m))
                .with_context(|| format!("writing {}", path.display()))
        })
        .map_err(to_py_err)
    }
}

fn encode(m: &Model) -> anyhow::Result<Vec<u8>> {
    let proto = memplan_onnx::export(m);
    if proto.encoded_len() > i32::MAX as usize {
        return Err(anyhow!(
            "the model is {} bytes, over protobuf's 2 GiB limit: save it to a file (external data)",
            proto.encoded_len()
        ));
    }
    Ok(proto.encode_to_vec())
}

/// Parses a size like the CLI's `--budget` (`80GiB`, `512MB`, `1.5GiB`, bytes).
#[pyfunction]
fn parse_size(s: &str) -> PyResult<u64> {
    memplan_cli::units::parse_size(s).map_err(errors::usage)
}

/// Parses a budget as the CLI's `--budget` does: `(bytes, None)` for a size or `lowest` (0),
/// `(None, fraction)` for a fraction of the estimated peak (`0.15x`).
#[pyfunction]
fn parse_budget(s: &str) -> PyResult<(Option<u64>, Option<f64>)> {
    use memplan_cli::units::Budget;
    Ok(
        match memplan_cli::units::parse_budget(s).map_err(errors::usage)? {
            Budget::Bytes(b) => (Some(b), None),
            Budget::OfPeak(f) => (None, Some(f)),
        },
    )
}

/// Parses dim assignments like the CLI's `--dim NAME=VALUE`.
#[pyfunction]
fn parse_dims(items: Vec<String>) -> PyResult<BTreeMap<String, i64>> {
    memplan_cli::units::parse_dims(&items).map_err(errors::usage)
}

/// `1.5 GiB`-style rendering with binary units, as the CLI's reports write sizes.
#[pyfunction]
fn human_bytes(n: u64) -> String {
    memplan_cli::units::human(n)
}

/// Parses a sweep like the CLI's `--sweep` (`N=64..8192` doubles, `N=64..512:64` steps).
#[pyfunction]
fn parse_sweep(s: &str) -> PyResult<(String, Vec<i64>)> {
    let sw = memplan_cli::estimate::parse_sweep(s).map_err(to_py_err)?;
    Ok((sw.sym, sw.values))
}

/// `memplan estimate --json`: the report as JSON text, and the seconds the library entry
/// (`estimate_model`) took, so the cost of the binding (serialization, crossing) can be measured.
#[pyfunction]
#[pyo3(signature = (model, dims, budget=None, solve=None, optimized=false, sweep=None))]
fn estimate(
    py: Python<'_>,
    model: &LoadedModel,
    dims: BTreeMap<String, i64>,
    budget: Option<u64>,
    solve: Option<String>,
    optimized: bool,
    sweep: Option<(String, Vec<i64>)>,
) -> PyResult<(String, f64)> {
    let l = &model.inner;
    let req = EstimateRequest {
        dims,
        budget,
        solve,
        optimized,
        sweep: sweep.map(|(sym, values)| Sweep { sym, values }),
        top: 0,
    };
    py.allow_threads(|| {
        let t0 = Instant::now();
        let out = estimate_model(&l.model, &l.facts, &req)?;
        let secs = t0.elapsed().as_secs_f64();
        Ok((out.to_json_string()?, secs))
    })
    .map_err(to_py_err)
}

/// The memory-over-time plot of the estimate at `dims`, as the SVG `estimate --plot` writes.
#[pyfunction]
#[pyo3(signature = (model, dims, budget=None, solve=None))]
fn estimate_svg(
    py: Python<'_>,
    model: &LoadedModel,
    dims: BTreeMap<String, i64>,
    budget: Option<u64>,
    solve: Option<String>,
) -> PyResult<String> {
    let l = &model.inner;
    let req = EstimateRequest {
        dims,
        budget,
        solve,
        top: 0,
        ..EstimateRequest::default()
    };
    py.allow_threads(|| match estimate_model(&l.model, &l.facts, &req)? {
        EstimateOutcome::Point { estimate, .. } => Ok(memplan_cli::plot::plot_svg(
            Path::new(&l.label),
            &estimate,
            &l.model.graph,
        )),
        EstimateOutcome::Sweep(_) => Err(anyhow!("a sweep has no memory-over-time plot")),
    })
    .map_err(to_py_err)
}

/// The exact peak at `dims` (every symbol given) over the graph's own order.
#[pyfunction]
fn peak_at(py: Python<'_>, model: &LoadedModel, dims: BTreeMap<String, i64>) -> PyResult<u64> {
    let l = &model.inner;
    py.allow_threads(|| memplan_cli::estimate::peak_at(&l.model, &l.facts, &dims))
        .map_err(to_py_err)
}

/// `memplan optimize`: the model with its nodes in the planned order (read back and checked
/// against the plan, as `-o` does), the plan's JSON, and the report's JSON.
#[pyfunction]
#[pyo3(signature = (model, dims, budget=None, chunks=Vec::new(), recompute=false, exact_work=None, narrow=true, device_budget=None))]
fn optimize(
    py: Python<'_>,
    model: &LoadedModel,
    dims: BTreeMap<String, i64>,
    budget: Option<u64>,
    chunks: Vec<usize>,
    recompute: bool,
    exact_work: Option<usize>,
    narrow: bool,
    device_budget: Option<u64>,
) -> PyResult<(LoadedModel, String, String)> {
    let l = model.inner.clone();
    let mut req = OptimizeRequest {
        budget,
        chunks,
        recompute,
        narrow,
        device_budget,
        ..OptimizeRequest::new(dims)
    };
    if let Some(w) = exact_work {
        req.exact_work = w;
    }
    py.allow_threads(|| {
        let opt = optimize_model(l.model.clone(), &l.facts, &l.label, &req)?;
        let (m2, plan) = opt.reordered();
        // The plan must hold for the model as it reads back from its bytes.
        let back = load_bytes(encode(&m2)?, &l.label)?;
        memplan_plan::check(&back.model.graph, &back.facts, &plan)
            .context("the plan for the rewritten model")?;
        let report = serde_json::to_string(&opt.to_json(&l.label, None, None)?)?;
        Ok((
            LoadedModel {
                inner: Arc::new(back),
            },
            plan.to_json(),
            report,
        ))
    })
    .map_err(to_py_err)
}

/// `memplan run`: runs the model on the given inputs (`(name, dtype, shape, buffer)` each; the
/// others drawn at random when `random`), with or without a plan (JSON). Returns the report's JSON
/// and the outputs as `(name, dtype, shape, buffer)`, the buffers over the executor's own memory.
#[pyfunction]
#[pyo3(signature = (model, inputs, plan=None, dims=BTreeMap::new(), random=false, seed=0, int_high=2, force=false, repeat=1, threads=None))]
fn run(
    py: Python<'_>,
    model: &LoadedModel,
    inputs: Vec<(String, String, Vec<usize>, Bound<'_, PyAny>)>,
    plan: Option<String>,
    dims: BTreeMap<String, i64>,
    random: bool,
    seed: u64,
    int_high: i64,
    force: bool,
    repeat: usize,
    threads: Option<usize>,
) -> PyResult<(String, Vec<(String, String, Vec<usize>, OutputBuffer)>)> {
    let l = model.inner.clone();
    let mut given = BTreeMap::new();
    for (name, dtype, shape, buf) in &inputs {
        let t = input_tensor(name, dtype, shape, buf).map_err(to_py_err)?;
        given.insert(name.clone(), t);
    }
    let res = py.allow_threads(|| {
        let plan = match &plan {
            Some(text) => Some(read_plan(text, "plan")?),
            None => None,
        };
        let req = RunRequest {
            dims,
            random,
            seed,
            int_high,
            plan,
            force,
            repeat,
        };
        match threads {
            Some(0) => Err(anyhow!("threads must be at least 1")),
            Some(t) => rayon::ThreadPoolBuilder::new()
                .num_threads(t)
                .build()
                .context("starting the thread pool")?
                .install(|| run_model(&l.model, &l.facts, &l.label, given, &req)),
            None => run_model(&l.model, &l.facts, &l.label, given, &req),
        }
    });
    let ex = res.map_err(to_py_err)?;
    let report = serde_json::to_string(&ex.to_json(&l.label, false, &[]))
        .map_err(|e| to_py_err(e.into()))?;
    let outputs = ex
        .result
        .outputs
        .into_iter()
        .map(|(name, t)| {
            let dtype = t.dtype.onnx_name().to_string();
            let shape = t.shape.clone();
            (name, dtype, shape, OutputBuffer::new(t))
        })
        .collect();
    Ok((report, outputs))
}

/// The extension module.
#[pymodule]
fn _memplan(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Inference folds constant nodes with the executor's kernels.
    memplan_exec::install_const_folder();
    m.add_class::<LoadedModel>()?;
    m.add_class::<OutputBuffer>()?;
    m.add_function(wrap_pyfunction!(parse_size, m)?)?;
    m.add_function(wrap_pyfunction!(parse_budget, m)?)?;
    m.add_function(wrap_pyfunction!(parse_sweep, m)?)?;
    m.add_function(wrap_pyfunction!(parse_dims, m)?)?;
    m.add_function(wrap_pyfunction!(human_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(estimate, m)?)?;
    m.add_function(wrap_pyfunction!(estimate_svg, m)?)?;
    m.add_function(wrap_pyfunction!(peak_at, m)?)?;
    m.add_function(wrap_pyfunction!(optimize, m)?)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    errors::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
