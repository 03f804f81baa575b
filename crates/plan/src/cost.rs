//! The cost model of rewrites: a node's run time from what kind of work it does and how much.
//!
//! A rewrite's extra time is the time of the nodes it adds less the time of the nodes it removes,
//! each predicted by [`CostModel::node_seconds`]. A node's time is read off a curve per kind of
//! work ([`Kind`]), measured at sizes from a few elements to tens of millions by
//! `bench/calibrate_cost.py` on chains of nodes of that kind run by memplan's executor, at a given
//! thread count. The curves hold what a fixed cost per node and a bandwidth cannot: a slice too
//! small for a kernel to fan out over the threads costs nearly as much as a larger one, a node on a
//! tensor that fits in cache runs faster per element than one that streams from memory, and every
//! node costs its dispatch. So chunking into many small slices costs more than into a few large
//! ones at the same peak, and a chunked chain whose slices stay in cache can cost less than the
//! whole one.
//!
//! A run also pays for the memory it touches first (page faults of a fresh arena), so a rewrite
//! that lowers the peak saves [`CostModel::fault_seconds`] of the bytes it saves.
//!
//! The model is data, not measurement: the plan is the same on any machine for the same model
//! (the built-in curves, or the file `memplan optimize --cost-model` reads).

use std::collections::{BTreeMap, BTreeSet};

use memplan_ir::graph::{Graph, Node};
use memplan_ir::infer::{Fact, Facts};
use memplan_ir::ops::{self, Values};

use crate::plan::Plan;

/// What a node's run time grows with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// No element is touched: a view of an input, a concatenation assembled in place.
    View,
    /// One function per output element of the corresponding input elements (work: output
    /// elements).
    Elementwise,
    /// Output elements copied from input elements across the innermost axis: transposes that move
    /// it, gathers or slices along it (work: output elements). A copy of whole innermost rows
    /// (gathers, concatenations and slices along an outer axis, transposes that keep the last axis
    /// last) streams like an elementwise node and counts as one.
    Copy,
    /// A contraction (work: multiply-adds, the output elements times what each sums over).
    Contraction,
    /// Anything else: reductions, normalizations, softmax (work: the larger of the input and the
    /// output elements).
    Other,
}

impl Kind {
    /// The kind's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::View => "view",
            Kind::Elementwise => "elementwise",
            Kind::Copy => "copy",
            Kind::Contraction => "contraction",
            Kind::Other => "other",
        }
    }
}

/// Seconds per node as a function of its work: `(work, seconds)` points measured at increasing
/// work, linear between them; below the first point its time (a node's fixed cost), above the last
/// the last point's time per unit of work.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Curve(pub Vec<(f64, f64)>);

impl Curve {
    /// Seconds of a node doing `work`.
    pub fn seconds(&self, work: f64) -> f64 {
        let p = &self.0;
        let (Some(&(w0, s0)), Some(&(wl, sl))) = (p.first(), p.last()) else {
            return 0.0;
        };
        if work <= w0 {
            return s0;
        }
        if work >= wl {
            return sl * work / wl.max(f64::MIN_POSITIVE);
        }
        let i = p.partition_point(|&(w, _)| w <= work);
        let ((wa, sa), (wb, sb)) = (p[i - 1], p[i]);
        sa + (sb - sa) * (work - wa) / (wb - wa).max(f64::MIN_POSITIVE)
    }

    /// Whether the points are at strictly increasing, finite, positive work with finite,
    /// non-negative times.
    fn valid(&self) -> bool {
        self.0
            .iter()
            .all(|&(w, s)| w.is_finite() && w > 0.0 && s.is_finite() && s >= 0.0)
            && self.0.windows(2).all(|p| p[0].0 < p[1].0)
    }
}

/// Per-kind curves at one thread count (see the module docs).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostModel {
    /// The thread count the curves were measured at (what the runs predicted use).
    pub threads: usize,
    /// Seconds of a node that touches no element (dispatch and bookkeeping).
    pub view_seconds: f64,
    /// Seconds per byte of memory a run touches for the first time (page faults of a fresh
    /// arena): a run whose peak is lower maps fewer pages.
    pub fault_seconds_per_byte: f64,
    pub elementwise: Curve,
    pub copy: Curve,
    pub contraction: Curve,
    pub other: Curve,
    /// Per op type: its time over its kind's curve at the same work (the curves are measured on
    /// `Add`/`Mul` and on `Softmax`; an `exp` or a `powf` per element costs more, a `Relu` less).
    /// A node's time above its kind's fixed cost (the curve's first point) is scaled by it: the
    /// fixed cost stays, and so does the curve's shape (a slice that fits in cache is cheaper per
    /// element for every op). An op not listed counts 1.
    #[serde(default)]
    pub per_op: BTreeMap<String, f64>,
}

impl Default for CostModel {
    /// `bench/calibrate_cost.py --threads 2` on the development machine (2-core AMD EPYC VM,
    /// planned runs, each the first of its process), 2026-11-27; `per_op` 2026-11-29
    /// (against that day's curves: the factors are ratios); the copy curve 2026-12-06
    /// (`--curves copy`, after transposes were tiled: 16 Mi elements 35 -> 12 ms; the elementwise
    /// curve measured beside it matched its 2026-11-27 points).
    fn default() -> Self {
        let c = |p: &[(f64, f64)]| Curve(p.to_vec());
        CostModel {
            threads: 2,
            view_seconds: 2.400e-07,
            fault_seconds_per_byte: 2.392e-10,
            elementwise: c(&DEFAULT_ELEMENTWISE),
            copy: c(&DEFAULT_COPY),
            contraction: c(&DEFAULT_CONTRACTION),
            other: c(&DEFAULT_OTHER),
            per_op: DEFAULT_PER_OP
                .iter()
                .map(|&(op, f)| (op.to_string(), f))
                .collect(),
        }
    }
}

/// The output columns of the contraction the curve is measured on (`MatMul [M, 64] x [64, 64]`):
/// its multiply-adds per element of the left operand its kernel packs.
pub const CALIBRATION_COLUMNS: f64 = 64.0;

// Seconds per node at work 4^k (multiply-adds of MatMul [4^k, 64] x [64, 64] for the contraction).
const DEFAULT_ELEMENTWISE: [(f64, f64); 11] = [
    (16.0, 1.575e-06),
    (64.0, 1.565e-06),
    (256.0, 1.570e-06),
    (1024.0, 2.145e-06),
    (4096.0, 2.774e-06),
    (16384.0, 4.995e-06),
    (65536.0, 2.120e-05),
    (262144.0, 6.745e-05),
    (1048576.0, 2.069e-04),
    (4194304.0, 8.013e-04),
    (16777216.0, 3.038e-03),
];
const DEFAULT_COPY: [(f64, f64); 11] = [
    (16.0, 7.970e-07),
    (64.0, 8.355e-07),
    (256.0, 9.755e-07),
    (1024.0, 1.104e-06),
    (4096.0, 2.398e-06),
    (16384.0, 7.875e-06),
    (65536.0, 2.347e-05),
    (262144.0, 8.659e-05),
    (1048576.0, 5.919e-04),
    (4194304.0, 2.337e-03),
    (16777216.0, 1.160e-02),
];
const DEFAULT_CONTRACTION: [(f64, f64); 9] = [
    (4096.0, 1.810e-06),
    (16384.0, 2.700e-06),
    (65536.0, 4.079e-06),
    (262144.0, 8.005e-06),
    (1048576.0, 1.884e-05),
    (4194304.0, 6.279e-05),
    (16777216.0, 1.959e-04),
    (67108864.0, 7.691e-04),
    (268435456.0, 3.000e-03),
];
// `bench/calibrate_cost.py --rust` (`per_op`): ratios to its curves of the same run, 2026-11-29;
// the six ops inlined since (Floor, Sign, Softsign, HardSwish, HardSigmoid, LeakyRelu) measured
// again with `--per-op-only` and divided by that run's median factor of Add, Sub, Mul, Div (0.91).
const DEFAULT_PER_OP: [(&str, f64); 35] = [
    ("Abs", 0.878),
    ("Add", 1.03),
    ("Celu", 3.226),
    ("Cos", 30.057),
    ("Div", 1.042),
    ("Elu", 2.989),
    ("Erf", 1.606),
    ("Exp", 2.361),
    ("Floor", 0.884),
    ("HardSigmoid", 0.818),
    ("HardSwish", 0.881),
    ("LayerNormalization", 0.424),
    ("LeakyRelu", 0.824),
    ("Log", 5.293),
    ("LogSoftmax", 1.074),
    ("Max", 3.226),
    ("Min", 3.132),
    ("Mul", 1.035),
    ("Neg", 0.907),
    ("Pow", 0.888),
    ("Reciprocal", 0.816),
    ("ReduceMax", 0.924),
    ("ReduceMean", 0.147),
    ("ReduceSum", 0.147),
    ("Relu", 0.862),
    ("Selu", 3.131),
    ("Sigmoid", 2.679),
    ("Sign", 0.808),
    ("Sin", 28.694),
    ("Softmax", 1.058),
    ("Softplus", 11.219),
    ("Softsign", 0.836),
    ("Sqrt", 0.848),
    ("Sub", 1.054),
    ("Tanh", 2.086),
];
const DEFAULT_OTHER: [(f64, f64); 11] = [
    (16.0, 4.400e-07),
    (64.0, 5.000e-07),
    (256.0, 6.800e-07),
    (1024.0, 1.525e-06),
    (4096.0, 5.020e-06),
    (16384.0, 1.229e-05),
    (65536.0, 4.006e-05),
    (262144.0, 1.503e-04),
    (1048576.0, 6.813e-04),
    (4194304.0, 2.368e-03),
    (16777216.0, 9.813e-03),
];

impl CostModel {
    /// Checks that the curves are well formed (a file read for `--cost-model`).
    pub fn validate(&self) -> Result<(), String> {
        if self.threads == 0 {
            return Err("threads must be at least 1".into());
        }
        for (name, v) in [
            ("view_seconds", self.view_seconds),
            ("fault_seconds_per_byte", self.fault_seconds_per_byte),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{name} must be a finite, non-negative number"));
            }
        }
        if let Some((op, _)) = self
            .per_op
            .iter()
            .find(|(_, &f)| !(f.is_finite() && f > 0.0))
        {
            return Err(format!(
                "per_op {op}: a factor must be a finite, positive number"
            ));
        }
        for (name, c) in self.curves() {
            if c.0.is_empty() {
                return Err(format!("the {name} curve has no points"));
            }
            if !c.valid() {
                return Err(format!(
                    "the {name} curve must have strictly increasing positive work and finite, \
                     non-negative seconds"
                ));
            }
        }
        Ok(())
    }

    fn curves(&self) -> [(&'static str, &Curve); 4] {
        [
            ("elementwise", &self.elementwise),
            ("copy", &self.copy),
            ("contraction", &self.contraction),
            ("other", &self.other),
        ]
    }

    /// The kind of work `node` does over these facts, and how much (elements, or multiply-adds of
    /// a contraction); `view`: its output is a view of its input (or it is a concatenation
    /// assembled in place). `None`: a size is not known at `dims`.
    pub fn work(
        node: &Node,
        ins: &[Option<&Fact>],
        outs: &[Option<&Fact>],
        view: bool,
        dims: &BTreeMap<String, i64>,
    ) -> Option<(Kind, f64)> {
        if view {
            return Some((Kind::View, 0.0));
        }
        let def = ops::lookup(node);
        let out = elements(outs, dims)?;
        if let Some(k) = def.and_then(|d| d.contracted) {
            let k = k(node, ins)?.eval_map(dims).ok()?.max(1) as f64;
            return Some((Kind::Contraction, out * k));
        }
        Some(match def.map(|d| d.values) {
            Some(Values::Pointwise) => (Kind::Elementwise, out),
            Some(Values::Selects(_) | Values::SelectsAny) if copies_rows(node, ins, outs, dims) => {
                (Kind::Elementwise, out)
            }
            Some(Values::Selects(_) | Values::SelectsAny) => (Kind::Copy, out),
            // Writes its output without reading an input element.
            Some(Values::Shapes | Values::Fills) => (Kind::Elementwise, out),
            _ => (Kind::Other, out.max(elements(ins, dims)?)),
        })
    }

    /// Predicted seconds of one run of `node` over these facts (see [`CostModel::work`]); a node
    /// whose sizes are unknown costs a view's time. A contraction's kernel packs its operands
    /// before it multiplies them, one elementwise pass over the elements it reads: the curve holds
    /// that pass for the calibration's shape (a left operand of one element per
    /// [`CALIBRATION_COLUMNS`] multiply-adds), and the node pays the difference for its own
    /// shape. So a product split into narrow column slices reads its whole left operand once per
    /// slice (a `[N, K] x [K, 1]` costs about what packing `[N, K]` costs, not a 1/K-th of the
    /// full product), and a batched product split along its columns packs every batch's rows
    /// again per slice.
    pub fn node_seconds(
        &self,
        node: &Node,
        ins: &[Option<&Fact>],
        outs: &[Option<&Fact>],
        view: bool,
        dims: &BTreeMap<String, i64>,
    ) -> f64 {
        let work = Self::work(node, ins, outs, view, dims);
        self.work_seconds(&node.op, work, ins, dims)
    }

    /// The factor of op type `op` ([`CostModel::per_op`]).
    pub fn op_factor(&self, op: &str) -> f64 {
        self.per_op.get(op).copied().unwrap_or(1.0)
    }

    /// [`CostModel::node_seconds`] of a node of type `op` doing `work` ([`CostModel::work`]) over
    /// inputs `ins`.
    fn work_seconds(
        &self,
        op: &str,
        work: Option<(Kind, f64)>,
        ins: &[Option<&Fact>],
        dims: &BTreeMap<String, i64>,
    ) -> f64 {
        match work {
            Some((kind @ (Kind::Elementwise | Kind::Other), w)) => {
                let fixed = self.seconds(kind, 0.0);
                let f = self.op_factor(op);
                (fixed + f * (self.seconds(kind, w) - fixed)).max(self.view_seconds)
            }
            Some((Kind::Contraction, w)) => {
                let packed = elements(ins, dims).map_or(0.0, |n| {
                    self.elementwise.seconds(n) - self.elementwise.seconds(w / CALIBRATION_COLUMNS)
                });
                (self.seconds(Kind::Contraction, w) + packed).max(self.view_seconds)
            }
            Some((kind, w)) => self.seconds(kind, w),
            None => self.view_seconds,
        }
    }

    /// Each node of `g` priced at `dims` ([`CostModel::node_seconds`]), in node order. A
    /// concatenation that `plan` assembles in place copies nothing and costs a view's time. A
    /// control-flow node is priced as one node over its inputs and outputs, not by its body.
    pub fn node_costs(
        &self,
        g: &Graph,
        facts: &Facts,
        dims: &BTreeMap<String, i64>,
        plan: Option<&Plan>,
    ) -> Vec<NodeCost> {
        let assembled: BTreeSet<usize> = plan
            .map(|p| p.assembled.iter().map(|a| a.node as usize).collect())
            .unwrap_or_default();
        g.node_ids()
            .map(|id| {
                let node = g.node(id);
                let (ins, outs) = facts.node_io(node);
                let view = assembled.contains(&id.index()) || ops::is_view(node, &ins, &outs);
                let work = Self::work(node, &ins, &outs, view, dims);
                NodeCost {
                    work,
                    seconds: self.work_seconds(&node.op, work, &ins, dims),
                }
            })
            .collect()
    }

    /// Predicted seconds of a run of `g` under `plan`: its nodes' time
    /// ([`CostModel::node_costs`]) and the first touches of the memory the plan maps (its arena
    /// and its bodies' heap). The difference of two plans' predictions is a rewrite's predicted
    /// extra time as a run measures it.
    pub fn plan_seconds(&self, g: &Graph, facts: &Facts, plan: &Plan) -> f64 {
        let nodes: f64 = self
            .node_costs(g, facts, &plan.dims, Some(plan))
            .iter()
            .map(|c| c.seconds)
            .sum();
        nodes + self.fault_seconds((plan.arena_bytes + plan.heap_bytes) as f64)
    }

    /// Predicted seconds of a run's memory growing by `bytes` (negative: shrinking).
    pub fn fault_seconds(&self, bytes: f64) -> f64 {
        bytes * self.fault_seconds_per_byte
    }

    /// Predicted seconds of a node of `kind` doing `work`.
    pub fn seconds(&self, kind: Kind, work: f64) -> f64 {
        let c = match kind {
            Kind::View => return self.view_seconds,
            Kind::Elementwise => &self.elementwise,
            Kind::Copy => &self.copy,
            Kind::Contraction => &self.contraction,
            Kind::Other => &self.other,
        };
        c.seconds(work).max(self.view_seconds)
    }
}

/// A node's predicted run time, and the work it was read off ([`CostModel::work`]; `None`: a size
/// is not known at the dims).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NodeCost {
    pub work: Option<(Kind, f64)>,
    pub seconds: f64,
}

/// The fewest elements of an innermost row for a copy of rows to stream (a 64-byte cache line of
/// `f32`).
const STREAM_ROW: i64 = 16;

/// Whether a copying node copies whole innermost rows: its output's last axis comes, position for
/// position, from the last axis of each input it slices along it (its axis flow), and that axis
/// holds at least [`STREAM_ROW`] elements at `dims`.
fn copies_rows(
    node: &Node,
    ins: &[Option<&Fact>],
    outs: &[Option<&Fact>],
    dims: &BTreeMap<String, i64>,
) -> bool {
    let Some(last) = ops::axes::out_shape(outs, 0).and_then(|s| s.last()) else {
        return false;
    };
    if last.eval_map(dims).map_or(true, |d| d < STREAM_ROW) {
        return false;
    }
    let Some(flow) = ops::axes::axis_flow(node, ins, outs) else {
        return false;
    };
    let Some(ops::axes::AxisFlow::Split(from)) = flow.first().and_then(|f| f.last()) else {
        return false;
    };
    let mut sliced = false;
    for (i, a) in from.iter().enumerate() {
        let Some(a) = a else { continue };
        let rank = ins.get(i).copied().flatten().and_then(|f| f.rank());
        if rank != Some(a + 1) {
            return false;
        }
        sliced = true;
    }
    sliced
}

/// The elements of these tensors together at `dims` (`None`: a size is not known there).
fn elements(facts: &[Option<&Fact>], dims: &BTreeMap<String, i64>) -> Option<f64> {
    let mut n = 0.0;
    for x in facts.iter().flatten() {
        n += x.numel()?.eval_map(dims).ok()?.max(0) as f64;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use memplan_ir::graph::{AttrValue, Attribute};

    #[test]
    fn a_curve_is_flat_below_linear_between_and_proportional_above_its_points() {
        let c = Curve(vec![(10.0, 1.0), (100.0, 4.0), (1000.0, 10.0)]);
        assert_eq!(c.seconds(1.0), 1.0);
        assert_eq!(c.seconds(10.0), 1.0);
        assert_eq!(c.seconds(55.0), 2.5);
        assert_eq!(c.seconds(100.0), 4.0);
        assert_eq!(c.seconds(550.0), 7.0);
        assert_eq!(c.seconds(4000.0), 40.0);
        assert_eq!(Curve::default().seconds(5.0), 0.0);
    }

    #[test]
    fn the_defaults_are_valid_and_a_bad_file_is_named() {
        CostModel::default().validate().unwrap();
        let mut m = CostModel {
            copy: Curve(vec![(4.0, 1.0), (2.0, 2.0)]),
            ..CostModel::default()
        };
        assert!(m.validate().unwrap_err().contains("copy curve"));
        m.copy = Curve(Vec::new());
        assert!(m
            .validate()
            .unwrap_err()
            .contains("copy curve has no points"));
        let m = CostModel {
            threads: 0,
            ..CostModel::default()
        };
        assert!(m.validate().is_err());
        let mut m = CostModel::default();
        m.per_op.insert("Exp".into(), 0.0);
        assert!(m.validate().unwrap_err().contains("per_op Exp"));
    }

    /// An op's factor scales its time above its kind's fixed cost: a large node costs about the
    /// factor times more, a node below the curve's first point its fixed cost whatever the factor;
    /// an op not listed counts 1, and a contraction ignores it.
    #[test]
    fn an_ops_factor_scales_its_work_on_its_kinds_curve() {
        let m = CostModel {
            per_op: BTreeMap::from([("Sigmoid".to_string(), 4.0), ("MatMul".to_string(), 9.0)]),
            ..CostModel::default()
        };
        let price = |op: &str, inputs: usize, ins: &[&[i64]], out: &[i64]| {
            let n = node(op, inputs, vec![]);
            let ins: Vec<Fact> = ins.iter().map(|s| fact(s)).collect();
            let ins: Vec<Option<&Fact>> = ins.iter().map(Some).collect();
            let out = fact(out);
            m.node_seconds(&n, &ins, &[Some(&out)], false, &BTreeMap::new())
        };
        let big: &[i64] = &[1 << 24];
        let sig = price("Sigmoid", 1, &[big], big);
        let relu = price("Relu", 1, &[big], big);
        let fixed = m.seconds(Kind::Elementwise, 0.0);
        assert_eq!(relu, m.seconds(Kind::Elementwise, (1u64 << 24) as f64));
        assert!(
            ((sig - fixed) / (relu - fixed) - 4.0).abs() < 1e-9,
            "{sig} {relu}"
        );
        assert!(sig > 3.99 * relu, "{sig} {relu}");
        let tiny: &[i64] = &[2];
        assert_eq!(
            price("Sigmoid", 1, &[tiny], tiny),
            price("Relu", 1, &[tiny], tiny)
        );
        let plain = CostModel::default();
        let n = node("MatMul", 2, vec![]);
        let (a, b, o) = (fact(&[256, 64]), fact(&[64, 64]), fact(&[256, 64]));
        let ins = [Some(&a), Some(&b)];
        let dims = BTreeMap::new();
        assert_eq!(
            m.node_seconds(&n, &ins, &[Some(&o)], false, &dims),
            plain.node_seconds(&n, &ins, &[Some(&o)], false, &dims)
        );
    }

    fn node(op: &str, inputs: usize, attrs: Vec<(&str, AttrValue)>) -> Node {
        Node {
            name: String::new(),
            op: op.into(),
            domain: String::new(),
            overload: String::new(),
            inputs: vec![Some(memplan_ir::graph::ValueId(0)); inputs],
            outputs: vec![Some(memplan_ir::graph::ValueId(0))],
            attrs: attrs
                .into_iter()
                .map(|(name, value)| Attribute {
                    name: name.into(),
                    value,
                    doc: String::new(),
                })
                .collect(),
            doc: String::new(),
            metadata: Vec::new(),
        }
    }

    fn fact(shape: &[i64]) -> Fact {
        Fact::new(
            memplan_ir::DataType::F32,
            shape.iter().map(|&d| memplan_ir::Expr::from(d)).collect(),
        )
    }

    /// [`CostModel::work`] of `n` over inputs and an output of these shapes, at no dims.
    fn work_of(n: &Node, ins: &[&[i64]], out: &[i64], view: bool) -> (Kind, f64) {
        let ins: Vec<Fact> = ins.iter().map(|s| fact(s)).collect();
        let ins: Vec<Option<&Fact>> = ins.iter().map(Some).collect();
        let out = fact(out);
        CostModel::work(n, &ins, &[Some(&out)], view, &BTreeMap::new()).unwrap()
    }

    #[test]
    fn contractions_count_multiply_adds_and_other_kinds_elements() {
        let work = work_of;
        let mm = node("MatMul", 2, vec![]);
        assert_eq!(
            work(&mm, &[&[2, 8, 16], &[16, 4]], &[2, 8, 4], false),
            (Kind::Contraction, 1024.0)
        );
        let gemm = node("Gemm", 2, vec![("transA", AttrValue::Int(1))]);
        assert_eq!(
            work(&gemm, &[&[16, 8], &[16, 4]], &[8, 4], false),
            (Kind::Contraction, 512.0)
        );
        let eq = AttrValue::String(b"bij,bjk->bik".to_vec());
        let es = node("Einsum", 2, vec![("equation", eq)]);
        assert_eq!(
            work(&es, &[&[2, 8, 16], &[2, 16, 4]], &[2, 8, 4], false),
            (Kind::Contraction, 1024.0)
        );
        let conv = node("Conv", 2, vec![]);
        assert_eq!(
            work(&conv, &[&[1, 3, 8, 8], &[4, 3, 3, 3]], &[1, 4, 6, 6], false),
            (Kind::Contraction, 144.0 * 27.0)
        );
        let add = node("Add", 2, vec![]);
        assert_eq!(
            work(&add, &[&[4, 8], &[8]], &[4, 8], false),
            (Kind::Elementwise, 32.0)
        );
        let tr = node("Transpose", 1, vec![]);
        assert_eq!(work(&tr, &[&[4, 8]], &[8, 4], false), (Kind::Copy, 32.0));
        let sm = node("ReduceSum", 1, vec![]);
        assert_eq!(work(&sm, &[&[4, 8]], &[4, 1], false), (Kind::Other, 32.0));
        assert_eq!(work(&tr, &[&[4, 8]], &[8, 4], true), (Kind::View, 0.0));
    }

    #[test]
    fn a_copy_of_whole_rows_streams_like_an_elementwise_node() {
        let work = |n: &Node, ins: &[&[i64]], out: &[i64]| work_of(n, ins, out, false).0;
        let perm = |p: &[i64]| node("Transpose", 1, vec![("perm", AttrValue::Ints(p.to_vec()))]);
        // The last axis stays last: rows of 32 are copied whole.
        let keep = perm(&[1, 0, 2]);
        assert_eq!(work(&keep, &[&[4, 8, 32]], &[8, 4, 32]), Kind::Elementwise);
        // Rows too short to stream, or the last axis moved: element by element.
        assert_eq!(work(&keep, &[&[4, 8, 2]], &[8, 4, 2]), Kind::Copy);
        let swap = perm(&[0, 2, 1]);
        assert_eq!(work(&swap, &[&[4, 32, 32]], &[4, 32, 32]), Kind::Copy);
        // A concatenation along an outer axis copies rows; along the last axis it does not
        // pass that axis through.
        let cat = |axis| node("Concat", 2, vec![("axis", AttrValue::Int(axis))]);
        assert_eq!(
            work(&cat(0), &[&[2, 32], &[3, 32]], &[5, 32]),
            Kind::Elementwise
        );
        assert_eq!(work(&cat(1), &[&[32, 2], &[32, 3]], &[32, 5]), Kind::Copy);
    }

    #[test]
    fn a_product_costs_at_least_a_pass_over_what_it_reads() {
        let m = CostModel::default();
        let dims = BTreeMap::new();
        let mm = node("MatMul", 2, vec![]);
        let seconds = |a: &[i64], b: &[i64], out: &[i64]| {
            let (a, b, out) = (fact(a), fact(b), fact(out));
            m.node_seconds(&mm, &[Some(&a), Some(&b)], &[Some(&out)], false, &dims)
        };
        // A column of a [262144, 32] x [32, 32] product reads the whole left operand.
        let sliver = seconds(&[262144, 32], &[32, 1], &[262144, 1]);
        let pass = m.seconds(Kind::Elementwise, (262144 * 32 + 32) as f64);
        assert!(sliver > pass, "{sliver} vs {pass}");
        assert!(sliver > 10.0 * m.seconds(Kind::Contraction, (262144 * 32) as f64));
        // So 32 one-column slices cost far more than the whole product.
        let whole = seconds(&[262144, 32], &[32, 32], &[262144, 32]);
        assert!(32.0 * sliver > 4.0 * whole, "{sliver} x 32 vs {whole}");
        // The calibration's own shape reads what its curve holds: the curve's time.
        let cal = seconds(&[65536, 64], &[64, 64], &[65536, 64]);
        let curve = m.seconds(Kind::Contraction, (65536 * 64 * 64) as f64);
        assert!((cal - curve).abs() < 0.01 * curve, "{cal} vs {curve}");
        // Splitting the rows instead reads each row once: the slices cost about the whole.
        let rows = 32.0 * seconds(&[8192, 32], &[32, 32], &[8192, 32]);
        assert!(rows < 2.0 * whole, "{rows} vs {whole}");
    }

    #[test]
    fn a_node_that_reads_only_shapes_costs_its_output_not_its_input() {
        let shape = node("Shape", 1, vec![]);
        assert_eq!(
            work_of(&shape, &[&[1024, 1024, 64]], &[3], false),
            (Kind::Elementwise, 3.0)
        );
        let like = node("RandomNormalLike", 1, vec![]);
        assert_eq!(
            work_of(&like, &[&[64, 32]], &[64, 32], false),
            (Kind::Elementwise, 2048.0)
        );
    }

    /// Under its plan, a concatenation of two rows blocks along the outer axis is assembled in
    /// place: it costs a view's time (priced without the plan, it copies). A plan's run is its
    /// nodes' time plus the first touches of its arena.
    #[test]
    fn a_plans_run_is_its_nodes_and_the_memory_it_maps() {
        use memplan_ir::graph::{DeclDim, DeclType, Graph, Model};
        let mut g = Graph::default();
        let decl = DeclType::tensor(
            memplan_ir::DataType::F32,
            vec![DeclDim::Param("N".into()), DeclDim::Value(64)],
        );
        let x = g.add_input("x", decl);
        let a = g.add_node("a", "Relu", &[Some(x)], &["ra"], vec![]).1[0];
        let b = g.add_node("b", "Sigmoid", &[Some(x)], &["sb"], vec![]).1[0];
        let axis = Attribute {
            name: "axis".into(),
            value: AttrValue::Int(0),
            doc: String::new(),
        };
        let y = g
            .add_node("cat", "Concat", &[Some(a), Some(b)], &["y"], vec![axis])
            .1[0];
        g.outputs = vec![y];
        let model = Model {
            graph: g,
            ..Model::default()
        };
        let facts = memplan_ir::infer_model(&model).unwrap();
        let dims = BTreeMap::from([("N".to_string(), 4096i64)]);
        let g = &model.graph;
        let plan = crate::optimize(g, &facts, &dims, &crate::Options::default())
            .unwrap()
            .plan;
        assert_eq!(plan.assembled.len(), 1, "the concatenation is assembled");
        let m = CostModel::default();
        let (with, without) = (
            m.node_costs(g, &facts, &dims, Some(&plan)),
            m.node_costs(g, &facts, &dims, None),
        );
        assert_eq!(with[2].work, Some((Kind::View, 0.0)));
        assert_eq!(with[2].seconds, m.view_seconds);
        assert_eq!(
            without[2].work,
            Some((Kind::Elementwise, 2.0 * 4096.0 * 64.0))
        );
        assert_eq!(with[..2], without[..2]);
        let nodes: f64 = with.iter().map(|c| c.seconds).sum();
        assert_eq!(plan.arena_bytes, 2 * 4096 * 64 * 4);
        let faults = m.fault_seconds(plan.arena_bytes as f64);
        assert!((m.plan_seconds(g, &facts, &plan) - nodes - faults).abs() < 1e-12);
    }

    #[test]
    fn small_slices_cost_more_in_total_than_one_large_node() {
        let m = CostModel::default();
        let whole = m.seconds(Kind::Elementwise, 1_048_576.0);
        let split = 256.0 * m.seconds(Kind::Elementwise, 4096.0);
        assert!(split > whole, "{split} <= {whole}");
    }
}
