//! `memplan optimize`: plans a model at given dims (memory-aware order, in-place reuse, one arena),
//! writes the graph with its nodes in the planned order and the plan as JSON, and reports the peak
//! after each pass.
//!
//! With `--budget`, a model whose plan does not fit is first chunked (`memplan_plan::chunk`): regions
//! of it are rewritten to run slice by slice, as standard ONNX, until the planned peak fits, with
//! the least predicted slowdown. When nothing fits, the report gives the lowest peak reached and the
//! tensors live at it.
//!
//! With `-o`, the plan written by `--plan-out` is for the written model (node indices follow its
//! node list); without it, for the input model. Either way it has passed the independent checker,
//! and with `-o` it is checked again against the model read back from disk.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;

use memplan_ir::graph::Model;
use memplan_ir::infer::Facts;
use memplan_plan::chunk::{ChunkOptions, CostModel};
use memplan_plan::fit::{ChunkSummary, FitOptions};
use memplan_plan::{Options, Plan, Report};

use crate::commands::load;
use crate::estimate::check_inferred;
use crate::table::Table;
use crate::units::{human, parse_budget, parse_dims};

#[derive(Args, Debug)]
pub struct OptimizeArgs {
    /// The ONNX model.
    pub model: PathBuf,
    /// A value for a symbolic dim, e.g. `--dim N=512` (repeatable; every symbol needs one; `@FILE.json`
    /// reads a JSON object of dims, or `run --json`'s "dims": the sizes a run made from the data).
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    pub dims: Vec<String>,
    /// Write the model with its nodes in the planned order.
    #[arg(short = 'o', long = "output", value_name = "OUT.onnx")]
    pub output: Option<PathBuf>,
    /// Write the plan (schedule, buffers with arena offsets, in-place decisions) as JSON.
    #[arg(long = "plan-out", value_name = "PLAN.json")]
    pub plan_out: Option<PathBuf>,
    /// Memory budget, e.g. 512MiB, 2GB, or 0.15x (a fraction of the estimated peak at these dims):
    /// chunk the graph until the planned peak (arena plus weights and inputs) fits; `lowest` (or
    /// 0): as low as it goes. A budget below the floor (the
    /// bound no plan goes below, which the report gives) is refused.
    #[arg(long)]
    pub budget: Option<String>,
    /// With --budget: the chunk counts chunking may choose from (comma-separated; default
    /// 2,4,8,16,32,64,128,256).
    #[arg(long, value_name = "K,K,...", value_delimiter = ',')]
    pub chunks: Vec<usize>,
    /// With --budget: a region cut into at least this many chunks of equal width is written as one
    /// `Scan` (its body one chunk) instead of unrolled, when its plan still fits (or is no higher),
    /// so the file stays small; memplan plans and runs the Scan exactly, its body from a plan of
    /// its own. 0: always unroll. Default: regions of 100 chunks or more whose unrolling adds 2048
    /// nodes or more.
    #[arg(long, value_name = "K")]
    pub scan_from: Option<usize>,
    /// Iterations of such a `Scan` that memplan's executor runs side by side (each lane holds a
    /// copy of the body's memory, which the plan counts whatever the thread count); one lane where
    /// more would miss the budget that one lane meets, or plan higher.
    #[arg(long, value_name = "L", default_value_t = memplan_plan::fit::ScanFrom::DEFAULT.lanes, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub scan_lanes: u32,
    /// With --budget or --device-budget: the cost model (chunking's predicted time; the steps' time
    /// beside which host copies run), a JSON file of per-kind curves (seconds per node against its
    /// work, at a thread count) as `bench/calibrate_cost.py` writes it for a machine (default: the
    /// development machine's calibration at 2 threads).
    #[arg(long, value_name = "FILE.json")]
    pub cost_model: Option<PathBuf>,
    /// With --budget: first recompute values read again after the peak (the activations a
    /// training graph's backward pass reads) until the graph-order peak fits, as cloned nodes;
    /// outputs stay bit-identical.
    #[arg(long)]
    pub recompute: bool,
    /// Device memory budget, e.g. 4GiB, 0.5x or `lowest`: fit the model to it as --budget does, then move buffers
    /// idle across the peak to a host tier (copied out after their last use before the peak, back
    /// before their next use) until the device tier (arena plus weights and inputs) fits. ONNX
    /// cannot say where a tensor lives: the plan carries it, and `memplan run --plan` performs the
    /// copies on a thread of their own, overlapped with compute as the plan schedules them, and
    /// measures both tiers.
    #[arg(long, value_name = "SIZE")]
    pub device_budget: Option<String>,
    /// With --device-budget: the host link's bandwidth in GB/s, for the predicted transfer time and
    /// the copies' windows.
    #[arg(long, value_name = "GB/S", default_value_t = memplan_plan::offload::DEFAULT_BANDWIDTH / 1e9)]
    pub host_bandwidth: f64,
    /// With --budget: do not narrow. By default a tensor proven to hold only a few values (a 0/1
    /// or 0/-inf mask, small integers) that is live at the peak is stored in one byte per element
    /// and widened exactly where it is read; the report gives the proof.
    #[arg(long)]
    pub no_narrow: bool,
    /// Work for the exact schedule search: frontier states explored over all windows (a bound on
    /// work, not time, so the same input gives the same plan on any machine).
    #[arg(long, default_value_t = memplan_plan::DEFAULT_EXACT_WORK, value_name = "STATES")]
    pub exact_work: usize,
    /// Print JSON instead of the report.
    #[arg(long)]
    pub json: bool,
}

/// The JSON report: the planner's report plus where things were written.
#[derive(serde::Serialize)]
struct JsonReport<'a> {
    model: String,
    output: Option<String>,
    plan: Option<String>,
    plan_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    budget_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fits: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    floor: Option<&'a memplan_plan::Floor>,
    #[serde(skip_serializing_if = "Option::is_none")]
    chunking: Option<&'a ChunkSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    recompute: Option<&'a memplan_plan::remat::Report>,
    #[serde(skip_serializing_if = "Option::is_none")]
    narrowing: Option<&'a memplan_plan::narrow::Report>,
    #[serde(skip_serializing_if = "Option::is_none")]
    offload: Option<&'a memplan_plan::offload::Report>,
    #[serde(flatten)]
    report: &'a Report,
}

/// The largest value of `sym` at which `model` (other dims from `dims`) has a plan that fits
/// `budget` once chunked as `memplan optimize --budget` would, searched by doubling from `start` (a
/// value that fits without chunking, or 1) and then bisecting; each probe plans (and chunks when
/// needed) at that value. Values at which the model does not type-check (past its position
/// table, say) do not fit, and are not planned. `None` when even `start` does not fit.
#[derive(Clone, Debug, serde::Serialize)]
pub struct OptimizedFit {
    pub symbol: String,
    pub value: Option<i64>,
    /// The planned peak at `value`, and at the smallest probed value that does not fit (`None`
    /// there when the model does not type-check at it).
    pub peak_at_value: Option<u64>,
    pub first_failing: Option<i64>,
    pub peak_at_failing: Option<u64>,
    /// Why the model does not type-check at `first_failing`, when that is why it fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub type_error_at_failing: Option<String>,
    /// Values probed (each one a plan, chunked when needed).
    pub probes: usize,
}

/// The search cap of [`max_fitting_optimized`]'s doubling.
const OPTIMIZED_SEARCH_MAX: i64 = 1 << 24;

pub fn max_fitting_optimized(
    model: &Model,
    dims: &BTreeMap<String, i64>,
    sym: &str,
    budget: u64,
    start: i64,
) -> Result<OptimizedFit> {
    let opts = Options {
        exact_work: memplan_plan::DEFAULT_EXACT_WORK / 16,
        ..Options::default()
    };
    let mut probes = 0;
    let facts = memplan_ir::infer_model(model).map_err(|e| anyhow!("{e}"))?;
    let start = start.max(1);
    let rejected =
        crate::estimate::first_rejected(model, dims, sym, start, 2 * OPTIMIZED_SEARCH_MAX);
    // The planned peak at `n`, chunking when the plan alone does not fit; `None` where the model
    // does not type-check.
    let mut peak_at = |n: i64| -> Result<Option<u64>> {
        if rejected.as_ref().is_some_and(|(r, _)| n >= *r) {
            return Ok(None);
        }
        probes += 1;
        let mut d = dims.clone();
        d.insert(sym.to_string(), n);
        let fo = FitOptions {
            plan: opts.clone(),
            ..FitOptions::new(budget)
        };
        let at = crate::estimate::facts_at(model, &facts, &d)?;
        let fit = memplan_plan::fit_budget(model, &at, &d, &fo)?;
        Ok(Some(fit.outcome.report.peak_bytes_after))
    };
    let fits = |p: Option<u64>| p.is_some_and(|p| p <= budget);
    // A probe without a peak is one the model does not type-check at.
    let why = |p: Option<u64>| match (p, &rejected) {
        (None, Some((_, w))) => Some(w.clone()),
        _ => None,
    };
    let mut lo = start;
    let p_lo = peak_at(lo)?;
    if !fits(p_lo) {
        return Ok(OptimizedFit {
            symbol: sym.to_string(),
            value: None,
            peak_at_value: None,
            first_failing: Some(lo),
            peak_at_failing: p_lo,
            type_error_at_failing: why(p_lo),
            probes,
        });
    }
    let mut best = (lo, p_lo);
    let mut hi = None;
    while hi.is_none() && lo < OPTIMIZED_SEARCH_MAX {
        let n = lo.saturating_mul(2);
        let p = peak_at(n)?;
        if fits(p) {
            lo = n;
            best = (n, p);
        } else {
            hi = Some((n, p));
        }
    }
    let Some(mut fail) = hi else {
        return Ok(OptimizedFit {
            symbol: sym.to_string(),
            value: Some(best.0),
            peak_at_value: best.1,
            first_failing: None,
            peak_at_failing: None,
            type_error_at_failing: None,
            probes,
        });
    };
    while fail.0 - best.0 > 1 {
        let mid = best.0 + (fail.0 - best.0) / 2;
        let p = peak_at(mid)?;
        if fits(p) {
            best = (mid, p);
        } else {
            fail = (mid, p);
        }
    }
    Ok(OptimizedFit {
        symbol: sym.to_string(),
        value: Some(best.0),
        peak_at_value: best.1,
        first_failing: Some(fail.0),
        peak_at_failing: fail.1,
        type_error_at_failing: why(fail.1),
        probes,
    })
}

/// One line for [`OptimizedFit`], under the estimate's own "largest N that fits".
pub fn optimized_fit_line(o: &OptimizedFit) -> String {
    let failing = match (o.first_failing, o.peak_at_failing, &o.type_error_at_failing) {
        (Some(f), Some(p), _) => format!(", {} at {}={f}", human(p), o.symbol),
        (Some(f), None, Some(why)) => {
            format!("; the model does not type-check at {}={f}: {why}", o.symbol)
        }
        _ => String::new(),
    };
    match (o.value, o.peak_at_value) {
        (Some(v), Some(p)) => format!(
            "optimized:  largest {} that fits: {v}   (planned peak {} at {}={v}{failing}; {} plans)",
            o.symbol,
            human(p),
            o.symbol,
            o.probes
        ),
        _ => format!(
            "optimized:  no {} fits even chunked{failing}",
            o.symbol
        ),
    }
}

/// Exit status of `optimize --budget` when the budget is not met (the lowest plan reached is still
/// written): distinct from errors (1) and usage errors (2).
pub const EXIT_BUDGET_NOT_MET: u8 = 3;

/// What `memplan optimize` computes, its arguments parsed.
#[derive(Clone, Debug)]
pub struct OptimizeRequest {
    /// A value for every symbol of the model.
    pub dims: BTreeMap<String, i64>,
    /// Chunk (and with `recompute`, recompute) until the planned peak fits this.
    pub budget: Option<u64>,
    /// The chunk counts chunking may choose from (empty: the default).
    pub chunks: Vec<usize>,
    pub cost: CostModel,
    pub recompute: bool,
    /// Store tensors proven to hold few values narrow (with a budget).
    pub narrow: bool,
    /// Fit to this device budget, then move idle buffers to a host tier until it fits.
    pub device_budget: Option<u64>,
    /// Host link bandwidth, bytes per second.
    pub host_bandwidth: f64,
    /// Frontier states the exact schedule search explores.
    pub exact_work: usize,
    /// Which chunked regions to fold into a `Scan` (`None`: never).
    pub scan_from: Option<memplan_plan::fit::ScanFrom>,
}

impl OptimizeRequest {
    /// The CLI's defaults at `dims`.
    pub fn new(dims: BTreeMap<String, i64>) -> OptimizeRequest {
        OptimizeRequest {
            dims,
            budget: None,
            chunks: Vec::new(),
            cost: CostModel::default(),
            recompute: false,
            narrow: true,
            device_budget: None,
            host_bandwidth: memplan_plan::offload::DEFAULT_BANDWIDTH,
            exact_work: memplan_plan::DEFAULT_EXACT_WORK,
            scan_from: Some(memplan_plan::fit::ScanFrom::DEFAULT),
        }
    }
}

/// A checked plan and the model it is for (chunked or recomputed under a budget), with the
/// planner's report.
#[derive(Debug)]
pub struct Optimized {
    pub model: Model,
    pub plan: Plan,
    pub report: Report,
    pub chunking: Option<ChunkSummary>,
    pub recompute: Option<memplan_plan::remat::Report>,
    pub narrowing: Option<memplan_plan::narrow::Report>,
    pub offload: Option<memplan_plan::offload::Report>,
    pub budget: Option<u64>,
    /// With a budget: whether the planned peak fits it.
    pub fits: Option<bool>,
    /// With a budget: the lower bound no plan goes below (`memplan_plan::floor`), and what holds
    /// it up.
    pub floor: Option<memplan_plan::Floor>,
    pub plan_ms: f64,
}

impl Optimized {
    /// The model with its nodes in the planned order, and the plan renumbered for it (what `-o`
    /// writes and `--plan-out` then holds).
    pub fn reordered(&self) -> (Model, Plan) {
        let schedule = self.plan.node_order();
        let mut m2 = self.model.clone();
        m2.graph = memplan_plan::reorder(&self.model.graph, &schedule);
        (m2, self.plan.clone().renumbered_in_schedule_order())
    }

    /// The report `memplan optimize --json` prints: the planner's report plus where the model and
    /// plan were written.
    pub fn to_json(
        &self,
        model: &str,
        output: Option<&str>,
        plan: Option<&str>,
    ) -> Result<serde_json::Value> {
        let j = JsonReport {
            model: model.to_string(),
            output: output.map(str::to_string),
            plan: plan.map(str::to_string),
            plan_ms: self.plan_ms,
            budget_bytes: self.budget,
            fits: self.fits,
            floor: self.floor.as_ref(),
            chunking: self.chunking.as_ref(),
            recompute: self.recompute.as_ref(),
            narrowing: self.narrowing.as_ref(),
            offload: self.offload.as_ref(),
            report: &self.report,
        };
        Ok(serde_json::to_value(&j)?)
    }
}

/// The library entry of `memplan optimize`: plans `model` at the request's dims (chunking to its
/// budget when it has one); `label` (the file) prefixes planning errors.
pub fn optimize_model(
    model: Model,
    facts: &Facts,
    label: &str,
    req: &OptimizeRequest,
) -> Result<Optimized> {
    if req.device_budget.is_some() && req.budget.is_some() {
        crate::usage_bail!("--device-budget is the budget: give it or --budget, not both");
    }
    if !(req.host_bandwidth > 0.0 && req.host_bandwidth.is_finite()) {
        crate::usage_bail!("--host-bandwidth must be a positive number of GB/s");
    }
    let req = &OptimizeRequest {
        budget: req.budget.or(req.device_budget),
        dims: crate::estimate::unpinned(&model, &req.dims)?,
        ..req.clone()
    };
    let facts = &*crate::estimate::facts_at(&model, facts, &req.dims)?;
    check_inferred(facts, "plan")?;
    crate::estimate::check_dims(facts, &req.dims, None, None)?;
    let opts = Options {
        exact_work: req.exact_work,
        ..Options::default()
    };
    if req.budget.is_none() && !req.chunks.is_empty() {
        crate::usage_bail!("--chunks applies to chunking, which --budget asks for");
    }
    if req.chunks.iter().any(|&k| k < 2) {
        crate::usage_bail!("--chunks: every chunk count must be at least 2");
    }
    if req.recompute && req.budget.is_none() {
        crate::usage_bail!("--recompute applies to a budget: give --budget");
    }
    let t0 = Instant::now();
    let dims = &req.dims;
    // The floor of the model as given (chunking splits nodes, so it does not move the floor).
    let floor = match req.budget {
        Some(_) => Some(
            memplan_plan::floor(&model.graph, facts, dims).with_context(|| label.to_string())?,
        ),
        None => None,
    };
    if let (Some(b), Some(fl)) = (req.budget, &floor) {
        if b > 0 && b < fl.bytes {
            let flag = if req.device_budget.is_some() {
                "--device-budget"
            } else {
                "--budget"
            };
            crate::usage_bail!(
                "{flag} {} is below the floor of {}, which no plan goes below (resident weights and inputs {} + {}); ask for `lowest` to get the lowest plan",
                human(b),
                human(fl.bytes),
                human(fl.resident_bytes),
                fl.held_by
            );
        }
    }
    // The planned model's facts: the given ones, or those of the model a budget rewrote.
    let (model, planned_facts, out, chunking, recompute, narrowing) = match req.budget {
        None => {
            let out = memplan_plan::optimize(&model.graph, facts, dims, &opts)
                .with_context(|| label.to_string())?;
            (model, Cow::Borrowed(facts), out, None, None, None)
        }
        Some(b) => {
            let mut chunk = ChunkOptions {
                cost: req.cost.clone(),
                ..ChunkOptions::default()
            };
            if !req.chunks.is_empty() {
                chunk.chunk_counts = req.chunks.clone();
            }
            let fo = FitOptions {
                plan: opts.clone(),
                chunk,
                recompute: req.recompute.then(memplan_plan::remat::Options::default),
                narrow: req.narrow.then(memplan_plan::narrow::Options::default),
                scan_from: req.scan_from,
                ..FitOptions::new(b)
            };
            let fit = memplan_plan::fit_budget(&model, facts, dims, &fo)
                .with_context(|| label.to_string())?;
            (
                fit.model,
                Cow::Owned(fit.facts),
                fit.outcome,
                fit.chunking,
                fit.recompute,
                fit.narrowing,
            )
        }
    };
    let (mut out, mut offload) = (out, None);
    if let Some(db) = req.device_budget {
        if out.report.peak_bytes_after > db {
            let (plan, rep) = memplan_plan::offload::offload_with(
                &model.graph,
                &planned_facts,
                &out.plan,
                db,
                req.host_bandwidth,
                &req.cost,
            )
            .with_context(|| label.to_string())?;
            out.report.passes.push(memplan_plan::Pass {
                name: format!(
                    "offload: {} buffer(s) to the host tier ({} B at most there)",
                    rep.moved.len(),
                    rep.host_bytes
                ),
                peak_bytes: rep.device_peak_after,
            });
            out.report.peak_bytes_after = rep.device_peak_after;
            out.report.arena_bytes = plan.arena_bytes;
            out.report.arena_lower_bound = rep.arena_lower_bound;
            out.plan = plan;
            offload = Some(rep);
        }
    }
    let plan_ms = t0.elapsed().as_secs_f64() * 1e3;
    // `lowest` (0) asks for the lowest plan, which is what it gets.
    let fits = req
        .budget
        .filter(|&b| b > 0)
        .map(|b| out.report.peak_bytes_after <= b);
    Ok(Optimized {
        model,
        plan: out.plan,
        report: out.report,
        chunking,
        recompute,
        narrowing,
        offload,
        budget: req.budget,
        fits,
        floor,
        plan_ms,
    })
}

pub fn optimize(a: OptimizeArgs) -> Result<ExitCode> {
    // Refused before planning, which may take minutes.
    for (flag, p) in [("--output", &a.output), ("--plan-out", &a.plan_out)] {
        if let Some(p) = p {
            check_out_dir(flag, p)?;
        }
    }
    let (model, facts) = load(&a.model)?;
    let dims = parse_dims(&a.dims).map_err(|e| anyhow!(e))?;
    let dims = crate::estimate::unpinned(&model, &dims)?;
    let facts = crate::estimate::facts_at(&model, &facts, &dims)?;
    check_inferred(&facts, "plan")?;
    crate::estimate::check_dims(&facts, &dims, None, None)?;
    // A fraction of the peak (`0.15x`) is taken of the estimate at these dims.
    let peak = || crate::estimate::peak_at(&model, &facts, &dims);
    let budget_of = |flag: &str, given: Option<&str>| -> Result<Option<u64>> {
        let Some(b) = given else { return Ok(None) };
        let b = parse_budget(b).map_err(|e| anyhow!("{flag}: {e}"))?;
        b.bytes(peak).map(Some)
    };
    let budget = budget_of("--budget", a.budget.as_deref())?;
    let device_budget = budget_of("--device-budget", a.device_budget.as_deref())?;
    if budget.is_none() && device_budget.is_none() && a.cost_model.is_some() {
        bail!("--cost-model applies to chunking and host copies, which --budget or --device-budget ask for");
    }
    let cost = match &a.cost_model {
        Some(p) => read_cost_model(p)?,
        None => CostModel::default(),
    };
    let req = OptimizeRequest {
        budget,
        chunks: a.chunks.clone(),
        cost,
        recompute: a.recompute,
        narrow: !a.no_narrow,
        device_budget,
        host_bandwidth: a.host_bandwidth * 1e9,
        exact_work: a.exact_work,
        scan_from: match a.scan_from {
            None => Some(memplan_plan::fit::ScanFrom {
                lanes: a.scan_lanes,
                ..memplan_plan::fit::ScanFrom::DEFAULT
            }),
            Some(0) => None,
            Some(chunks) => Some(memplan_plan::fit::ScanFrom {
                chunks,
                nodes: 0,
                lanes: a.scan_lanes,
            }),
        },
        ..OptimizeRequest::new(dims.clone())
    };
    let label = a.model.display().to_string();
    let opt = optimize_model(model, &facts, &label, &req)?;
    let (plan_ms, fits) = (opt.plan_ms, opt.fits);

    let mut plan = opt.plan.clone();
    if let Some(path) = &a.output {
        let (m2, renumbered) = opt.reordered();
        let mode = memplan_onnx::default_mode(&opt.model);
        let side_file = path
            .file_name()
            .and_then(|n| mode.side_file(&n.to_string_lossy()))
            .map(|n| path.with_file_name(n));
        memplan_onnx::save(&m2, path, mode)
            .with_context(|| format!("writing {}", path.display()))?;
        plan = renumbered;
        // The plan must hold for the model as it reads back from disk; a file it does not hold
        // for is removed (with its external data), not left behind as if it were the result.
        let checked = load(path).and_then(|(back, back_facts)| {
            let back_facts = crate::estimate::facts_at(&back, &back_facts, &plan.dims)?;
            memplan_plan::check(&back.graph, &back_facts, &plan)
                .with_context(|| format!("the plan for the written model {}", path.display()))
        });
        if let Err(e) = checked {
            // Removal failures are not reported over the check's error.
            for p in std::iter::once(path.clone()).chain(side_file) {
                let _ = std::fs::remove_file(p);
            }
            return Err(e.context(format!("{} removed, no plan written", path.display())));
        }
    }
    if let Some(path) = &a.plan_out {
        std::fs::write(path, plan.to_json() + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let chunking = &opt.chunking;

    let r = &opt.report;
    if a.json {
        let j = opt.to_json(
            &label,
            a.output
                .as_ref()
                .map(|p| p.display().to_string())
                .as_deref(),
            a.plan_out
                .as_ref()
                .map(|p| p.display().to_string())
                .as_deref(),
        )?;
        println!("{}", serde_json::to_string_pretty(&j)?);
        return Ok(exit_status(fits));
    }
    let dims_s: Vec<String> = dims.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut s = String::new();
    s.push_str(&format!(
        "model      {}   {}   {} nodes, planned in {plan_ms:.0} ms\n\n",
        a.model.display(),
        if dims_s.is_empty() {
            "no dims".to_string()
        } else {
            dims_s.join(" ")
        },
        r.nodes
    ));
    let pct = |x: u64| {
        if r.peak_bytes_before == 0 {
            String::new()
        } else {
            format!(
                "{:+.1}%",
                (x as f64 / r.peak_bytes_before as f64 - 1.0) * 100.0
            )
        }
    };
    let mut t = Table::new(
        &["pass", "peak", "bytes", "vs graph order"],
        &[false, true, true, true],
    );
    for p in &r.passes {
        t.row(vec![
            p.name.clone(),
            human(p.peak_bytes),
            p.peak_bytes.to_string(),
            pct(p.peak_bytes),
        ]);
    }
    s.push_str(&t.render());
    s.push_str(&format!(
        "\npeak       {} -> {} ({})\narena      {} (liveness bound {}, gap {}), resident {}, {} in-place reuses\n",
        human(r.peak_bytes_before),
        human(r.peak_bytes_after),
        pct(r.peak_bytes_after),
        human(r.arena_bytes),
        human(r.arena_lower_bound),
        human(r.arena_bytes.saturating_sub(r.arena_lower_bound)),
        human(r.resident_bytes),
        r.inplace
    ));
    if r.heap_bytes > 0 {
        let planned = match r.body_plans {
            0 => String::new(),
            1 => ", one from a plan of its own (its arena reused by every iteration)".into(),
            k => format!(", {k} from plans of their own (each arena reused by every iteration)"),
        };
        s.push_str(&format!(
            "heap       {} beside the arena: control-flow bodies (If, Loop, Scan) run on the heap{planned}\n",
            human(r.heap_bytes)
        ));
    }
    if opt.budget == Some(0) {
        s.push_str("budget     lowest: the lowest plan reached\n");
    }
    if let (Some(b), Some(f)) = (opt.budget, fits) {
        s.push_str(&format!(
            "budget     {}: {}\n",
            human(b),
            if f {
                "fits".to_string()
            } else {
                format!(
                    "does not fit; the lowest plan reached is written (exit status {EXIT_BUDGET_NOT_MET})"
                )
            }
        ));
    }
    if let Some(fl) = &opt.floor {
        s.push_str(&format!(
            "floor      {} (no plan goes below: resident {} + {}: {}){}\n",
            human(fl.bytes),
            human(fl.resident_bytes),
            fl.held_by,
            if fl.values.len() > 8 {
                format!(
                    "{}, and {} more",
                    fl.values[..8].join(", "),
                    fl.values.len() - 8
                )
            } else {
                fl.values.join(", ")
            },
            if fits == Some(false) || opt.budget == Some(0) {
                format!(
                    "; the lowest plan is {} above it",
                    human(r.peak_bytes_after.saturating_sub(fl.bytes))
                )
            } else {
                String::new()
            }
        ));
    }
    if let Some(o) = &opt.offload {
        s.push_str(&format!(
            "offload    {} buffer(s) moved to the host tier while idle: device tier {} -> {}, host tier {} at most; {} copied out and back beside compute, predicted {:.2} ms at {:.0} GB/s, {:.2} ms of it exposed (compute waits; predicted compute {:.1} ms)\n",
            o.moved.len(),
            human(o.device_peak_before),
            human(o.device_peak_after),
            human(o.host_bytes),
            human(o.transfer_bytes),
            o.predicted_seconds * 1e3,
            o.bandwidth / 1e9,
            o.predicted_exposed_seconds * 1e3,
            o.predicted_compute_seconds * 1e3
        ));
    }
    if let Some(n) = &opt.narrowing {
        for st in &n.steps {
            s.push_str(&format!(
                "narrowed   '{}' ({}, {}) stored as {} ({}), widened for {} reader(s); proof:\n",
                st.value,
                st.dtype,
                human(st.bytes),
                st.stored_as,
                human(st.narrow_bytes),
                st.readers
            ));
            for line in &st.proof {
                s.push_str(&format!("             {line}\n"));
            }
        }
    }
    if let Some(c) = &chunking {
        s.push_str(&format!(
            "chunking   {} step(s), {} round(s), {} candidates, simulated peak {} -> {}, predicted {:+.1} ms of run time\n",
            c.steps.len(),
            c.rounds,
            c.candidates,
            human(c.simulated_peak_before),
            human(c.simulated_peak_after),
            c.predicted_seconds * 1e3
        ));
        for pr in &c.per_reader {
            s.push_str(&format!(
                "shared     '{}' ({}) made again for {} more reader(s) ({} node(s) each), so it is not held whole from one reader to the next\n",
                pr.value,
                human(pr.bytes),
                pr.copies,
                pr.nodes
            ));
        }
        if !c.live_at_peak.is_empty() {
            let live: Vec<String> = c
                .live_at_peak
                .iter()
                .map(|l| format!("{} {}", l.name, human(l.bytes)))
                .collect();
            s.push_str(&format!(
                "lowest     {} planned; live at the peak: {}\n",
                human(r.peak_bytes_after),
                live.join(", ")
            ));
        }
    }
    s.push_str("\nschedules\n");
    let mut t = Table::new(
        &[
            "scheduler",
            "peak",
            "after in place",
            "arena",
            "best placement",
        ],
        &[false, true, true, true, false],
    );
    for c in &r.candidates {
        t.row(vec![
            c.scheduler.clone(),
            human(c.peak_bytes),
            human(c.inplace_peak_bytes),
            c.arena_bytes.map_or_else(|| "-".into(), human),
            c.placement.clone(),
        ]);
    }
    s.push_str(&t.render());
    s.push_str(&format!(
        "exact search: {} windows solved, {} improved, {} given up\n",
        r.exact_windows_solved, r.exact_windows_improved, r.exact_windows_given_up
    ));
    for (what, p) in [("model", &a.output), ("plan", &a.plan_out)] {
        if let Some(p) = p {
            s.push_str(&format!("wrote {what} {}\n", p.display()));
        }
    }
    print!("{s}");
    Ok(exit_status(fits))
}

/// An error naming `flag` when the directory `path` would be written into is not one.
fn check_out_dir(flag: &str, path: &std::path::Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        bail!(
            "{flag} {}: the directory {} does not exist",
            path.display(),
            dir.display()
        );
    }
    Ok(())
}

fn exit_status(fits: Option<bool>) -> ExitCode {
    match fits {
        Some(false) => ExitCode::from(EXIT_BUDGET_NOT_MET),
        _ => ExitCode::SUCCESS,
    }
}

/// A cost model from a JSON file (`bench/calibrate_cost.py`'s output), its curves checked.
pub(crate) fn read_cost_model(path: &std::path::Path) -> Result<CostModel> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--cost-model {}", path.display()))?;
    let c: CostModel = serde_json::from_str(&text)
        .map_err(|e| anyhow!("--cost-model {}: not a cost model: {e}", path.display()))?;
    c.validate()
        .map_err(|e| anyhow!("--cost-model {}: {e}", path.display()))?;
    Ok(c)
}
