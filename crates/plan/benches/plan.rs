//! Planning time on synthetic attention stacks of 10k and 100k nodes (plain timer, medians; the
//! 10k-node plan must take under 1 s). Run with `cargo bench -p memplan-plan`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use memplan_ir::infer_graph;
use memplan_plan::{check, optimize, sched, Options, Problem};
use memplan_sim::synth::{transformer, NODES_PER_LAYER};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut ts = Vec::new();
    let mut last = None;
    for _ in 0..runs {
        let t0 = Instant::now();
        last = Some(f());
        ts.push(t0.elapsed());
    }
    (median(ts), last.unwrap())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let dims: BTreeMap<String, i64> = [("B".to_string(), 1), ("S".to_string(), 512)].into();
    for (nodes, runs) in [(10_000usize, 7), (100_000, 3)] {
        let g = transformer(nodes / NODES_PER_LAYER);
        let facts = infer_graph(&g, 18).expect("synthetic graph infers");
        let opts = Options::default();
        let (t_build, p) = time(runs, || {
            Problem::build(&g, &facts, &facts.order, &dims, 1).expect("problem builds")
        });
        let (t_list, _) = time(runs, || sched::list(&p, sched::ListKey::NetGrowth));
        let (t_dfs, _) = time(runs, || sched::dfs(&p, &[], false));
        let lim = sched::ExactLimits {
            total_states: usize::MAX,
            ..Default::default()
        };
        let start = p.graph_order_u32();
        let (t_exact, (_, stats)) = time(runs, || sched::exact(&p, &start, &lim));
        let (t_total, out) = time(runs, || optimize(&g, &facts, &dims, &opts).expect("plans"));
        let (t_check, _) = time(runs, || check(&g, &facts, &out.plan).expect("valid"));
        let r = &out.report;
        println!(
            "{} nodes: optimize {:.1} ms (median of {runs}; limit 1000 ms at 10k) | problem {:.1} ms, \
             list {:.1} ms, dfs {:.1} ms, exact {:.1} ms ({} windows solved, {} gave up), check {:.1} ms",
            g.nodes.len(),
            ms(t_total),
            ms(t_build),
            ms(t_list),
            ms(t_dfs),
            ms(t_exact),
            stats.solved,
            stats.gave_up,
            ms(t_check),
        );
        println!(
            "  peak {} -> {} B ({:+.1}%), arena {} B, bound {} B, {} in place, schedule: {}",
            r.peak_bytes_before,
            r.peak_bytes_after,
            (r.peak_bytes_after as f64 / r.peak_bytes_before as f64 - 1.0) * 100.0,
            r.arena_bytes,
            r.arena_lower_bound,
            r.inplace,
            r.scheduler
        );
    }
}
