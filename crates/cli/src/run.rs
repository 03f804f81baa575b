//! `memplan run`: executes a model on CPU with memplan's executor, measures its peak, writes and
//! compares outputs.
//!
//! Random inputs (`--random`): floats are standard normal; booleans are fair coins; integers that a
//! node uses as indices (`Gather`, `GatherElements`, `GatherND`, `ScatterND`, `ScatterElements`
//! indices) are uniform in `[0, D)` where `D` is the smallest extent of the indexed axis at the given
//! dims; other integers are uniform in `[0, --int-high)`. All of it is seeded (`--seed`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use clap::Args;
use memplan_exec::{RunOptions, Tensor};
use memplan_ir::graph::{Graph, ValueId, ValueKind};
use memplan_ir::infer::Facts;
use memplan_ir::DataType;
use memplan_plan::cost::{CostModel, NodeCost};

use crate::npz::{self, Array};
use crate::units::{human, parse_dims};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The ONNX model.
    pub model: PathBuf,
    /// A value for a symbolic dim, e.g. `--dim N=256` (repeatable; `@FILE.json` reads a JSON object of
    /// dims, or `run --json`'s "dims"); used to shape random inputs.
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    pub dims: Vec<String>,
    /// One input from a .npy file (repeatable).
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    pub inputs: Vec<String>,
    /// All inputs from an .npz archive (keys = input names).
    #[arg(long, value_name = "FILE.npz")]
    pub inputs_npz: Option<PathBuf>,
    /// Draw the inputs not given at random: floats standard normal, bools fair coins, integers used as
    /// indices (Gather, GatherND, ScatterND, ...) uniform in [0, indexed axis extent), other integers in
    /// [0, --int-high)
    #[arg(long)]
    pub random: bool,
    /// Seed for --random.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Exclusive upper bound of random integers that are not indices.
    #[arg(long, default_value_t = 2)]
    pub int_high: i64,
    /// Write every graph output to this .npz, keyed by output name.
    #[arg(long, value_name = "OUT.npz")]
    pub out: Option<PathBuf>,
    /// Compare the outputs with the arrays of this .npz (keys = output names).
    #[arg(long, value_name = "REF.npz")]
    pub compare: Option<PathBuf>,
    /// Require bit-identical outputs when comparing.
    #[arg(long, conflicts_with_all = ["rtol", "atol"])]
    pub exact: bool,
    /// Relative tolerance when comparing.
    #[arg(long, default_value_t = 1e-4)]
    pub rtol: f64,
    /// Absolute tolerance when comparing.
    #[arg(long, default_value_t = 1e-5)]
    pub atol: f64,
    /// Run this many times (the first run's peak is reported, and the median time).
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Run from one arena at the offsets of this plan (`memplan optimize --plan-out`); the plan is
    /// checked first and an invalid one is refused.
    #[arg(long, value_name = "PLAN.json")]
    pub plan: Option<PathBuf>,
    /// Run even when the estimated peak exceeds the memory available (an allocation that then
    /// fails is still reported as an error naming the node or input).
    #[arg(long)]
    pub force: bool,
    /// Print JSON instead of the report.
    #[arg(long)]
    pub json: bool,
    /// Also report the time spent per op type (summed over the nodes, from the run whose time is
    /// reported), slowest first, beside the time the cost model predicts for them; with `--json`,
    /// each node's time as well (`node_profile`).
    #[arg(long)]
    pub profile: bool,
    /// The cost model whose predictions `--profile` shows (`bench/calibrate_cost.py`'s JSON;
    /// default: the built-in one).
    #[arg(long, value_name = "FILE", requires = "profile")]
    pub cost_model: Option<PathBuf>,
}

/// A small deterministic PRNG (splitmix64) for random inputs.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit().max(1e-300), self.unit());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

fn tensor_of(a: &Array) -> Result<Tensor> {
    Tensor::from_bytes(a.dtype, &a.shape, a.data.clone(), None)
        .map_err(|e| anyhow!("input '{}': {e}", a.name))
}

fn array_of(name: &str, t: &Tensor) -> Array {
    Array {
        name: name.to_string(),
        dtype: t.dtype,
        shape: t.shape.clone(),
        data: Bytes::copy_from_slice(t.bytes()),
    }
}

/// The exclusive bound for random values of an integer input used as indices, if it is one: the
/// extent of the axis each gather or scatter indexes with it, or with elements copied from it
/// (through the slices, reshapes and concatenations that chunking puts between an input and its
/// readers: the same input gets the same values in the chunked model).
fn index_bound(
    graph: &Graph,
    facts: &Facts,
    v: ValueId,
    dims: &BTreeMap<String, i64>,
) -> Option<i64> {
    use memplan_ir::ops::{lookup, Values};
    let consumers = graph.consumers();
    let mut bound: Option<i64> = None;
    let (mut todo, mut seen) = (vec![v], std::collections::BTreeSet::from([v]));
    while let Some(u) = todo.pop() {
        for &c in &consumers[u.index()] {
            let n = graph.node(c);
            let copies = match lookup(n).map(|d| d.values) {
                Some(Values::Selects(srcs)) => srcs
                    .iter()
                    .any(|&k| n.inputs.get(k).copied().flatten() == Some(u)),
                Some(Values::SelectsAny) => true,
                _ => false,
            };
            let idx_slot = match n.op.as_str() {
                "Gather" | "GatherElements" | "GatherND" | "ScatterND" | "ScatterElements" => 1,
                _ if copies => {
                    todo.extend(n.output_ids().filter(|&y| seen.insert(y)));
                    continue;
                }
                _ => continue,
            };
            if n.inputs.get(idx_slot).copied().flatten() != Some(u) {
                continue;
            }
            let data = n.inputs.first().copied().flatten()?;
            let shape = facts.get(data).shape.as_ref()?;
            let axis = match n.attr("axis") {
                Some(memplan_ir::AttrValue::Int(a)) => *a,
                _ => 0,
            };
            let axis = if axis < 0 {
                axis + shape.len() as i64
            } else {
                axis
            } as usize;
            let extent = shape.get(axis)?.eval_map(dims).ok()?;
            bound = Some(bound.map_or(extent, |b| b.min(extent)));
        }
    }
    bound
}

fn random_input(
    graph: &Graph,
    facts: &Facts,
    v: ValueId,
    dims: &BTreeMap<String, i64>,
    rng: &mut Rng,
    int_high: i64,
) -> Result<Tensor> {
    let name = &graph.value(v).name;
    let f = facts.get(v);
    let dtype = f
        .dtype
        .ok_or_else(|| anyhow!("input '{name}': no declared element type"))?;
    let shape: Vec<usize> = f
        .shape
        .as_ref()
        .ok_or_else(|| anyhow!("input '{name}': no declared shape"))?
        .iter()
        .map(|d| {
            d.eval_map(dims)
                .map_err(|_| {
                    anyhow::Error::new(crate::UsageError(format!(
                        "input '{name}': dim {d} needs a value: give --dim"
                    )))
                })
                .and_then(|x| {
                    usize::try_from(x)
                        .map_err(|_| anyhow!("input '{name}': dim {d} = {x} is negative"))
                })
        })
        .collect::<Result<_>>()?;
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| anyhow!("input '{name}': shape {shape:?} overflows"))?;
    let high = index_bound(graph, facts, v, dims)
        .unwrap_or(int_high)
        .max(1);
    let width = match dtype {
        DataType::F32 | DataType::I32 => 4,
        DataType::F64 | DataType::I64 => 8,
        DataType::F16 | DataType::BF16 => 2,
        DataType::Bool | DataType::U8 => 1,
        other => bail!("input '{name}': cannot draw random values of type {other}"),
    };
    // Reserved up front and fallibly, so an input too large for memory is an error, not an abort.
    let len = n
        .checked_mul(width)
        .ok_or_else(|| anyhow!("input '{name}': shape {shape:?} overflows"))?;
    let mut bytes: Vec<u8> = Vec::new();
    bytes.try_reserve_exact(len).map_err(|_| {
        anyhow!(
            "input '{name}': cannot allocate {} ({len} B) for its random values",
            human(len as u64)
        )
    })?;
    let b = &mut bytes;
    match dtype {
        DataType::F32 => (0..n).for_each(|_| b.extend((rng.normal() as f32).to_le_bytes())),
        DataType::F64 => (0..n).for_each(|_| b.extend(rng.normal().to_le_bytes())),
        DataType::F16 => {
            (0..n).for_each(|_| b.extend(half::f16::from_f64(rng.normal()).to_le_bytes()))
        }
        DataType::BF16 => {
            (0..n).for_each(|_| b.extend(half::bf16::from_f64(rng.normal()).to_le_bytes()))
        }
        DataType::Bool => (0..n).for_each(|_| b.push((rng.next() & 1) as u8)),
        DataType::I64 => {
            (0..n).for_each(|_| b.extend(((rng.next() % high as u64) as i64).to_le_bytes()))
        }
        DataType::I32 => {
            (0..n).for_each(|_| b.extend(((rng.next() % high as u64) as i32).to_le_bytes()))
        }
        _ => (0..n).for_each(|_| b.push((rng.next() % high.min(256) as u64) as u8)),
    }
    Tensor::from_bytes(dtype, &shape, Bytes::from(bytes), None)
        .map_err(|e| anyhow!("input '{name}': {e}"))
}

/// Symbol values the given inputs' shapes bind (by their declared dims): every one that can be
/// bound; a conflict is left to the executor, which names the input.
fn bound_dims(graph: &Graph, given: &BTreeMap<String, Tensor>) -> BTreeMap<String, i64> {
    let mut dims = BTreeMap::new();
    let mut pairs: Vec<(&str, i64)> = Vec::new();
    for &v in &graph.inputs {
        let val = graph.value(v);
        let (Some(t), Some((_, Some(decl)))) = (
            given.get(&val.name),
            val.decl.as_ref().and_then(|d| d.as_tensor()),
        ) else {
            continue;
        };
        for (d, &have) in decl.iter().zip(&t.shape) {
            if let memplan_ir::DeclDim::Param(p) = &d.dim {
                pairs.push((p.as_str(), have as i64));
            }
        }
    }
    // A size that contradicts another is the run's to report, naming the input.
    let _ = memplan_ir::dim::bind_declared_dims(&pairs, &mut dims);
    dims
}

/// Compares one output with its reference; `None` when they agree.
fn compare(
    name: &str,
    got: &Tensor,
    want: &Array,
    exact: bool,
    rtol: f64,
    atol: f64,
) -> Option<String> {
    if got.dtype != want.dtype || got.shape != want.shape {
        return Some(format!(
            "output '{name}': {} {:?} vs reference {} {:?}",
            got.dtype, got.shape, want.dtype, want.shape
        ));
    }
    if exact || !got.dtype.is_float() {
        if got.bytes() != &want.data[..] {
            let w = (got.dtype.bits() / 8).max(1) as usize;
            let first = got
                .bytes()
                .chunks(w)
                .zip(want.data.chunks(w))
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Some(format!(
                "output '{name}': not bit-identical (first difference at element {first})"
            ));
        }
        return None;
    }
    let t = Tensor::from_bytes(want.dtype, &want.shape, want.data.clone(), None).ok()?;
    let (a, b) = (got.to_f32_vec().ok()?, t.to_f32_vec().ok()?);
    let mut worst: Option<(usize, f64)> = None;
    for (i, (&x, &y)) in a.iter().zip(&b).enumerate() {
        let (x, y) = (x as f64, y as f64);
        let same_nan = x.is_nan() && y.is_nan();
        let excess = (x - y).abs() - (atol + rtol * y.abs());
        if !same_nan
            && (excess > 0.0 || x.is_nan() != y.is_nan())
            && worst.is_none_or(|(_, e)| excess > e)
        {
            worst = Some((i, excess));
        }
    }
    worst.map(|(i, _)| {
        format!(
            "output '{name}': element {i} is {} vs reference {} (rtol {rtol}, atol {atol})",
            a[i], b[i]
        )
    })
}

/// Refuses a run whose estimated peak exceeds the memory available ([`crate::sysmem`]), in one
/// line: what it needs, what there is, and `optimize --budget` as the way out. Skipped when the
/// dims do not fix the peak before running (data-dependent sizes) or the memory is unknown.
fn check_memory(
    label: &str,
    g: &Graph,
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    plan: Option<&memplan_plan::Plan>,
) -> Result<()> {
    let Some((avail, source)) = crate::sysmem::available() else {
        return Ok(());
    };
    let Ok(t) = memplan_sim::timeline::Timeline::build(g, facts, &facts.order) else {
        return Ok(());
    };
    let Ok(cp) = memplan_sim::peak::concrete_peak(&t, dims) else {
        return Ok(());
    };
    let (need, what) = match plan {
        Some(p) => (cp.resident.saturating_add(p.arena_bytes), "planned peak"),
        None => (cp.peak_bytes, "estimated peak"),
    };
    if need <= avail {
        return Ok(());
    }
    let d: Vec<String> = dims
        .iter()
        .map(|(k, v)| format!(" --dim {k}={v}"))
        .collect();
    bail!(
        "cannot run {}: its {what} is {} ({need} B) but {} ({avail} B, {source}) is available; \
         `memplan optimize {}{} --budget {}B` makes a plan that fits, or pass --force",
        label,
        human(need),
        human(avail),
        label,
        d.concat(),
        avail / 10 * 9,
    )
}

/// Time spent in one op type over a run.
struct OpTime {
    op: String,
    nodes: usize,
    seconds: f64,
    /// What the cost model predicts for these nodes.
    predicted: f64,
}

/// Per-op-type time from per-node times (measured and predicted), slowest first (ties by name).
fn op_profile(g: &Graph, node_seconds: &[f64], predicted: &[NodeCost]) -> Vec<OpTime> {
    let mut by_op: BTreeMap<&str, (usize, f64, f64)> = BTreeMap::new();
    for ((n, &t), p) in g.nodes.iter().zip(node_seconds).zip(predicted) {
        let e = by_op.entry(n.op.as_str()).or_default();
        e.0 += 1;
        e.1 += t;
        e.2 += p.seconds;
    }
    let mut v: Vec<OpTime> = by_op
        .into_iter()
        .map(|(op, (nodes, seconds, predicted))| OpTime {
            op: op.to_string(),
            nodes,
            seconds,
            predicted,
        })
        .collect();
    v.sort_by(|x, y| {
        y.seconds
            .total_cmp(&x.seconds)
            .then_with(|| x.op.cmp(&y.op))
    });
    v
}

/// What `memplan run` does with a loaded model and the inputs given, its arguments parsed.
#[derive(Debug, Default)]
pub struct RunRequest {
    /// Values for symbolic dims (checked against the given inputs' shapes), for random inputs.
    pub dims: BTreeMap<String, i64>,
    /// Draw the inputs not given at random (seeded), as `--random` says.
    pub random: bool,
    pub seed: u64,
    /// Exclusive upper bound of random integers that are not indices.
    pub int_high: i64,
    /// Run from one arena at this plan's offsets (checked first).
    pub plan: Option<memplan_plan::Plan>,
    /// Run even when the estimated peak exceeds the memory available.
    pub force: bool,
    /// Runs (the first's peak is reported, and the median time); 0 counts as 1.
    pub repeat: usize,
}

/// A finished run: the executor's result and the process heap's high-water mark during the first
/// run.
#[derive(Debug)]
pub struct Executed {
    pub result: memplan_exec::RunResult,
    pub process_peak: u64,
}

/// Reads a plan (JSON) for the model it is to run; errors are prefixed with `label`. The plan is
/// checked against the model once, by [`run_model`], before it runs (at the facts of the run's
/// dims, which the plan must have been made for).
pub fn read_plan(text: &str, label: &str) -> Result<memplan_plan::Plan> {
    memplan_plan::Plan::from_json(text).map_err(|e| anyhow!("{label}: not a plan: {e}"))
}

/// The library entry of `memplan run`: runs a loaded model on the given inputs (the others drawn
/// at random when the request says so) with or without a plan, on the current rayon pool; `label`
/// (the file) prefixes errors.
pub fn run_model(
    model: &memplan_ir::Model,
    facts: &Facts,
    label: &str,
    mut given: BTreeMap<String, Tensor>,
    req: &RunRequest,
) -> Result<Executed> {
    let g = &model.graph;
    // Dims from the given inputs' shapes, then the request's, feed the random inputs' shapes.
    let mut all_dims = bound_dims(g, &given);
    for (k, v) in &crate::estimate::unpinned(model, &req.dims)? {
        if let Some(&have) = all_dims.get(k) {
            if have != *v {
                crate::usage_bail!(
                    "--dim {k}={v} disagrees with the inputs, which have {k}={have}"
                );
            }
        }
        all_dims.insert(k.clone(), *v);
    }
    crate::units::check_declared_positive(&req.dims, &facts.symbols.declared)
        .map_err(|e| anyhow::Error::new(crate::UsageError(e)))?;
    let facts = &*crate::estimate::facts_at(model, facts, &all_dims)?;
    crate::estimate::check_inferred(facts, "run")?;
    // Checked once, however many times it runs, before anything else is done with it.
    let checked = match &req.plan {
        Some(p) => Some(
            // A context, not a formatted message, so the checker's error stays in the chain for
            // callers (the Python package raises `PlanError` for it).
            memplan_plan::checked(g, facts, p).with_context(|| format!("{label}: invalid plan"))?,
        ),
        None => None,
    };
    if !req.force {
        check_memory(label, g, facts, &all_dims, req.plan.as_ref())?;
    }
    let mut rng = Rng(req.seed);
    for &v in &g.inputs {
        let val = g.value(v);
        if given.contains_key(&val.name) || matches!(val.kind, ValueKind::Initializer(_)) {
            continue;
        }
        if !req.random {
            crate::usage_bail!("input '{}' is not given: pass --input {}=FILE.npy, --inputs-npz FILE.npz, or --random", val.name, val.name);
        }
        let t = random_input(g, facts, v, &all_dims, &mut rng, req.int_high)?;
        given.insert(val.name.clone(), t);
    }
    memplan_exec::mem::reset_heap_peak();
    let heap_before = memplan_exec::mem::heap_current();
    let opset = model.onnx_opset().unwrap_or(memplan_ir::ops::DEFAULT_OPSET);
    let run_once = |inputs: BTreeMap<String, Tensor>| {
        match &checked {
            Some(c) => memplan_exec::run_checked(c, inputs, opset),
            None => memplan_exec::interp::run_with_opset(
                g,
                facts,
                inputs,
                &RunOptions::default(),
                opset,
            ),
        }
        .with_context(|| label.to_string())
    };
    let repeat = req.repeat.max(1);
    let mut res = run_once(given.clone())?;
    let process_peak = memplan_exec::mem::heap_peak().saturating_sub(heap_before);
    if repeat > 1 {
        let mut runs = vec![(res.seconds, std::mem::take(&mut res.node_seconds))];
        for _ in 1..repeat {
            let r = run_once(given.clone())?;
            runs.push((r.seconds, r.node_seconds));
        }
        runs.sort_by(|x, y| x.0.total_cmp(&y.0));
        let median = runs.swap_remove(runs.len() / 2);
        res.seconds = median.0;
        res.node_seconds = median.1;
    }
    Ok(Executed {
        result: res,
        process_peak,
    })
}

impl Executed {
    /// The report `memplan run --json` prints (without `profile`); `compared` and `mismatches` are
    /// the comparison with a reference, when one was given.
    pub fn to_json(&self, model: &str, compared: bool, mismatches: &[String]) -> serde_json::Value {
        let res = &self.result;
        let outputs: Vec<serde_json::Value> = res
            .outputs
            .iter()
            .map(|(n, t)| serde_json::json!({"name": n, "dtype": t.dtype.onnx_name(), "shape": t.shape}))
            .collect();
        let mut j = serde_json::json!({
            "model": model,
            "dims": res.dims,
            "peak_bytes": res.peak_bytes,
            "resident_bytes": res.resident_bytes,
            "process_peak_bytes": self.process_peak,
            "seconds": res.seconds,
            "outputs": outputs,
            "compared": compared,
            "mismatches": mismatches,
            "scratch_mismatches": res.scratch_mismatches,
            "planned": false,
        });
        if let Some(r) = &res.plan {
            j["planned"] = true.into();
            j["arena_bytes"] = r.arena_bytes.into();
            j["planned_peak_bytes"] = r.planned_peak_bytes.into();
            j["inplace_done"] = r.inplace_done.into();
            j["inplace_copied"] = r.inplace_copied.clone().into();
            j["plan_misses"] = r.misses.clone().into();
            if r.transfers > 0 {
                j["host_peak_bytes"] = r.host_peak_bytes.into();
                j["host_transfers"] = r.transfers.into();
                j["host_transfer_bytes"] = r.transfer_bytes.into();
                j["host_transfer_seconds"] = (r.transfer_nanos as f64 * 1e-9).into();
                j["host_transfer_wait_seconds"] = (r.transfer_wait_nanos as f64 * 1e-9).into();
            }
        }
        j
    }
}

pub fn run(a: RunArgs) -> Result<()> {
    // The pool first: loading folds small constant subgraphs with the executor's kernels, whose
    // parallel loops would start rayon's default pool, after which no other can be set.
    if let Some(t) = a.threads {
        if t == 0 {
            bail!("--threads must be at least 1");
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()
            .context("starting the thread pool")?;
    }
    let (model, facts) = crate::commands::load(&a.model)?;
    let dims = parse_dims(&a.dims).map_err(|e| anyhow!(e))?;
    let g = &model.graph;
    let mut given: BTreeMap<String, Tensor> = BTreeMap::new();
    let is_input = |name: &str| g.inputs.iter().any(|&v| g.value(v).name == name);
    if let Some(p) = &a.inputs_npz {
        for arr in npz::read(p)? {
            if !is_input(&arr.name) {
                // An archive may hold inputs of a sibling export; say so instead of failing.
                eprintln!(
                    "note: {}: '{}' is not an input of the model; ignored",
                    p.display(),
                    arr.name
                );
                continue;
            }
            given.insert(
                arr.name.clone(),
                tensor_of(&arr).with_context(|| p.display().to_string())?,
            );
        }
    }
    for spec in &a.inputs {
        let (name, file) = spec
            .split_once('=')
            .ok_or_else(|| anyhow!("--input '{spec}': expected NAME=FILE.npy"))?;
        let arrs = npz::read(std::path::Path::new(file))?;
        let arr = match arrs.as_slice() {
            [one] => one,
            _ => bail!(
                "--input {name}={file}: expected one array, the file has {}",
                arrs.len()
            ),
        };
        given.insert(name.to_string(), tensor_of(arr)?);
    }
    let plan = match &a.plan {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            Some(read_plan(&text, &p.display().to_string())?)
        }
        None => None,
    };
    // Read before the run, so that a bad file is refused at once.
    let cost = match (&a.cost_model, a.profile) {
        (_, false) => None,
        (Some(p), true) => Some(crate::optimize::read_cost_model(p)?),
        (None, true) => Some(CostModel::default()),
    };
    let label = a.model.display().to_string();
    let req = RunRequest {
        dims,
        random: a.random,
        seed: a.seed,
        int_high: a.int_high,
        plan,
        force: a.force,
        repeat: a.repeat,
    };
    let Executed {
        result: res,
        process_peak,
    } = run_model(&model, &facts, &label, given, &req)?;
    let predicted = match &cost {
        Some(c) => c.node_costs(g, &facts, &res.dims, req.plan.as_ref()),
        None => vec![NodeCost::default(); g.nodes.len()],
    };
    let profile = op_profile(g, &res.node_seconds, &predicted);

    let mut mismatches = Vec::new();
    if let Some(p) = &a.compare {
        let refs = npz::read(p)?;
        for (name, t) in &res.outputs {
            match refs.iter().find(|r| &r.name == name) {
                None => mismatches.push(format!("output '{name}' is not in {}", p.display())),
                Some(r) => mismatches.extend(compare(name, t, r, a.exact, a.rtol, a.atol)),
            }
        }
    }
    if let Some(p) = &a.out {
        let arrays: Vec<Array> = res.outputs.iter().map(|(n, t)| array_of(n, t)).collect();
        npz::write_npz(p, &arrays)?;
    }
    if a.json {
        let ex = Executed {
            result: res,
            process_peak,
        };
        let mut j = ex.to_json(&label, a.compare.is_some(), &mismatches);
        if a.profile {
            j["profile"] = profile
                .iter()
                .map(|p| {
                    serde_json::json!({"op": p.op, "nodes": p.nodes, "seconds": p.seconds,
                        "predicted_seconds": p.predicted})
                })
                .collect::<Vec<_>>()
                .into();
            j["node_profile"] = g
                .node_ids()
                .zip(ex.result.node_seconds.iter().zip(&predicted))
                .map(|(id, (s, p))| {
                    let (kind, work) = p
                        .work
                        .map_or((None, None), |(k, w)| (Some(k.name()), Some(w)));
                    serde_json::json!({"node": g.node(id).label(id), "op": g.node(id).op,
                        "seconds": s, "predicted_seconds": p.seconds, "kind": kind, "work": work})
                })
                .collect::<Vec<_>>()
                .into();
        }
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        let d: Vec<String> = res.dims.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!(
            "model         {}   dims: {}",
            a.model.display(),
            if d.is_empty() {
                "-".into()
            } else {
                d.join(" ")
            }
        );
        println!(
            "peak          {}  ({} B; tensors: weights, inputs, activations, outputs, scratch)",
            human(res.peak_bytes),
            res.peak_bytes
        );
        if let Some(r) = &res.plan {
            println!(
                "arena         {}  ({} B, one allocation; planned peak with resident {} B, {})",
                human(r.arena_bytes),
                r.arena_bytes,
                r.planned_peak_bytes,
                if r.planned_peak_bytes == res.peak_bytes {
                    "as measured".to_string()
                } else {
                    format!(
                        "measured {:+} B",
                        res.peak_bytes as i64 - r.planned_peak_bytes as i64
                    )
                }
            );
            println!(
                "in place      {} run in place, {} copied",
                r.inplace_done,
                r.inplace_copied.len()
            );
            if r.transfers > 0 {
                println!(
                    "host tier     {} at most  ({} copies out and back, {}: {:.2} ms copying beside compute, {:.2} ms waited for; the device tier is the peak above)",
                    human(r.host_peak_bytes),
                    r.transfers,
                    human(r.transfer_bytes),
                    r.transfer_nanos as f64 * 1e-6,
                    r.transfer_wait_nanos as f64 * 1e-6
                );
            }
            for m in r
                .inplace_copied
                .iter()
                .map(|n| format!("{n}: cannot run in place, copied"))
                .chain(r.misses.iter().cloned())
            {
                println!("note          {m}");
            }
        }
        for m in &res.scratch_mismatches {
            println!("note          scratch: {m}");
        }
        println!(
            "process peak  {}  (heap high-water mark during the run)",
            human(process_peak)
        );
        let runs = if a.repeat > 1 {
            format!(" (median of {})", a.repeat)
        } else {
            String::new()
        };
        println!("time          {:.4} s{runs}", res.seconds);
        if a.profile {
            for p in &profile {
                println!(
                    "op time       {:<22} {:>9.4} s  {:>5.1}%  ({} nodes; predicted {:.4} s)",
                    p.op,
                    p.seconds,
                    100.0 * p.seconds / res.seconds.max(1e-12),
                    p.nodes,
                    p.predicted
                );
            }
        }
        for (n, t) in &res.outputs {
            println!("output        {n}  {} {:?}", t.dtype.onnx_name(), t.shape);
        }
        if let Some(p) = &a.compare {
            if mismatches.is_empty() {
                let how = if a.exact {
                    "bit-identical".to_string()
                } else {
                    format!("within rtol {} atol {}", a.rtol, a.atol)
                };
                println!("compare       {}: all outputs {how}", p.display());
            }
        }
    }
    if !mismatches.is_empty() {
        bail!(
            "{} output(s) differ from the reference; first: {}",
            mismatches.len(),
            mismatches[0]
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use memplan_ir::graph::{DeclDim, DeclType};
    use memplan_ir::TensorData;

    /// Ids that a gather reads through a slice (as a chunked model reads each chunk's ids) are
    /// bounded by the table's rows, as where the gather reads them directly: `--random` gives a
    /// chunked model the inputs it gives the original.
    #[test]
    fn ids_read_through_a_slice_are_bounded_by_the_table() {
        let mut g = Graph::default();
        let s = DeclDim::Param("S".into());
        let ids = g.add_input("ids", DeclType::tensor(DataType::I64, vec![s]));
        let table = g.add_initializer(TensorData::from_f32("table", vec![10, 4], &[0.0; 40]));
        let int = |g: &mut Graph, name: &str, v: i64| {
            g.add_initializer(TensorData::from_i64(name, vec![1], &[v]))
        };
        let (lo, hi) = (int(&mut g, "lo", 0), int(&mut g, "hi", 4));
        let (_, cut) = g.add_node(
            "cut",
            "Slice",
            &[Some(ids), Some(lo), Some(hi)],
            &["cut"],
            vec![],
        );
        let (_, rows) = g.add_node(
            "rows",
            "Gather",
            &[Some(table), Some(cut[0])],
            &["rows"],
            vec![],
        );
        // A gather of values computed from the ids (not copied) does not bound them.
        let small = g.add_initializer(TensorData::from_f32("small", vec![3, 4], &[0.0; 12]));
        let (_, neg) = g.add_node("neg", "Neg", &[Some(ids)], &["neg"], vec![]);
        let (_, other) = g.add_node(
            "other",
            "Gather",
            &[Some(small), Some(neg[0])],
            &["other"],
            vec![],
        );
        g.outputs = vec![rows[0], other[0]];
        let model = memplan_ir::graph::Model {
            graph: g,
            ..Default::default()
        };
        let dims = BTreeMap::from([("S".to_string(), 8)]);
        let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
        assert_eq!(index_bound(&model.graph, &facts, ids, &dims), Some(10));
    }
}
