//! `memplan grad`: the training step of a model (forward outputs plus gradients) as one ONNX file.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

use memplan_grad::{GradSpec, Seed, Wrt};

use crate::commands::load;

/// How the differentiated output's gradient is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SeedArg {
    /// All ones: the gradient of the sum of the output's elements.
    Ones,
    /// An extra graph input `<output>_grad` of the output's type and shape.
    Input,
}

#[derive(Args, Debug)]
#[command(
    after_help = "The result computes the forward outputs plus one output `<name>_grad` per \
differentiated value. Every gradient rule is written with standard ONNX ops, so other runtimes run \
the training graph, and `memplan estimate` on it gives the training step's peak. Ops without a \
gradient rule are an error naming the node."
)]
pub struct GradArgs {
    /// The ONNX model.
    pub model: PathBuf,
    /// What to differentiate with respect to: `weights` (every float initializer), `inputs` (every
    /// float graph input), or comma-separated value names.
    #[arg(long, default_value = "weights")]
    pub wrt: String,
    /// The graph output to differentiate (default: the first output).
    #[arg(long)]
    pub of: Option<String>,
    /// The differentiated output's gradient.
    #[arg(long, value_enum, default_value_t = SeedArg::Ones)]
    pub seed: SeedArg,
    /// Where to write the training graph.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    pub json: bool,
}

fn parse_wrt(s: &str) -> Result<Wrt> {
    Ok(match s {
        "weights" => Wrt::Weights,
        "inputs" => Wrt::Inputs,
        _ => {
            let names: Vec<String> = s
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(String::from)
                .collect();
            if names.is_empty() {
                bail!("--wrt: give `weights`, `inputs` or value names");
            }
            Wrt::Names(names)
        }
    })
}

pub fn grad(a: GradArgs) -> Result<()> {
    let (model, facts) = load(&a.model)?;
    let spec = GradSpec {
        wrt: parse_wrt(&a.wrt)?,
        of: a.of.clone(),
        seed: match a.seed {
            SeedArg::Ones => Seed::Ones,
            SeedArg::Input => Seed::Input,
        },
    };
    let gm = memplan_grad::grad(&model, &facts, &spec)
        .with_context(|| format!("{}", a.model.display()))?;
    memplan_ir::infer_model(&gm.model).context("the training graph does not type-check")?;
    memplan_onnx::save(&gm.model, &a.output, memplan_onnx::ExternalData::Inline)?;
    if a.json {
        let grads: Vec<serde_json::Value> = gm
            .grads
            .iter()
            .map(|g| serde_json::json!({"wrt": g.wrt, "output": g.output}))
            .collect();
        let j = serde_json::json!({
            "model": a.model.display().to_string(),
            "output": a.output.display().to_string(),
            "of": gm.of,
            "seed_input": gm.seed_input,
            "gradients": grads,
            "forward_nodes": model.graph.nodes.len(),
            "differentiated_nodes": gm.differentiated_nodes,
            "training_nodes": gm.model.graph.nodes.len(),
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        println!(
            "gradient of '{}' with respect to {} value(s); {} of {} forward nodes differentiated; {} nodes in the training graph",
            gm.of,
            gm.grads.len(),
            gm.differentiated_nodes,
            model.graph.nodes.len(),
            gm.model.graph.nodes.len()
        );
        if let Some(s) = &gm.seed_input {
            println!("seed input: {s}");
        }
        eprintln!("wrote {}", a.output.display());
    }
    Ok(())
}
