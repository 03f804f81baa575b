//! Chunks a model to a budget and writes it: `chunk MODEL OUT.onnx NAME=VALUE... [--budget BYTES]`.
//! A development aid for the chunking pass; `memplan optimize` is the user-facing entry point.

use std::collections::BTreeMap;
use std::process::ExitCode;

use memplan_plan::chunk::{chunk_to_budget, simulate, ChunkOptions};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: chunk MODEL OUT.onnx NAME=VALUE... [--budget BYTES]");
        return ExitCode::from(2);
    }
    let mut dims = BTreeMap::new();
    let mut opts = ChunkOptions::default();
    let mut it = args[2..].iter();
    while let Some(a) = it.next() {
        if a == "--budget" {
            opts.budget = it.next().and_then(|b| b.parse().ok());
        } else if let Some((k, v)) = a.split_once('=') {
            dims.insert(k.to_string(), v.parse::<i64>().unwrap_or(0));
        }
    }
    let run = || -> Result<(), String> {
        let model = memplan_onnx::import(&args[0]).map_err(|e| e.to_string())?;
        let (before, _, _) = simulate(&model, &dims).map_err(|e| e.to_string())?;
        let t = std::time::Instant::now();
        let (out, steps) = chunk_to_budget(&model, &dims, &opts).map_err(|e| e.to_string())?;
        let (after, node, facts) = simulate(&out, &dims).map_err(|e| e.to_string())?;
        for s in &steps {
            println!(
                "step: {} nodes x {} chunks (extent {}): {} -> {}",
                s.nodes.len(),
                s.chunks,
                s.extent,
                s.peak_before,
                s.peak_after
            );
        }
        let at = node.map(|n| out.graph.node(n).label(n)).unwrap_or_default();
        println!(
            "peak {before} -> {after} ({:.3}x) in {:.2}s; now at {at}",
            after as f64 / before as f64,
            t.elapsed().as_secs_f64()
        );
        let _ = facts;
        memplan_onnx::save(&out, &args[1], memplan_onnx::default_mode(&out))
            .map_err(|e| e.to_string())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chunk: {e}");
            ExitCode::FAILURE
        }
    }
}
