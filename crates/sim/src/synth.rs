//! Synthetic graphs for benches and tests: a stack of attention-like layers over `x[B, S, D]` whose
//! node count is chosen by the caller.

use memplan_ir::graph::{AttrValue, Attribute, DeclDim, DeclType, Graph};
use memplan_ir::{DataType, TensorData};

/// Nodes per layer of [`transformer`].
pub const NODES_PER_LAYER: usize = 10;

/// `layers` layers of: q = h·Wq, k = h·Wk, kᵀ, scores = q·kᵀ [B,S,S], softmax, a = p·h, r = a + h,
/// g = Relu(r), m = g·r, h' = Reshape(m) (a view). Weights are shared by all layers; the last `h` is
/// the output. Symbols: `B`, `S`; `D = 64`.
pub fn transformer(layers: usize) -> Graph {
    const D: usize = 64;
    let mut g = Graph::default();
    let x = g.add_input(
        "x",
        DeclType::tensor(
            DataType::F32,
            vec![
                DeclDim::Param("B".into()),
                DeclDim::Param("S".into()),
                DeclDim::Value(D as i64),
            ],
        ),
    );
    let wq = g.add_initializer(TensorData::from_f32(
        "wq",
        vec![D as u64, D as u64],
        &vec![0.01; D * D],
    ));
    let wk = g.add_initializer(TensorData::from_f32(
        "wk",
        vec![D as u64, D as u64],
        &vec![0.02; D * D],
    ));
    let shape = g.add_initializer(TensorData::from_i64("shape", vec![3], &[0, -1, D as i64]));
    let perm = Attribute {
        name: "perm".into(),
        value: AttrValue::Ints(vec![0, 2, 1]),
        doc: String::new(),
    };
    let axis = Attribute {
        name: "axis".into(),
        value: AttrValue::Int(-1),
        doc: String::new(),
    };
    let mut h = x;
    for l in 0..layers {
        let n = |s: &str| format!("l{l}_{s}");
        let op = |g: &mut Graph,
                  name: &str,
                  op: &str,
                  ins: &[memplan_ir::ValueId],
                  attrs: Vec<Attribute>| {
            let ins: Vec<Option<memplan_ir::ValueId>> = ins.iter().map(|&v| Some(v)).collect();
            let out = n(name);
            g.add_node(n(name), op, &ins, &[out.as_str()], attrs).1[0]
        };
        let q = op(&mut g, "q", "MatMul", &[h, wq], vec![]);
        let k = op(&mut g, "k", "MatMul", &[h, wk], vec![]);
        let kt = op(&mut g, "kt", "Transpose", &[k], vec![perm.clone()]);
        let s = op(&mut g, "scores", "MatMul", &[q, kt], vec![]);
        let p = op(&mut g, "probs", "Softmax", &[s], vec![axis.clone()]);
        let a = op(&mut g, "attn", "MatMul", &[p, h], vec![]);
        let r = op(&mut g, "res", "Add", &[a, h], vec![]);
        let gl = op(&mut g, "relu", "Relu", &[r], vec![]);
        let m = op(&mut g, "gate", "Mul", &[gl, r], vec![]);
        h = op(&mut g, "out", "Reshape", &[m, shape], vec![]);
    }
    g.outputs.push(h);
    g
}
