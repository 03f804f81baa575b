//! Subcommand implementations: argument structs and the glue from the libraries to the terminal.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;

use memplan_ir::infer::Facts;
use memplan_ir::summary::{port_shape, summarize};
use memplan_ir::Model;
use memplan_sim::estimate::{estimate as run_estimate, Estimate, EstimateOptions};

use crate::table::Table;
use crate::units::{human, parse_dims, parse_size};

/// Loads a model and infers its facts; errors name the file.
pub fn load(path: &PathBuf) -> Result<(Model, Facts)> {
    let model = memplan_onnx::import(path)?;
    let facts = memplan_ir::infer_model(&model).with_context(|| format!("{}", path.display()))?;
    Ok((model, facts))
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The ONNX model.
    pub model: PathBuf,
    /// Print JSON instead of the report.
    #[arg(long)]
    pub json: bool,
}

pub fn inspect(a: InspectArgs) -> Result<()> {
    let (model, facts) = load(&a.model)?;
    let s = summarize(&model, &facts);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(());
    }
    let mut out = String::new();
    out.push_str(&format!("model      {}\n", a.model.display()));
    let opsets: Vec<String> = s.opsets.iter().map(|(d, v)| format!("{d} {v}")).collect();
    out.push_str(&format!("ir         {}   opsets: {}\n", s.ir_version, opsets.join(", ")));
    if !s.producer.is_empty() {
        out.push_str(&format!("producer   {}\n", s.producer));
    }
    out.push_str(&format!("nodes      {}\n", s.nodes));
    out.push_str(&format!("weights    {} tensors, {}\n", s.weight_count, human(s.weight_bytes)));
    out.push_str(&format!("symbols    {}\n", if s.symbols.is_empty() { "(none)".into() } else { s.symbols.join(", ") }));
    for (title, ports) in [("inputs", &s.inputs), ("outputs", &s.outputs)] {
        out.push_str(&format!("\n{title}\n"));
        let mut t = Table::new(&["name", "type", "shape"], &[false, false, false]);
        for p in ports {
            t.row(vec![p.name.clone(), p.dtype.clone().unwrap_or_else(|| "?".into()), port_shape(p)]);
        }
        out.push_str(&t.render());
    }
    out.push_str("\nops\n");
    let mut hist: Vec<(&String, &usize)> = s.op_histogram.iter().collect();
    hist.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let mut t = Table::new(&["op", "count"], &[false, true]);
    for (op, c) in hist {
        t.row(vec![op.clone(), c.to_string()]);
    }
    out.push_str(&t.render());
    if !s.symbols_introduced.is_empty() {
        out.push_str("\nsymbols introduced\n");
        for n in &s.symbols_introduced {
            out.push_str(&format!("  {}: {}\n", n.name, n.reason));
        }
    }
    if !s.aliases.is_empty() {
        out.push_str("\nfile dim names unified\n");
        for al in &s.aliases {
            out.push_str(&format!("  {} = {}\n", al.name, al.expr));
        }
    }
    if s.unsupported.is_empty() {
        out.push_str("\nunsupported: none\n");
    } else {
        out.push_str(&format!("\nunsupported ({} nodes)\n", s.unsupported.len()));
        for u in &s.unsupported {
            out.push_str(&format!("  {} ({}): {}\n", if u.node.is_empty() { "<unnamed>" } else { &u.node }, u.op, u.reason));
        }
    }
    print!("{out}");
    Ok(())
}

#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// The ONNX model to read.
    pub model: PathBuf,
    /// Where to write the re-serialized model.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Write every tensor's bytes into this side file (relative to the output's directory).
    #[arg(long, conflicts_with = "inline_data")]
    pub external_data: Option<String>,
    /// Keep every tensor inside the model file.
    #[arg(long)]
    pub inline_data: bool,
}

pub fn convert(a: ConvertArgs) -> Result<()> {
    let model = memplan_onnx::import(&a.model)?;
    let mode = match &a.external_data {
        Some(f) => memplan_onnx::ExternalData::File(f.clone()),
        None => memplan_onnx::ExternalData::Inline,
    };
    memplan_onnx::save(&model, &a.output, mode)?;
    eprintln!("wrote {}", a.output.display());
    Ok(())
}

#[derive(Args, Debug)]
pub struct EstimateArgs {
    /// The ONNX model.
    pub model: PathBuf,
    /// A value for a symbolic dim, e.g. `--dim N=512` (repeatable).
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    pub dims: Vec<String>,
    /// Memory budget, e.g. 80GiB, 512MiB, 80GB or bytes.
    #[arg(long)]
    pub budget: Option<String>,
    /// Symbol to solve for with --budget (default: the first free symbol).
    #[arg(long, value_name = "NAME")]
    pub solve: Option<String>,
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

struct Sweep {
    sym: String,
    values: Vec<i64>,
}

fn parse_sweep(s: &str) -> Result<Sweep> {
    let err = || anyhow!("--sweep '{s}': expected SYM=A..B or SYM=A..B:STEP, e.g. N=64..8192");
    let (sym, range) = s.split_once('=').ok_or_else(err)?;
    let (range, step) = match range.split_once(':') {
        Some((r, st)) => (r, Some(st.trim().parse::<i64>().map_err(|_| err())?)),
        None => (range, None),
    };
    let (a, b) = range.split_once("..").ok_or_else(err)?;
    let a: i64 = a.trim().parse().map_err(|_| err())?;
    let b: i64 = b.trim().parse().map_err(|_| err())?;
    if a < 1 || b < a || step.is_some_and(|s| s < 1) {
        return Err(err());
    }
    let mut values = Vec::new();
    let mut x = a;
    while x <= b && values.len() < 10_000 {
        values.push(x);
        x = match step {
            Some(st) => x + st,
            None => x * 2,
        };
    }
    Ok(Sweep { sym: sym.trim().to_string(), values })
}

fn check_dims(facts: &Facts, free: &[String], dims: &BTreeMap<String, i64>, sweep: Option<&str>) -> Result<()> {
    let missing: Vec<&String> = free.iter().filter(|s| !dims.contains_key(*s) && Some(s.as_str()) != sweep).collect();
    if !missing.is_empty() {
        let names: Vec<String> = missing.iter().map(|s| format!("--dim {s}=...")).collect();
        bail!("missing dims: give {}", names.join(" "));
    }
    for k in dims.keys() {
        let known = facts.symbols.declared.contains(k) || facts.symbols.introduced.iter().any(|s| &s.name == k);
        if !known {
            bail!(
                "--dim {k}: the model has no symbol '{k}' (its symbols: {})",
                facts.symbols.declared.join(", ")
            );
        }
    }
    Ok(())
}

pub fn estimate(a: EstimateArgs) -> Result<()> {
    let (model, facts) = load(&a.model)?;
    let dims = parse_dims(&a.dims).map_err(|e| anyhow!(e))?;
    let budget = a.budget.as_deref().map(parse_size).transpose().map_err(|e| anyhow!(e))?;
    let sweep = a.sweep.as_deref().map(parse_sweep).transpose()?;
    if !facts.skipped.is_empty() {
        let s = &facts.skipped[0];
        bail!(
            "cannot estimate: {} node(s) have no shape rule, first {}: {}",
            facts.skipped.len(),
            s.label,
            s.reason
        );
    }
    let free: Vec<String> = {
        let mut v = facts.symbols.declared.clone();
        v.extend(facts.symbols.introduced.iter().map(|s| s.name.clone()));
        v
    };
    check_dims(&facts, &free, &dims, sweep.as_ref().map(|s| s.sym.as_str()))?;
    let opts = EstimateOptions { budget, solve_for: a.solve.clone(), live_limit: if a.json { 0 } else { a.top } };
    let g = &model.graph;

    if let Some(sw) = sweep {
        let mut rows = Vec::new();
        for &v in &sw.values {
            let mut d = dims.clone();
            d.insert(sw.sym.clone(), v);
            let e = run_estimate(g, &facts, &facts.order, &d, &EstimateOptions { live_limit: 1, ..opts.clone() })?;
            rows.push((v, e));
        }
        if a.json {
            let arr: Vec<serde_json::Value> = rows
                .iter()
                .map(|(v, e)| {
                    serde_json::json!({
                        "value": v, "peak_bytes": e.peak_bytes, "arena_bytes": e.arena_bytes,
                        "peak_node": e.peak_node, "fits": e.fits,
                    })
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({"symbol": sw.sym, "rows": arr}))?);
        } else {
            let mut t = Table::new(&[&sw.sym, "peak", "arena", "peak node"], &[true, true, true, false]);
            for (v, e) in &rows {
                t.row(vec![v.to_string(), human(e.peak_bytes), human(e.arena_bytes), e.peak_node.clone().unwrap_or_default()]);
            }
            print!("{}", t.render());
        }
        return Ok(());
    }

    let e = run_estimate(g, &facts, &facts.order, &dims, &opts)?;
    if let Some(p) = &a.plot {
        crate::plot::write_svg(p, &a.model, &e, g).with_context(|| format!("writing {}", p.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&e)?);
    } else {
        print!("{}", render_estimate(&a.model, &e));
    }
    Ok(())
}

fn render_estimate(path: &std::path::Path, e: &Estimate) -> String {
    let mut out = String::new();
    let dims: Vec<String> = e.dims.iter().map(|(k, v)| format!("{k}={v}")).collect();
    out.push_str(&format!("model       {}   dims: {}\n", path.display(), if dims.is_empty() { "-".into() } else { dims.join(" ") }));
    out.push_str(&format!("peak        {}  ({} B)\n", human(e.peak_bytes), e.peak_bytes));
    if let Some(n) = &e.peak_node {
        out.push_str(&format!("at          step {} of {}: {}\n", e.peak_step.unwrap_or(0), e.steps, n));
    }
    out.push_str(&format!(
        "arena       {}  (best-fit placement; fragmentation {:.1}% over the activations' liveness peak)\n",
        human(e.arena_bytes),
        e.fragmentation * 100.0
    ));
    let b = &e.breakdown;
    out.push_str("\nbreakdown at the peak\n");
    let mut t = Table::new(&["category", "bytes"], &[false, true]);
    for (k, v) in [("weights", b.weights), ("inputs", b.inputs), ("activations", b.activations), ("outputs", b.outputs), ("scratch", b.scratch)] {
        t.row(vec![k.to_string(), human(v)]);
    }
    out.push_str(&t.render());
    out.push_str("\nlive at the peak (largest first)\n");
    let mut t = Table::new(&["tensor", "shape", "type", "bytes", "made by", "last read by"], &[false, false, false, true, false, false]);
    for l in &e.live_at_peak {
        t.row(vec![
            l.name.clone(),
            l.shape.clone(),
            l.dtype.clone(),
            human(l.bytes),
            l.producer.clone().unwrap_or_else(|| format!("({})", l.category)),
            l.last_consumer.clone().unwrap_or_default(),
        ]);
    }
    out.push_str(&t.render());
    if let Some(f) = &e.formula {
        out.push_str(&format!(
            "\nformula     peak = {} bytes   (dominant for {} >= {}; at {})\n",
            f.dominant,
            f.free_symbols.join(", "),
            f.valid_from,
            f.node
        ));
    }
    if let (Some(bud), Some(fits)) = (e.budget_bytes, e.fits) {
        out.push_str(&format!("\nbudget      {}: {}\n", human(bud), if fits { "fits" } else { "does NOT fit" }));
        if let Some(m) = &e.max_fitting {
            match (m.value, m.unbounded) {
                (Some(v), _) => out.push_str(&format!("largest {} that fits: {}\n", m.symbol, v)),
                (None, true) => out.push_str(&format!("fits for every {} (peak does not grow with it)\n", m.symbol)),
                (None, false) => out.push_str(&format!("no {} fits (even {}=1 is over budget)\n", m.symbol, m.symbol)),
            }
        }
    }
    out
}
