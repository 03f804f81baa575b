//! `memplan estimate`: peak memory before running, at given dims, as a formula, against a budget,
//! over a sweep; as a report, JSON or an SVG plot.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use clap::Args;

use memplan_ir::infer::Facts;
use memplan_ir::Model;
use memplan_sim::estimate::{Analysis, Estimate, EstimateOptions, FormulaReport, MaxFitting};

use crate::commands::load;
use crate::optimize::OptimizedFit;
use crate::table::Table;
use crate::units::{human, parse_dims, parse_size};

#[derive(Args, Debug)]
pub struct EstimateArgs {
    /// The ONNX model.
    pub model: PathBuf,
    /// A value for a symbolic dim, e.g. `--dim N=512` (repeatable; `@FILE.json` reads a JSON object of
    /// dims, or `run --json`'s "dims": the sizes a run made from the data).
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    pub dims: Vec<String>,
    /// Memory budget, e.g. 80GiB, 512MiB, 80GB or bytes.
    #[arg(long)]
    pub budget: Option<String>,
    /// Symbol to grow for the formula and to solve for with --budget (default: the one the peak grows
    /// fastest with).
    #[arg(long, value_name = "NAME")]
    pub solve: Option<String>,
    /// With --budget: also find the largest value of the solved symbol that fits once the model is
    /// optimized (chunked and planned, as `memplan optimize --budget` does); one plan per probe.
    /// The value is found by doubling then bisecting; the chunking chosen changes with the value,
    /// so the optimized peak is not always monotone in it: the answer is a value that fits next to
    /// one that does not (both reported), and some larger value may fit too.
    #[arg(long, requires = "budget")]
    pub optimized: bool,
    /// Sweep one symbol: `N=64..8192` doubles, `N=64..512:64` steps by 64.
    #[arg(long, value_name = "SYM=A..B[:STEP]")]
    pub sweep: Option<String>,
    /// Print JSON instead of the report.
    #[arg(long)]
    pub json: bool,
    /// Write a memory-over-time plot (SVG).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// How many live tensors to list (0 = all).
    #[arg(long, default_value_t = 12)]
    pub top: usize,
}

/// A parsed `--sweep`.
#[derive(Debug, PartialEq)]
pub struct Sweep {
    pub sym: String,
    pub values: Vec<i64>,
}

/// Parses `SYM=A..B` (doubling from A) or `SYM=A..B:STEP`; at most 10,000 points.
pub fn parse_sweep(s: &str) -> Result<Sweep> {
    let err = || {
        anyhow::Error::new(crate::UsageError(format!(
            "--sweep '{s}': expected SYM=A..B or SYM=A..B:STEP with 1 <= A <= B, e.g. N=64..8192"
        )))
    };
    let (sym, range) = s.split_once('=').ok_or_else(err)?;
    let (range, step) = match range.split_once(':') {
        Some((r, st)) => (
            r,
            Some(
                st.trim()
                    .replace('_', "")
                    .parse::<i64>()
                    .map_err(|_| err())?,
            ),
        ),
        None => (range, None),
    };
    let (a, b) = range.split_once("..").ok_or_else(err)?;
    let a: i64 = a.trim().replace('_', "").parse().map_err(|_| err())?;
    let b: i64 = b.trim().replace('_', "").parse().map_err(|_| err())?;
    if a < 1 || b < a || step.is_some_and(|s| s < 1) || sym.trim().is_empty() {
        return Err(err());
    }
    let mut values = Vec::new();
    let mut x = a;
    while x <= b {
        if values.len() == 10_000 {
            crate::usage_bail!("--sweep '{s}' has more than 10,000 points; use a larger step");
        }
        values.push(x);
        x = match step {
            Some(st) => x.saturating_add(st),
            None => x.saturating_mul(2),
        };
        if x == i64::MAX {
            break;
        }
    }
    Ok(Sweep {
        sym: sym.trim().to_string(),
        values,
    })
}

fn model_symbols(facts: &Facts) -> Vec<String> {
    let mut v = facts.symbols.declared.clone();
    v.extend(facts.symbols.introduced.iter().map(|s| s.name.clone()));
    v
}

/// `dims` less those the model was pinned at ([`Model::pin_dims`]: an optimized file holds
/// constants made at its dims, and its inputs are fixed there). A pinned dim given at another
/// value is refused, naming both.
pub fn unpinned(model: &Model, dims: &BTreeMap<String, i64>) -> Result<BTreeMap<String, i64>> {
    unpinned_along(model, dims, &[])
}

/// [`unpinned`], and each flag of `along` (`("--sweep", "N")`) that varies a pinned symbol is
/// refused too.
fn unpinned_along(
    model: &Model,
    dims: &BTreeMap<String, i64>,
    along: &[(&str, &str)],
) -> Result<BTreeMap<String, i64>> {
    let pinned = model.pinned_dims().map_err(|e| anyhow!(e))?;
    let refuse = |what: String, k: &str, at: i64, instead: String| {
        anyhow::Error::new(crate::UsageError(format!(
            "{what}: the model was optimized at {k}={at} and holds constants made there (its \
             inputs are fixed at that size); {instead}"
        )))
    };
    let mut out = dims.clone();
    for (k, &at) in &pinned {
        match out.remove(k) {
            Some(v) if v != at => {
                let instead = format!("optimize the original model at {k}={v}");
                return Err(refuse(format!("--dim {k}={v}"), k, at, instead));
            }
            _ => {}
        }
    }
    for &(flag, sym) in along {
        if let Some(&at) = pinned.get(sym) {
            let instead = format!("{} the original model instead", &flag[2..]);
            return Err(refuse(format!("{flag} {sym}"), sym, at, instead));
        }
    }
    Ok(out)
}

/// Every symbol must be given (the swept one by the sweep), and every given name must be a symbol.
pub(crate) fn check_dims(
    facts: &Facts,
    dims: &BTreeMap<String, i64>,
    sweep: Option<&str>,
    solve: Option<&str>,
) -> Result<()> {
    let free = model_symbols(facts);
    crate::units::check_declared_positive(dims, &facts.symbols.declared)
        .map_err(|e| anyhow::Error::new(crate::UsageError(e)))?;
    let known = |k: &str| free.iter().any(|s| s == k);
    let list = || {
        if free.is_empty() {
            "none".to_string()
        } else {
            free.join(", ")
        }
    };
    for k in dims.keys() {
        if !known(k) {
            crate::usage_bail!(
                "--dim {k}: the model has no symbol '{k}' (its symbols: {})",
                list()
            );
        }
    }
    for (flag, s) in [("--sweep", sweep), ("--solve", solve)] {
        if let Some(s) = s {
            if !known(s) {
                crate::usage_bail!(
                    "{flag} {s}: the model has no symbol '{s}' (its symbols: {})",
                    list()
                );
            }
        }
    }
    let missing: Vec<&String> = free
        .iter()
        .filter(|s| !dims.contains_key(*s) && Some(s.as_str()) != sweep)
        .collect();
    if !missing.is_empty() {
        let names: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
        let flags: Vec<String> = names.iter().map(|s| format!("--dim {s}=...")).collect();
        let data_dependent = names
            .iter()
            .filter(|n| facts.symbols.introduced.iter().any(|s| s.name == **n))
            .count();
        crate::usage_bail!(
            "missing dims: {} (give {}){}",
            names.join(", "),
            flags.join(" "),
            if data_dependent > 0 {
                "; sizes made from the data are known once it runs: `memplan run --json` lists \
                 them under \"dims\", and `--dim @RUN.json` reads them all"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// What `memplan estimate` computes, its arguments parsed.
#[derive(Debug, Default)]
pub struct EstimateRequest {
    pub dims: BTreeMap<String, i64>,
    pub budget: Option<u64>,
    /// The symbol to grow for the formula and solve for with a budget.
    pub solve: Option<String>,
    /// With a budget: also the largest value that fits once optimized.
    pub optimized: bool,
    pub sweep: Option<Sweep>,
    /// Live tensors to list, largest first (0 = all, as the JSON report lists them).
    pub top: usize,
}

/// An estimate at one point, or a sweep.
#[derive(Debug)]
pub enum EstimateOutcome {
    Point {
        estimate: Box<Estimate>,
        /// With `optimized` and a budget: the largest value that fits once chunked and planned.
        optimized: Option<OptimizedFit>,
    },
    Sweep(Box<SweepReport>),
}

/// A sweep of one symbol: one estimate per value, the formula along it, and the largest value that
/// fits the budget.
#[derive(Debug)]
pub struct SweepReport {
    pub symbol: String,
    pub dims: BTreeMap<String, i64>,
    pub budget: Option<u64>,
    /// Per value: the estimate and the exact formula's peak there (`None` when it overflows).
    pub rows: Vec<(i64, Estimate, Option<i64>)>,
    pub formula: Option<FormulaReport>,
    pub max_fitting: Option<MaxFitting>,
    /// The first swept value the model does not type-check at, and why (the node and the rule
    /// broken): the rows stop before it.
    pub rejected_from: Option<(i64, String)>,
}

impl EstimateOutcome {
    /// [`EstimateOutcome::to_json`] as compact text, without building the value first where the
    /// report is one `Estimate` (the same object; keys in field order).
    pub fn to_json_string(&self) -> Result<String> {
        match self {
            EstimateOutcome::Point {
                estimate,
                optimized: None,
            } => Ok(serde_json::to_string(estimate)?),
            _ => Ok(serde_json::to_string(&self.to_json()?)?),
        }
    }

    /// The report `memplan estimate --json` prints.
    pub fn to_json(&self) -> Result<serde_json::Value> {
        match self {
            EstimateOutcome::Point {
                estimate,
                optimized,
            } => {
                let mut j = serde_json::to_value(estimate)?;
                if let (Some(o), Some(obj)) = (optimized, j.as_object_mut()) {
                    obj.insert("max_fitting_optimized".into(), serde_json::to_value(o)?);
                }
                Ok(j)
            }
            EstimateOutcome::Sweep(sw) => {
                let arr: Vec<serde_json::Value> = sw
                    .rows
                    .iter()
                    .map(|(v, e, f)| {
                        serde_json::json!({
                            "value": v, "peak_bytes": e.peak_bytes, "arena_bytes": e.arena_bytes,
                            "peak_step": e.peak_step, "peak_node": e.peak_node, "formula_bytes": f, "fits": e.fits,
                        })
                    })
                    .collect();
                Ok(serde_json::json!({
                    "symbol": sw.symbol, "dims": sw.dims, "budget_bytes": sw.budget, "rows": arr,
                    "formula": sw.formula, "max_fitting": sw.max_fitting,
                    "rejected_from": sw.rejected_from.as_ref().map(|(v, why)| {
                        serde_json::json!({"value": v, "reason": why})
                    }),
                }))
            }
        }
    }
}

/// The facts at `dims`: the model's symbolic `facts`, or, where those lack facts for want of
/// known contents (shape arithmetic with no formula over the symbols) and `dims` names every
/// declared symbol, the facts inferred at that point ([`memplan_ir::infer_model_at`]).
///
/// When `dims` names every declared symbol, the model is inferred at that point first, and dims
/// at which it does not type-check are refused, naming the node: symbolic inference broadcasts
/// two different dims to their larger (exact for every input the model accepts), so it cannot
/// see that, say, a sequence longer than a 256-row position table makes an `Add` of `[1, S, 64]`
/// and `[1, 256, 64]` fail.
pub fn facts_at<'a>(
    model: &Model,
    facts: &'a Facts,
    dims: &BTreeMap<String, i64>,
) -> Result<std::borrow::Cow<'a, Facts>> {
    let declared = &facts.symbols.declared;
    // Dims below 1 are refused by name where the command checks its dims.
    let point = !declared.is_empty()
        && declared.iter().all(|d| dims.contains_key(d))
        && dims.values().all(|&v| v >= 1);
    let at = if point {
        Some(inferred_at(model, dims)?)
    } else {
        None
    };
    if !memplan_ir::wants_point(facts, dims) {
        return Ok(std::borrow::Cow::Borrowed(facts));
    }
    Ok(std::borrow::Cow::Owned(match at {
        Some(at) => at,
        None => memplan_ir::infer_model_at(model, dims)?,
    }))
}

/// Refuses a model with nodes that have no shape rule, naming the first; `what` is the verb
/// (`estimate`, `plan`, `run`).
pub fn check_inferred(facts: &Facts, what: &str) -> Result<()> {
    if let Some(s) = facts.skipped.first() {
        return Err(anyhow::Error::new(crate::UnsupportedError(format!(
            "cannot {what}: {} node(s) have no shape rule, first {}: {}",
            facts.skipped.len(),
            s.label,
            s.reason
        ))));
    }
    Ok(())
}

/// The library entry of `memplan estimate`: the estimate (or sweep) of a loaded model.
pub fn estimate_model(
    model: &Model,
    facts: &Facts,
    req: &EstimateRequest,
) -> Result<EstimateOutcome> {
    let along: Vec<(&str, &str)> = req
        .sweep
        .as_ref()
        .map(|s| ("--sweep", s.sym.as_str()))
        .into_iter()
        .chain(req.solve.as_deref().map(|s| ("--solve", s)))
        .collect();
    let dims = &unpinned_along(model, &req.dims, &along)?;
    let facts = &*facts_at(model, facts, dims)?;
    check_inferred(facts, "estimate")?;
    check_dims(
        facts,
        dims,
        req.sweep.as_ref().map(|s| s.sym.as_str()),
        req.solve.as_deref(),
    )?;
    let an = Analysis::new(&model.graph, facts, &facts.order)?;
    if let Some(sw) = &req.sweep {
        let report = sweep(model, &an, dims, req.budget, sw)?;
        return Ok(EstimateOutcome::Sweep(Box::new(report)));
    }
    let opts = EstimateOptions {
        budget: req.budget,
        solve_for: req.solve.clone(),
        live_limit: req.top,
        no_formula: false,
    };
    let mut e = an.at(dims, &opts)?;
    if let Some(m) = e.max_fitting.as_mut() {
        cap_to_accepted(model, &an, dims, m)?;
    }
    let optimized = match (req.optimized, req.budget, &e.max_fitting) {
        (true, Some(b), Some(m)) => {
            let mut rest = dims.clone();
            rest.remove(&m.symbol);
            let start = m.value.unwrap_or(1);
            Some(crate::optimize::max_fitting_optimized(
                model, &rest, &m.symbol, b, start,
            )?)
        }
        _ => None,
    };
    Ok(EstimateOutcome::Point {
        estimate: Box::new(e),
        optimized,
    })
}

/// The facts of `model` inferred at `dims` ([`memplan_ir::infer_model_at`]), or an error naming
/// the dims and the node where it does not type-check there.
fn inferred_at(model: &Model, dims: &BTreeMap<String, i64>) -> Result<Facts> {
    memplan_ir::infer_model_at(model, dims).map_err(|e| {
        let d: Vec<String> = dims.iter().map(|(k, v)| format!("{k}={v}")).collect();
        anyhow!("the model does not type-check at {}: {e}", d.join(" "))
    })
}

/// The smallest value of `sym` in `lo + 1..=hi` (the other symbols at `dims`) at which `model`
/// does not type-check, with the reason (the node and the rule broken), given that it does at
/// `lo`; `None` when it does at `hi`, or does not at `lo` (nothing is claimed then). Found by
/// bisection: the values a model accepts are taken to run up to a limit (a position table the
/// sequence indexes), as they do in every model seen.
pub(crate) fn first_rejected(
    model: &Model,
    dims: &BTreeMap<String, i64>,
    sym: &str,
    lo: i64,
    hi: i64,
) -> Option<(i64, String)> {
    let reject = |x: i64| {
        let mut d = dims.clone();
        d.insert(sym.to_string(), x);
        memplan_ir::infer_model_at(model, &d)
            .err()
            .map(|e| e.to_string())
    };
    let mut why = reject(hi)?;
    if lo >= hi || reject(lo).is_some() {
        return None;
    }
    let (mut ok, mut bad) = (lo, hi);
    while bad - ok > 1 {
        let mid = ok + (bad - ok) / 2;
        match reject(mid) {
            Some(w) => (bad, why) = (mid, w),
            None => ok = mid,
        }
    }
    Some((bad, why))
}

/// Lowers the largest fitting value the peak formula gives to the largest at which the model
/// type-checks, when it does not at the formula's answer (a sequence longer than the model's
/// position table), searching up from the value given with `--dim` (or 1).
fn cap_to_accepted(
    model: &Model,
    an: &Analysis,
    dims: &BTreeMap<String, i64>,
    m: &mut memplan_sim::estimate::MaxFitting,
) -> Result<()> {
    let Some(v) = m.value else {
        return Ok(());
    };
    let lo = dims.get(&m.symbol).copied().unwrap_or(1).min(v);
    let Some((bad, why)) = first_rejected(model, dims, &m.symbol, lo, v + 1) else {
        return Ok(());
    };
    if bad > v {
        // The model takes the answer; only the next value is rejected.
        m.type_error_above = Some(why);
        m.peak_at_next = None;
        return Ok(());
    }
    let mut at = dims.clone();
    at.insert(m.symbol.clone(), bad - 1);
    m.value = Some(bad - 1);
    m.peak_at_value = an.simulate_peak(&at)?;
    m.peak_at_next = None;
    m.type_error_above = Some(why);
    Ok(())
}

/// The exact peak at `dims` (every symbol given), by the symbolic peak formula over the graph's
/// own order: what `estimate` reports as `peak_bytes` at those dims.
pub fn peak_at(model: &Model, facts: &Facts, dims: &BTreeMap<String, i64>) -> Result<u64> {
    let dims = &unpinned(model, dims)?;
    let facts = &*facts_at(model, facts, dims)?;
    check_inferred(facts, "estimate")?;
    check_dims(facts, dims, None, None)?;
    let an = Analysis::new(&model.graph, facts, &facts.order)?;
    an.simulate_peak(dims)?
        .ok_or_else(|| anyhow!("the peak at {dims:?} overflows 64 bits"))
}

pub fn estimate(a: EstimateArgs) -> Result<()> {
    let (model, facts) = load(&a.model)?;
    let dims = parse_dims(&a.dims).map_err(|e| anyhow!(e))?;
    let budget = a
        .budget
        .as_deref()
        .map(parse_size)
        .transpose()
        .map_err(|e| anyhow!(e))?;
    let sweep = a.sweep.as_deref().map(parse_sweep).transpose()?;
    let req = EstimateRequest {
        dims,
        budget,
        solve: a.solve.clone(),
        optimized: a.optimized,
        sweep,
        top: if a.json { 0 } else { a.top },
    };
    let out = estimate_model(&model, &facts, &req)?;
    if let (EstimateOutcome::Point { estimate: e, .. }, Some(p)) = (&out, &a.plot) {
        crate::plot::write_svg(p, &a.model, e, &model.graph)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out.to_json()?)?);
        return Ok(());
    }
    match &out {
        EstimateOutcome::Point {
            estimate,
            optimized,
        } => {
            print!("{}", render_estimate(&a.model, estimate));
            if let Some(o) = optimized {
                println!("{}", crate::optimize::optimized_fit_line(o));
            }
        }
        EstimateOutcome::Sweep(sw) => print!("{}", render_sweep(&a.model, sw)),
    }
    Ok(())
}

fn sweep(
    model: &Model,
    an: &Analysis,
    dims: &BTreeMap<String, i64>,
    budget: Option<u64>,
    sw: &Sweep,
) -> Result<SweepReport> {
    let (first, last) = (sw.values[0], sw.values[sw.values.len() - 1]);
    let mut at_first = dims.clone();
    at_first.insert(sw.sym.clone(), first);
    inferred_at(model, &at_first)?;
    let rejected_from = first_rejected(model, dims, &sw.sym, first, last);
    let mut rows: Vec<(i64, Estimate, Option<i64>)> = Vec::new();
    for &v in sw
        .values
        .iter()
        .take_while(|&&v| rejected_from.as_ref().is_none_or(|(r, _)| v < *r))
    {
        let mut d = dims.clone();
        d.insert(sw.sym.clone(), v);
        let opts = EstimateOptions {
            budget,
            solve_for: None,
            live_limit: 1,
            no_formula: true,
        };
        let e = an.at(&d, &opts)?;
        let formula_peak = an.formula.eval(&d).ok().map(|(p, _)| p);
        rows.push((v, e, formula_peak));
    }
    // The formula along the swept symbol, the others at their given dims (or the sweep's first point).
    let mut base = dims.clone();
    base.insert(sw.sym.clone(), sw.values[0]);
    let formula = an.formula_report(&sw.sym, &base)?;
    let max_fitting = match budget {
        Some(b) => {
            let mut m = an.max_fitting(&sw.sym, &base, b)?;
            cap_to_accepted(model, an, &base, &mut m)?;
            Some(m)
        }
        None => None,
    };
    Ok(SweepReport {
        symbol: sw.sym.clone(),
        dims: dims.clone(),
        budget,
        rows,
        formula,
        max_fitting,
        rejected_from,
    })
}

/// The terminal report of a sweep.
pub fn render_sweep(path: &Path, sw: &SweepReport) -> String {
    let mut out = String::new();
    let mut header = vec![sw.symbol.as_str(), "peak", "arena", "peak node"];
    let mut right = vec![true, true, true, false];
    if sw.budget.is_some() {
        header.push("fits");
        right.push(false);
    }
    let mut t = Table::new(&header, &right);
    for (v, e, _) in &sw.rows {
        let mut r = vec![
            v.to_string(),
            human(e.peak_bytes),
            human(e.arena_bytes),
            e.peak_node.clone().unwrap_or_default(),
        ];
        if let Some(f) = e.fits {
            r.push(if f { "yes".into() } else { "no".into() });
        }
        t.row(r);
    }
    let fixed: Vec<String> = sw
        .dims
        .iter()
        .filter(|(k, _)| **k != sw.symbol)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    out.push_str(&format!(
        "model       {}   sweep {}{}\n",
        path.display(),
        sw.symbol,
        if fixed.is_empty() {
            String::new()
        } else {
            format!("   dims: {}", fixed.join(" "))
        }
    ));
    out.push_str(&t.render());
    if let Some(f) = &sw.formula {
        out.push_str(&format!(
            "\nformula     {}\n            at {}\n",
            f.text, f.node
        ));
    }
    if let Some((v, why)) = &sw.rejected_from {
        out.push_str(&format!(
            "\nfrom {}={v} the model does not type-check: {why}\n",
            sw.symbol
        ));
    }
    if let (Some(b), Some(m)) = (sw.budget, &sw.max_fitting) {
        out.push_str(&format!("\nbudget      {}\n", human(b)));
        out.push_str(&format!("{}\n", max_fit_line(m)));
    }
    out
}

fn max_fit_line(m: &memplan_sim::estimate::MaxFitting) -> String {
    match (m.value, m.unbounded) {
        (Some(v), _) if m.type_error_above.is_some() => format!(
            "largest {} that fits: {v}   (peak {} at {}={v}; the model does not type-check at \
             {}={}: {})",
            m.symbol,
            m.peak_at_value.map(human).unwrap_or_default(),
            m.symbol,
            m.symbol,
            v + 1,
            m.type_error_above.as_deref().unwrap_or_default()
        ),
        (Some(v), _) => format!(
            "largest {} that fits: {v}   (peak {} at {}={v}, {} at {}={})",
            m.symbol,
            m.peak_at_value.map(human).unwrap_or_default(),
            m.symbol,
            m.peak_at_next
                .map(human)
                .unwrap_or_else(|| "> 8 EiB".into()),
            m.symbol,
            v + 1
        ),
        (None, true) => format!(
            "fits for every {} up to 2^40 (the peak barely grows with it)",
            m.symbol
        ),
        (None, false) => format!(
            "no {} fits: even {}=1 needs {}",
            m.symbol,
            m.symbol,
            m.peak_at_next.map(human).unwrap_or_default()
        ),
    }
}

/// The terminal report of one estimate.
pub fn render_estimate(path: &Path, e: &Estimate) -> String {
    let mut out = String::new();
    let dims: Vec<String> = e.dims.iter().map(|(k, v)| format!("{k}={v}")).collect();
    out.push_str(&format!(
        "model       {}   dims: {}\n",
        path.display(),
        if dims.is_empty() {
            "-".into()
        } else {
            dims.join(" ")
        }
    ));
    out.push_str(&format!(
        "peak        {}  ({} B, liveness)\n",
        human(e.peak_bytes),
        e.peak_bytes
    ));
    if let Some(n) = &e.peak_node {
        out.push_str(&format!(
            "at          step {} of {}: {}\n",
            e.peak_step.unwrap_or(0),
            e.steps,
            n
        ));
    }
    out.push_str(&format!(
        "arena       {}  best-fit placement of activations, outputs and scratch; lower bound {}, fragmentation {:.1}%\n",
        human(e.arena_bytes),
        human(e.arena_lower_bound),
        e.fragmentation * 100.0
    ));
    out.push_str(&format!(
        "placed      {}  (resident weights and inputs {} + arena)\n",
        human(e.placed_total_bytes),
        human(e.resident_bytes)
    ));
    let b = &e.breakdown;
    out.push_str("\nbreakdown at the peak\n");
    let mut t = Table::new(&["category", "bytes", "share"], &[false, true, true]);
    let total = b.total().max(1) as f64;
    for (k, v) in [
        ("weights", b.weights),
        ("inputs", b.inputs),
        ("activations", b.activations),
        ("outputs", b.outputs),
        ("scratch", b.scratch),
    ] {
        t.row(vec![
            k.to_string(),
            human(v),
            format!("{:.1}%", v as f64 / total * 100.0),
        ]);
    }
    t.row(vec!["total".into(), human(b.total()), String::new()]);
    out.push_str(&t.render());
    out.push_str("\nlive at the peak (largest first)\n");
    let mut t = Table::new(
        &[
            "tensor",
            "shape",
            "type",
            "bytes",
            "made by",
            "last read by",
        ],
        &[false, false, false, true, false, false],
    );
    for l in &e.live_at_peak {
        let shape = if l.shape.is_empty() && l.symbolic_shape.is_empty() {
            String::new()
        } else {
            let dims: Vec<String> = l.shape.iter().map(|d| d.to_string()).collect();
            format!("[{}]", dims.join(", "))
        };
        t.row(vec![
            l.name.clone(),
            shape,
            l.dtype.clone(),
            human(l.bytes),
            l.producer
                .clone()
                .unwrap_or_else(|| format!("({})", l.category)),
            l.last_consumer.clone().unwrap_or_default(),
        ]);
    }
    out.push_str(&t.render());
    if let Some(f) = &e.formula {
        out.push_str(&format!("\nformula     {}\n", f.text));
        out.push_str(&format!(
            "            at {}; exact: {} bytes\n",
            f.node, f.dominant
        ));
        if !f.exact {
            out.push_str(
                "            (regime bound sampled: sizes are not polynomial in the symbol)\n",
            );
        }
    }
    if let (Some(bud), Some(fits)) = (e.budget_bytes, e.fits) {
        out.push_str(&format!(
            "\nbudget      {}: {} (peak {})\n",
            human(bud),
            if fits { "fits" } else { "does NOT fit" },
            human(e.peak_bytes)
        ));
        if let Some(m) = &e.max_fitting {
            out.push_str(&max_fit_line(m));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps() {
        assert_eq!(
            parse_sweep("N=64..512").unwrap().values,
            vec![64, 128, 256, 512]
        );
        assert_eq!(
            parse_sweep("N=64..300:100").unwrap().values,
            vec![64, 164, 264]
        );
        assert_eq!(
            parse_sweep(" S = 1..1").unwrap(),
            Sweep {
                sym: "S".into(),
                values: vec![1]
            }
        );
        for bad in ["N", "N=0..4", "N=8..4", "N=1..4:0", "=1..4", "N=a..b"] {
            assert!(parse_sweep(bad).is_err(), "{bad}");
        }
        assert!(parse_sweep("N=1..100000:1")
            .unwrap_err()
            .to_string()
            .contains("10,000"));
    }
}
