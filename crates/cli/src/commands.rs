//! Subcommand implementations: argument structs and the glue from the libraries to the terminal.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use memplan_ir::infer::Facts;
use memplan_ir::summary::{port_shape, summarize};
use memplan_ir::Model;

use crate::table::Table;
use crate::units::human;

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
    /// Infer at these dims, e.g. `--dim H=800` (repeatable): where shape arithmetic has no formula
    /// over the symbols (float arithmetic on sizes), the nodes it sizes get facts at that point.
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    pub dims: Vec<String>,
}

pub fn inspect(a: InspectArgs) -> Result<()> {
    let (model, facts) = load(&a.model)?;
    let dims = crate::units::parse_dims(&a.dims).map_err(|e| anyhow::anyhow!(e))?;
    let dims = crate::estimate::unpinned(&model, &dims)?;
    for k in dims.keys() {
        if !facts.symbols.declared.contains(k) {
            crate::usage_bail!(
                "--dim {k}: the model declares no symbol '{k}' (its symbols: {})",
                facts.symbols.declared.join(", ")
            );
        }
    }
    let facts = crate::estimate::facts_at(&model, &facts, &dims)?;
    let s = summarize(&model, &facts);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(());
    }
    let mut out = String::new();
    out.push_str(&format!("model      {}\n", a.model.display()));
    let opsets: Vec<String> = s.opsets.iter().map(|(d, v)| format!("{d} {v}")).collect();
    out.push_str(&format!(
        "ir         {}   opsets: {}\n",
        s.ir_version,
        opsets.join(", ")
    ));
    if !s.producer.is_empty() {
        out.push_str(&format!("producer   {}\n", s.producer));
    }
    out.push_str(&format!("nodes      {}\n", s.nodes));
    out.push_str(&format!(
        "weights    {} tensors, {}\n",
        s.weight_count,
        human(s.weight_bytes)
    ));
    out.push_str(&format!(
        "symbols    {}\n",
        if s.symbols.is_empty() {
            "(none)".into()
        } else {
            s.symbols.join(", ")
        }
    ));
    if !s.pinned_dims.is_empty() {
        let d: Vec<String> = s
            .pinned_dims
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        out.push_str(&format!(
            "pinned     {}   (optimized there: its inputs are fixed at those sizes)\n",
            d.join(" ")
        ));
    }
    for (title, ports) in [("inputs", &s.inputs), ("outputs", &s.outputs)] {
        out.push_str(&format!("\n{title}\n"));
        let mut t = Table::new(&["name", "type", "shape"], &[false, false, false]);
        for p in ports {
            t.row(vec![
                p.name.clone(),
                p.dtype.clone().unwrap_or_else(|| "?".into()),
                port_shape(p),
            ]);
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
            out.push_str(&format!(
                "  {} ({}): {}\n",
                if u.node.is_empty() {
                    "<unnamed>"
                } else {
                    &u.node
                },
                u.op,
                u.reason
            ));
        }
        if dims.is_empty()
            && !facts.symbols.declared.is_empty()
            && facts.skipped.iter().all(|k| k.unknown_input)
        {
            out.push_str(
                "  (contents no formula over the symbols gives, such as float arithmetic on sizes, \
                 are known at a point: give every symbol with --dim)\n",
            );
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
