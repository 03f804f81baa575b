//! `memplan optimize`: plans a model at given dims (memory-aware order, in-place reuse, one arena),
//! writes the graph with its nodes in the planned order and the plan as JSON, and reports the peak
//! after each pass.
//!
//! With `-o`, the plan written by `--plan-out` is for the written model (node indices follow its
//! node list); without it, for the input model. Either way it has passed the independent checker,
//! and with `-o` it is checked again against the model read back from disk.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;

use memplan_ir::graph::NodeId;
use memplan_ir::infer::Facts;
use memplan_plan::{Options, Report};

use crate::commands::load;
use crate::table::Table;
use crate::units::{human, parse_dims};

#[derive(Args, Debug)]
pub struct OptimizeArgs {
    /// The ONNX model.
    pub model: PathBuf,
    /// A value for a symbolic dim, e.g. `--dim N=512` (repeatable; every symbol needs one).
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    pub dims: Vec<String>,
    /// Write the model with its nodes in the planned order.
    #[arg(short = 'o', long = "output", value_name = "OUT.onnx")]
    pub output: Option<PathBuf>,
    /// Write the plan (schedule, buffers with arena offsets, in-place decisions) as JSON.
    #[arg(long = "plan-out", value_name = "PLAN.json")]
    pub plan_out: Option<PathBuf>,
    /// Time for the exact schedule search, in milliseconds.
    #[arg(long, default_value_t = 300, value_name = "MS")]
    pub exact_ms: u64,
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
    #[serde(flatten)]
    report: &'a Report,
}

/// Every symbol of the model must be given, and every given name must be a symbol.
fn check_dims(facts: &Facts, dims: &BTreeMap<String, i64>) -> Result<()> {
    let mut syms = facts.symbols.declared.clone();
    syms.extend(facts.symbols.introduced.iter().map(|s| s.name.clone()));
    let list = if syms.is_empty() {
        "none".to_string()
    } else {
        syms.join(", ")
    };
    for k in dims.keys() {
        if !syms.contains(k) {
            bail!("--dim {k}: the model has no symbol '{k}' (its symbols: {list})");
        }
    }
    let missing: Vec<String> = syms
        .iter()
        .filter(|s| !dims.contains_key(*s))
        .map(|s| format!("--dim {s}=..."))
        .collect();
    if !missing.is_empty() {
        bail!("missing dims: give {}", missing.join(" "));
    }
    Ok(())
}

pub fn optimize(a: OptimizeArgs) -> Result<()> {
    let (model, facts) = load(&a.model)?;
    if !facts.skipped.is_empty() {
        let s = &facts.skipped[0];
        bail!(
            "cannot plan: {} node(s) have no shape rule, first {}: {}",
            facts.skipped.len(),
            s.label,
            s.reason
        );
    }
    let dims = parse_dims(&a.dims).map_err(|e| anyhow!(e))?;
    check_dims(&facts, &dims)?;
    let opts = Options {
        exact_time: Duration::from_millis(a.exact_ms),
        ..Options::default()
    };
    let t0 = Instant::now();
    let out = memplan_plan::optimize(&model.graph, &facts, &dims, &opts)
        .with_context(|| format!("{}", a.model.display()))?;
    let plan_ms = t0.elapsed().as_secs_f64() * 1e3;

    let mut plan = out.plan;
    if let Some(path) = &a.output {
        let schedule: Vec<NodeId> = plan.schedule.iter().map(|s| NodeId(s.node)).collect();
        let mut m2 = model.clone();
        m2.graph = memplan_plan::reorder(&model.graph, &schedule);
        memplan_onnx::save(&m2, path, memplan_onnx::default_mode(&model))
            .with_context(|| format!("writing {}", path.display()))?;
        plan = plan.renumbered_in_schedule_order();
        // The plan must hold for the model as it reads back from disk.
        let (back, back_facts) = load(path)?;
        memplan_plan::check(&back.graph, &back_facts, &plan)
            .with_context(|| format!("the plan for the written model {}", path.display()))?;
    }
    if let Some(path) = &a.plan_out {
        std::fs::write(path, plan.to_json() + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }

    let r = &out.report;
    if a.json {
        let j = JsonReport {
            model: a.model.display().to_string(),
            output: a.output.as_ref().map(|p| p.display().to_string()),
            plan: a.plan_out.as_ref().map(|p| p.display().to_string()),
            plan_ms,
            report: r,
        };
        println!("{}", serde_json::to_string_pretty(&j)?);
        return Ok(());
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
        human(r.arena_bytes - r.arena_lower_bound),
        human(r.resident_bytes),
        r.inplace
    ));
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
            human(c.arena_bytes),
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
    Ok(())
}
