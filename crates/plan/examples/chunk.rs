//! Chunks a model to a budget and writes it: `chunk MODEL OUT.onnx NAME=VALUE... [--budget BYTES]`.
//! A development aid for the chunking pass; `memplan optimize` is the user-facing entry point.

use std::collections::BTreeMap;
use std::process::ExitCode;

use memplan_plan::chunk::{chunk_to_budget, ChunkOptions};

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
        let t = std::time::Instant::now();
        let out = chunk_to_budget(&model, &dims, &opts).map_err(|e| e.to_string())?;
        for s in &out.steps {
            println!(
                "step: {} nodes ({} .. {}) x {} chunks (extent {}): {} -> {}, copies {} B, +{:.1} ms",
                s.nodes,
                s.first,
                s.last,
                s.chunks,
                s.extent,
                s.peak_before,
                s.peak_after,
                s.copied_bytes,
                s.predicted_seconds * 1e3
            );
        }
        println!(
            "peak {} -> {} ({:.3}x) in {:.2}s, {} candidates; live at the peak: {:?}",
            out.peak_before,
            out.peak_after,
            out.peak_after as f64 / out.peak_before as f64,
            t.elapsed().as_secs_f64(),
            out.evaluated,
            &out.live[..out.live.len().min(4)]
        );
        memplan_onnx::save(&out.model, &args[1], memplan_onnx::default_mode(&out.model))
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
