//! Random DAGs of real ops for property tests and `cargo fuzz`: one generator, driven either by a
//! seeded PRNG ([`SplitMix`], the bounded test in `cargo test`) or by the fuzzer's bytes
//! ([`ByteSource`], `fuzz/fuzz_targets/plan.rs`).
//!
//! Every tensor is `[R, C]` with `R` the symbol `N` or 1 and `C` a small constant, so shapes always
//! infer. The ops cover what the planner treats differently: elementwise ops that may work in place
//! (with and without broadcasting), views (Reshape, Identity, Flatten, column Slices of a one-row
//! tensor), copies (column Slices of an `N`-row tensor), MatMul (scratch), Concat, reductions and
//! dead values; some intermediate values and views are graph outputs.

use std::collections::BTreeMap;

use memplan_ir::graph::{AttrValue, Attribute, DeclDim, DeclType, Graph};
use memplan_ir::{DataType, TensorData, ValueId};

/// A source of random numbers.
pub trait Entropy {
    fn next_u32(&mut self) -> u32;

    /// A number in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            self.next_u32() as usize % n
        }
    }
}

/// SplitMix64, seeded.
#[derive(Clone, Debug)]
pub struct SplitMix(pub u64);

impl Entropy for SplitMix {
    fn next_u32(&mut self) -> u32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 32) as u32
    }
}

/// The fuzzer's bytes, four at a time; zeros once they run out.
#[derive(Clone, Debug)]
pub struct ByteSource<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> ByteSource<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        ByteSource { data, pos: 0 }
    }
}

impl Entropy for ByteSource<'_> {
    fn next_u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        for x in &mut b {
            *x = self.data.get(self.pos).copied().unwrap_or(0);
            self.pos += 1;
        }
        u32::from_le_bytes(b)
    }
}

/// A generated graph and the dims to plan it at.
#[derive(Clone, Debug)]
pub struct RandomGraph {
    pub graph: Graph,
    pub dims: BTreeMap<String, i64>,
}

fn weight(g: &mut Graph, k: &mut usize, dims: Vec<u64>, fill: f32) -> ValueId {
    let count: u64 = dims.iter().product();
    *k += 1;
    g.add_initializer(TensorData::from_f32(
        format!("w{k}"),
        dims,
        &vec![fill; count as usize],
    ))
}

fn konst(g: &mut Graph, k: &mut usize, v: &[i64]) -> ValueId {
    *k += 1;
    g.add_initializer(TensorData::from_i64(
        format!("k{k}"),
        vec![v.len() as u64],
        v,
    ))
}

#[derive(Clone, Copy)]
struct T {
    v: ValueId,
    n_rows: bool,
    cols: usize,
}

fn int(name: &str, v: i64) -> Attribute {
    Attribute {
        name: name.into(),
        value: AttrValue::Int(v),
        doc: String::new(),
    }
}

/// A random graph of at most `max_nodes` nodes (at least one) over input `x[N, C]`.
pub fn random_graph(e: &mut impl Entropy, max_nodes: usize) -> RandomGraph {
    let mut g = Graph::default();
    let n_val = 1 + e.below(16) as i64;
    let decl = |cols: usize, n_rows: bool| {
        DeclType::tensor(
            DataType::F32,
            vec![
                if n_rows {
                    DeclDim::Param("N".into())
                } else {
                    DeclDim::Value(1)
                },
                DeclDim::Value(cols as i64),
            ],
        )
    };
    let mut vals: Vec<T> = Vec::new();
    let c0 = 1 << e.below(5);
    vals.push(T {
        v: g.add_input("x", decl(c0, true)),
        n_rows: true,
        cols: c0,
    });
    if e.below(2) == 0 {
        let c1 = 1 << e.below(5);
        let one = e.below(3) == 0;
        vals.push(T {
            v: g.add_input("y", decl(c1, !one)),
            n_rows: !one,
            cols: c1,
        });
    }
    let mut weights = 0usize;
    let mut consts = 0usize;
    let nodes = 1 + e.below(max_nodes.max(1));
    let mut outputs: Vec<ValueId> = Vec::new();
    let mut i = 0;
    while i < nodes {
        // Recent values more often, so chains and diamonds both appear.
        let pick = |e: &mut dyn FnMut(usize) -> usize, vals: &[T]| -> T {
            if e(2) == 0 {
                let k = vals.len().min(4);
                vals[vals.len() - 1 - e(k)]
            } else {
                vals[e(vals.len())]
            }
        };
        let mut r = |n: usize| e.below(n);
        let a = pick(&mut r, &vals);
        let name = format!("n{i}");
        let out = format!("v{i}");
        let node = |g: &mut Graph, op: &str, ins: &[ValueId], attrs: Vec<Attribute>| {
            let ins: Vec<Option<ValueId>> = ins.iter().map(|&v| Some(v)).collect();
            g.add_node(name.clone(), op, &ins, &[out.as_str()], attrs).1[0]
        };
        let t = match r(10) {
            9 if i + 3 <= nodes => {
                // f16 MatMul between Casts: the executor widens to f32 in scratch.
                let c2 = 1usize << r(5);
                let raw: Vec<u8> = (0..a.cols * c2)
                    .flat_map(|_| half::f16::from_f32(0.25).to_le_bytes())
                    .collect();
                weights += 1;
                let w = g.add_initializer(
                    TensorData::from_raw(
                        format!("w{weights}"),
                        DataType::F16,
                        vec![a.cols as u64, c2 as u64],
                        bytes::Bytes::from(raw),
                    )
                    .unwrap_or_else(|e| unreachable!("{e}")),
                );
                let to = |d: DataType| int("to", d.onnx_code() as i64);
                let h = g
                    .add_node(
                        format!("n{i}"),
                        "Cast",
                        &[Some(a.v)],
                        &[&format!("v{i}")],
                        vec![to(DataType::F16)],
                    )
                    .1[0];
                let m = g
                    .add_node(
                        format!("n{}", i + 1),
                        "MatMul",
                        &[Some(h), Some(w)],
                        &[&format!("v{}", i + 1)],
                        vec![],
                    )
                    .1[0];
                i += 2;
                T {
                    v: g.add_node(
                        format!("n{i}"),
                        "Cast",
                        &[Some(m)],
                        &[&format!("v{i}")],
                        vec![to(DataType::F32)],
                    )
                    .1[0],
                    n_rows: a.n_rows,
                    cols: c2,
                }
            }
            0 => {
                let op = ["Relu", "Neg", "Tanh", "Abs", "Sigmoid", "Exp"][r(6)];
                T {
                    v: node(&mut g, op, &[a.v], vec![]),
                    ..a
                }
            }
            1 | 2 => {
                let op = ["Add", "Mul", "Sub"][r(3)];
                let same: Vec<T> = vals
                    .iter()
                    .copied()
                    .filter(|b| b.cols == a.cols || b.cols == 1 || a.cols == 1)
                    .collect();
                let b = if same.is_empty() || r(5) == 0 {
                    T {
                        v: weight(&mut g, &mut weights, vec![1, a.cols as u64], 0.5),
                        n_rows: false,
                        cols: a.cols,
                    }
                } else {
                    same[r(same.len())]
                };
                let (x, y) = if r(2) == 0 { (a, b) } else { (b, a) };
                T {
                    v: node(&mut g, op, &[x.v, y.v], vec![]),
                    n_rows: a.n_rows || b.n_rows,
                    cols: a.cols.max(b.cols),
                }
            }
            3 => {
                let c2 = 1 << r(5);
                let w = weight(&mut g, &mut weights, vec![a.cols as u64, c2 as u64], 0.25);
                T {
                    v: node(&mut g, "MatMul", &[a.v, w], vec![]),
                    n_rows: a.n_rows,
                    cols: c2,
                }
            }
            4 => {
                let rows: Vec<T> = vals
                    .iter()
                    .copied()
                    .filter(|b| b.n_rows == a.n_rows && a.cols + b.cols <= 64)
                    .collect();
                if rows.is_empty() {
                    T {
                        v: node(&mut g, "Relu", &[a.v], vec![]),
                        ..a
                    }
                } else {
                    let b = rows[r(rows.len())];
                    T {
                        v: node(&mut g, "Concat", &[a.v, b.v], vec![int("axis", 1)]),
                        n_rows: a.n_rows,
                        cols: a.cols + b.cols,
                    }
                }
            }
            5 => match r(3) {
                0 => {
                    let s = konst(&mut g, &mut consts, &[-1, a.cols as i64]);
                    T {
                        v: node(&mut g, "Reshape", &[a.v, s], vec![]),
                        ..a
                    }
                }
                1 => T {
                    v: node(&mut g, "Identity", &[a.v], vec![]),
                    ..a
                },
                _ => T {
                    v: node(&mut g, "Flatten", &[a.v], vec![int("axis", 1)]),
                    ..a
                },
            },
            6 if a.cols >= 2 => {
                let k = 1 + r(a.cols - 1);
                let start = r(a.cols - k + 1) as i64;
                let st = konst(&mut g, &mut consts, &[start]);
                let en = konst(&mut g, &mut consts, &[start + k as i64]);
                let ax = konst(&mut g, &mut consts, &[1]);
                T {
                    v: node(&mut g, "Slice", &[a.v, st, en, ax], vec![]),
                    n_rows: a.n_rows,
                    cols: k,
                }
            }
            7 => {
                let ax = konst(&mut g, &mut consts, &[1]);
                T {
                    v: node(&mut g, "ReduceSum", &[a.v, ax], vec![int("keepdims", 1)]),
                    n_rows: a.n_rows,
                    cols: 1,
                }
            }
            8 if i + 2 <= nodes && r(2) == 0 => {
                // A 0/1 mask as exporters write one: Cast(Greater(x, 0), float).
                let zero = weight(&mut g, &mut weights, vec![1, 1], 0.0);
                let c = g
                    .add_node(
                        format!("n{i}"),
                        "Greater",
                        &[Some(a.v), Some(zero)],
                        &[&format!("v{i}")],
                        vec![],
                    )
                    .1[0];
                i += 1;
                T {
                    v: g.add_node(
                        format!("n{i}"),
                        "Cast",
                        &[Some(c)],
                        &[&format!("v{i}")],
                        vec![int("to", DataType::F32.onnx_code() as i64)],
                    )
                    .1[0],
                    ..a
                }
            }
            _ => T {
                v: node(&mut g, "Softmax", &[a.v], vec![int("axis", -1)]),
                ..a
            },
        };
        if e.below(5) == 0 {
            outputs.push(t.v);
        }
        vals.push(t);
        i += 1;
    }
    let last = vals[vals.len() - 1].v;
    if !outputs.contains(&last) {
        outputs.push(last);
    }
    if e.below(8) == 0 && !outputs.contains(&vals[0].v) {
        outputs.push(vals[0].v);
    }
    g.outputs = outputs;
    RandomGraph {
        graph: g,
        dims: [("N".to_string(), n_val)].into(),
    }
}

/// A random topological order of `graph`'s nodes.
pub fn random_order(e: &mut impl Entropy, p: &crate::Problem) -> Vec<u32> {
    let n = p.nodes();
    let mut indeg: Vec<usize> = p.preds.iter().map(Vec::len).collect();
    let mut ready: Vec<u32> = (0..n as u32).filter(|&v| indeg[v as usize] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while !ready.is_empty() {
        let v = ready.swap_remove(e.below(ready.len()));
        order.push(v);
        for &s in &p.succs[v as usize] {
            indeg[s as usize] -= 1;
            if indeg[s as usize] == 0 {
                ready.push(s);
            }
        }
    }
    order
}

/// The property shared by the bounded test and the fuzz target: every plan the planner makes for a
/// random graph, from [`crate::optimize`] and for each scheduler's order and a random order, passes
/// the checker; the planned arena is at least the liveness bound and the model's peak is the
/// simulator's. Returns the first violation, or what the planner exercised.
pub fn check_random(e: &mut impl Entropy, max_nodes: usize) -> Result<Coverage, String> {
    use crate::sched;
    let rg = random_graph(e, max_nodes);
    let (g, dims) = (&rg.graph, &rg.dims);
    let facts = memplan_ir::infer_graph(g, 18).map_err(|x| format!("infer: {x}"))?;
    let opts = crate::Options {
        exact_work: usize::MAX,
        exact_window: 16,
        exact_max_states: 5_000,
        lanes: 1,
    };
    let out = crate::optimize(g, &facts, dims, &opts).map_err(|x| format!("optimize: {x}"))?;
    let r = &out.report;
    if r.arena_bytes < r.arena_lower_bound
        || r.peak_bytes_after != r.arena_bytes + r.resident_bytes + r.heap_bytes
    {
        return Err(format!("inconsistent report: {r:?}"));
    }
    let p = crate::Problem::build(g, &facts, &facts.order, dims, 1).map_err(|x| x.to_string())?;
    let mut orders = vec![
        p.graph_order_u32(),
        sched::list(&p, sched::ListKey::NetGrowth),
        sched::list(&p, sched::ListKey::StepBytes),
        sched::dfs(&p, &[], false),
        random_order(e, &p),
    ];
    let lim = sched::ExactLimits {
        window: 16,
        max_states: 5_000,
        total_states: usize::MAX,
    };
    let (ex, stats) = sched::exact(&p, &orders[1], &lim);
    orders.push(ex);
    let mut cov = Coverage {
        exact_improved: stats.improved,
        ..Coverage::default()
    };
    let plain = p.without_reuse();
    for o in &orders {
        if !p.is_topological(o) {
            return Err(format!("not a topological order: {o:?}"));
        }
        let ids: Vec<memplan_ir::NodeId> = o.iter().map(|&v| memplan_ir::NodeId(v)).collect();
        let t =
            memplan_sim::Timeline::build_assembled(g, &facts, &ids).map_err(|x| x.to_string())?;
        let cp = memplan_sim::peak::concrete_peak(&t, dims).map_err(|x| x.to_string())?;
        if cp.peak_bytes != plain.peak(o) + p.resident {
            return Err(format!(
                "model peak {} + {} != simulated {} for {o:?}",
                plain.peak(o),
                p.resident,
                cp.peak_bytes
            ));
        }
        let plan =
            crate::plan_for_schedule(g, &facts, dims, &ids).map_err(|x| format!("{o:?}: {x}"))?;
        let live = plan_live_peak(&plan);
        if live != p.peak(o) {
            return Err(format!(
                "in-place-aware model peak {} != the plan's live peak {live} for {o:?}",
                p.peak(o)
            ));
        }
        cov.inplace += plan.inplace.len();
        for b in &plan.buffers {
            cov.scratch += usize::from(b.kind == crate::BufferKind::Scratch);
            cov.views += b.values.len().saturating_sub(1);
        }
    }
    Ok(cov)
}

/// What [`check_random`] saw the planner do, summed over its plans.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    pub inplace: usize,
    pub scratch: usize,
    pub views: usize,
    pub exact_improved: usize,
}

impl std::ops::AddAssign for Coverage {
    fn add_assign(&mut self, o: Coverage) {
        self.inplace += o.inplace;
        self.scratch += o.scratch;
        self.views += o.views;
        self.exact_improved += o.exact_improved;
    }
}

/// The most bytes the plan's buffers hold at any step, an input and the output written over it
/// counting once.
fn plan_live_peak(plan: &crate::Plan) -> u64 {
    let n = plan.schedule.len();
    let mut live = vec![0u64; n];
    for b in &plan.buffers {
        for x in &mut live[b.first..=b.last] {
            *x += b.size;
        }
    }
    let step_of: BTreeMap<u32, usize> = plan
        .schedule
        .iter()
        .enumerate()
        .map(|(s, st)| (st.node, s))
        .collect();
    for ip in &plan.inplace {
        let size = plan
            .buffers
            .iter()
            .find(|b| b.values.first() == Some(&ip.output))
            .map_or(0, |b| b.size);
        live[step_of[&ip.node]] -= size;
    }
    live.into_iter().max().unwrap_or(0)
}

/// The fuzz target's body: a graph from the bytes, then [`check_random`].
pub fn check_bytes(data: &[u8]) -> Result<(), String> {
    check_random(&mut ByteSource::new(data), 48).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bounded version of `cargo fuzz run plan` (about a second).
    #[test]
    fn the_checker_accepts_every_plan_the_planner_makes() {
        let mut cov = Coverage::default();
        for seed in 0..400 {
            match check_random(&mut SplitMix(0xC0FFEE + seed), 40) {
                Ok(c) => cov += c,
                Err(e) => panic!("seed {seed}: {e}"),
            }
        }
        // The graphs exercise every mechanism the checker verifies.
        assert!(
            cov.inplace > 2000
                && cov.scratch > 1000
                && cov.views > 1000
                && cov.exact_improved > 100,
            "{cov:?}"
        );
    }

    #[test]
    fn random_graphs_validate_and_infer() {
        for seed in 0..300 {
            let rg = random_graph(&mut SplitMix(seed), 30);
            let facts = memplan_ir::infer_graph(&rg.graph, 18).unwrap();
            assert!(facts.skipped.is_empty(), "seed {seed}: {:?}", facts.skipped);
            for v in rg.graph.value_ids() {
                assert!(facts.get(v).bytes().is_some(), "seed {seed}: {v}");
            }
        }
    }

    #[test]
    fn bytes_drive_the_same_generator() {
        let rg = random_graph(&mut ByteSource::new(&[]), 10);
        assert_eq!(rg.graph.nodes.len(), 1);
        let rg = random_graph(&mut ByteSource::new(&[7; 200]), 10);
        assert!(memplan_ir::infer_graph(&rg.graph, 18).is_ok());
    }
}
