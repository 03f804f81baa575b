//! Estimate time on synthetic 10k- and 100k-node graphs (plain timer, medians; criterion is not
//! available offline). Run with `cargo bench -p memplan-sim`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use memplan_ir::infer_graph;
use memplan_sim::estimate::{Analysis, EstimateOptions};
use memplan_sim::synth::{transformer, NODES_PER_LAYER};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let dims: BTreeMap<String, i64> = [("B".to_string(), 1), ("S".to_string(), 512)].into();
    for (nodes, runs, limit_ms) in [(10_000usize, 15, 100.0), (100_000, 5, 1000.0)] {
        let g = transformer(nodes / NODES_PER_LAYER);
        let facts = infer_graph(&g, 18).expect("synthetic graph infers");
        let opts = EstimateOptions {
            budget: Some(8 << 30),
            live_limit: 12,
            ..Default::default()
        };
        let mut total = Vec::new();
        let mut build = Vec::new();
        let mut peak = 0;
        for _ in 0..runs {
            let t0 = Instant::now();
            let an = Analysis::new(&g, &facts, &facts.order).expect("analysis");
            let t1 = Instant::now();
            let e = an.at(&dims, &opts).expect("estimate");
            let t2 = Instant::now();
            peak = e.peak_bytes;
            assert!(e.max_fitting.is_some() && e.formula.is_some());
            build.push(t1 - t0);
            total.push(t2 - t0);
        }
        let (m, b) = (median(total), median(build));
        println!(
            "estimate {:>6} nodes: median {:>8.2} ms (timeline+formula {:.2} ms, evaluation+placement+budget {:.2} ms), limit {limit_ms} ms, peak {peak} B, {}",
            g.nodes.len(),
            m.as_secs_f64() * 1e3,
            b.as_secs_f64() * 1e3,
            (m.as_secs_f64() - b.as_secs_f64()) * 1e3,
            if m.as_secs_f64() * 1e3 < limit_ms { "ok" } else { "OVER" }
        );
    }
}
