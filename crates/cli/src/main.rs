//! The `memplan` command line: a thin clap layer, one subcommand per library entry point.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use memplan_cli::{commands, estimate, grad, optimize, run};

/// Counts the process heap so `run` can report its high-water mark.
#[global_allocator]
static ALLOC: memplan_exec::mem::CountingAlloc = memplan_exec::mem::CountingAlloc;

/// Predict and cut the peak memory of ONNX tensor programs.
#[derive(Parser, Debug)]
#[command(name = "memplan", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Show a model's interface with symbolic shapes, op histogram, weights, opsets and unsupported ops.
    Inspect(commands::InspectArgs),
    /// Re-serialize a model through memplan's IR (inlining local functions).
    Convert(commands::ConvertArgs),
    /// Predict peak memory before running: at given dims, as a formula, against a budget.
    Estimate(estimate::EstimateArgs),
    /// Run a model on CPU with memplan's executor: measured peak, time, outputs, comparison.
    Run(run::RunArgs),
    /// Plan memory at given dims: a better order, in-place reuse, one arena; write the reordered model and the plan.
    #[command(
        after_help = "Exit status: 0 when planned (and, with --budget, the plan fits); 1 on an error (a bad argument value included, and a budget below the floor no plan goes below: one line, nothing written); 2 when the command line does not parse; 3 when the budget is not met: the lowest plan reached is still written and the report says what holds it up (`--budget lowest` asks for that plan and exits 0)."
    )]
    Optimize(optimize::OptimizeArgs),
    /// Build the training step: forward outputs plus gradients, as one standard ONNX graph.
    Grad(grad::GradArgs),
}

fn main() -> ExitCode {
    // A reader that closes the pipe early (`memplan estimate --json | head`) ends the process
    // quietly, as it ends any Unix filter, instead of a panic on the next print.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of one signal, before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    // Inference folds constant nodes with the executor's kernels, whatever the command.
    memplan_exec::install_const_folder();
    let ok = |r: anyhow::Result<()>| r.map(|()| ExitCode::SUCCESS);
    let res = match cli.cmd {
        Cmd::Inspect(a) => ok(commands::inspect(a)),
        Cmd::Convert(a) => ok(commands::convert(a)),
        Cmd::Estimate(a) => ok(estimate::estimate(a)),
        Cmd::Run(a) => ok(run::run(a)),
        Cmd::Optimize(a) => optimize::optimize(a),
        Cmd::Grad(a) => ok(grad::grad(a)),
    };
    match res {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", memplan_cli::one_line(&e));
            ExitCode::FAILURE
        }
    }
}
