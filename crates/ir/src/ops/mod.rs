//! The op table: per op, its shape/type rule and its memory behaviour, one file per op family.
//!
//! Adding an op means adding an [`OpDef`] to its family's `DEFS` slice (and a kernel in `exec`).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use crate::dim::Expr;
use crate::graph::Node;
use crate::infer::{Fact, InferCtx, OpError};

pub mod axes;
pub mod elementwise;
pub mod linalg;
pub mod nn;
pub mod reduce;
pub mod shape;
#[cfg(test)]
mod tests;

/// Opset assumed when a model imports none for the default domain.
pub const DEFAULT_OPSET: i64 = 18;

/// A shape/type rule: facts for each output slot, in order.
pub type InferFn = fn(&mut InferCtx) -> Result<Vec<Fact>, OpError>;

/// Scratch bytes an op's kernel allocates while it runs, from its input and output facts.
pub type ScratchFn = fn(node: &Node, inputs: &[Option<&Fact>], outputs: &[Option<&Fact>]) -> Expr;

/// How an op's output relates to its input's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// The output is a new buffer.
    None,
    /// Output 0 shares input 0's bytes unchanged (Reshape, Squeeze, Identity, ...): it costs nothing.
    Alias,
    /// Output 0 is a sub-range of input 0's bytes when the slice is contiguous (decided at run time
    /// from concrete dims; see `exec`).
    ContiguousSlice,
}

/// Memory behaviour of an op, declared next to its shape rule.
#[derive(Clone, Copy, Debug)]
pub struct Mem {
    pub view: View,
    /// Inputs whose buffer output 0 may overwrite when the input dies here and has the output's size.
    pub inplace: &'static [usize],
    /// Scratch bytes the kernel allocates, if any.
    pub scratch: Option<ScratchFn>,
}

impl Mem {
    pub const NEW: Mem = Mem {
        view: View::None,
        inplace: &[],
        scratch: None,
    };
    pub const ALIAS: Mem = Mem {
        view: View::Alias,
        inplace: &[],
        scratch: None,
    };
    pub const ELEMENTWISE: Mem = Mem {
        view: View::None,
        inplace: &[0, 1],
        scratch: None,
    };
    pub const UNARY: Mem = Mem {
        view: View::None,
        inplace: &[0],
        scratch: None,
    };
}

/// One operator's definition.
#[derive(Clone, Copy, Debug)]
pub struct OpDef {
    pub op: &'static str,
    pub infer: InferFn,
    pub mem: Mem,
}

fn table() -> &'static BTreeMap<&'static str, &'static OpDef> {
    static TABLE: OnceLock<BTreeMap<&'static str, &'static OpDef>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = BTreeMap::new();
        for fam in [
            elementwise::DEFS,
            shape::DEFS,
            reduce::DEFS,
            linalg::DEFS,
            nn::DEFS,
        ] {
            for d in fam {
                t.insert(d.op, d);
            }
        }
        t
    })
}

/// The definition for a node's op, for the default ONNX domain only.
pub fn lookup(node: &Node) -> Option<&'static OpDef> {
    if !node.is_onnx_domain() {
        return None;
    }
    table().get(node.op.as_str()).copied()
}

/// The definition for an op name in the default domain.
pub fn lookup_op(op: &str) -> Option<&'static OpDef> {
    table().get(op).copied()
}

/// Every op with a rule, sorted by name.
pub fn supported_ops() -> Vec<&'static str> {
    table().keys().copied().collect()
}

/// How many inputs an op takes, `(min, max)`, per the ONNX spec (optional inputs count toward `max`;
/// variadic ops have `usize::MAX`). Checked before an op's rule runs, so rules may index their
/// required inputs freely. `None` for ops not listed here; their rules check arity themselves.
pub fn arity(op: &str) -> Option<(usize, usize)> {
    const V: usize = usize::MAX;
    Some(match op {
        "Add" | "Sub" | "Mul" | "Div" | "Mod" | "Pow" | "BitShift" | "BitwiseAnd" | "BitwiseOr"
        | "BitwiseXor" | "PRelu" | "Equal" | "Less" | "LessOrEqual" | "Greater"
        | "GreaterOrEqual" | "And" | "Or" | "Xor" | "MatMul" | "CastLike" | "Expand" | "Tile"
        | "GatherElements" | "GatherND" | "Gather" | "Reshape" => (2, 2),
        "Max" | "Min" | "Sum" | "Mean" | "Concat" => (1, V),
        "Where" | "Range" => (3, 3),
        "Gemm" | "LayerNormalization" | "Conv" => (2, 3),
        "MatMulInteger" => (2, 4),
        "ScatterND" | "ScatterElements" => (3, 3),
        "Slice" => (3, 5),
        "TopK" => (2, 2),
        "Einsum" => (1, V),
        "Split" => (1, 2),
        "Squeeze" | "Unsqueeze" => (1, 2),
        "Clip" => (1, 3),
        "Trilu" | "CumSum" => (1, 2),
        "Not" | "IsNaN" | "IsInf" | "Cast" | "Neg" | "Abs" | "Sign" | "Floor" | "Ceil"
        | "Round" | "Reciprocal" | "Sqrt" | "Exp" | "Log" | "Tanh" | "Sigmoid" | "Relu" | "Erf"
        | "Shape" | "Size" | "Transpose" | "Flatten" | "Identity" | "NonZero" | "Softmax"
        | "LogSoftmax" | "Hardmax" | "ArgMax" | "ArgMin" | "ConstantOfShape"
        | "GlobalAveragePool" | "GlobalMaxPool" | "MaxPool" | "AveragePool" => (1, 1),
        n if n.starts_with("Reduce") => (1, 2),
        _ => return None,
    })
}

/// Whether output 0 of `node` is a zero-copy view of input 0, decided from the symbolic facts so that
/// the simulator and the executor agree for every value of the symbols.
///
/// `Alias` ops always are. A `Slice` is when its steps are all 1 and the kept region is one
/// contiguous run: every axis before the first cut axis has extent 1 and every axis after it is kept
/// whole.
pub fn is_view(node: &Node, inputs: &[Option<&Fact>], outputs: &[Option<&Fact>]) -> bool {
    let Some(def) = lookup(node) else {
        return false;
    };
    match def.mem.view {
        View::None => false,
        View::Alias => true,
        View::ContiguousSlice => {
            let (Some(Some(inp)), Some(Some(out))) = (inputs.first(), outputs.first()) else {
                return false;
            };
            if node.inputs.len() > 4 {
                let steps = inputs
                    .get(4)
                    .copied()
                    .flatten()
                    .and_then(|f| f.value.as_ref())
                    .and_then(|k| k.as_consts());
                match (node.inputs[4], steps) {
                    (None, _) => {}
                    (Some(_), Some(s)) if s.iter().all(|&x| x == 1) => {}
                    _ => return false,
                }
            }
            let (Some(a), Some(b)) = (&inp.shape, &out.shape) else {
                return false;
            };
            contiguous_region(a, b)
        }
    }
}

/// Whether taking a prefix-aligned box of extents `out` from a row-major tensor of `dims` can be one
/// contiguous run: axes before the first cut axis have extent 1, axes after it are whole.
pub fn contiguous_region(dims: &[Expr], out: &[Expr]) -> bool {
    if dims.len() != out.len() {
        return false;
    }
    let Some(k) = (0..dims.len()).find(|&k| dims[k] != out[k]) else {
        return true;
    };
    (0..k).all(|j| out[j].as_const() == Some(1)) && (k + 1..dims.len()).all(|j| dims[j] == out[j])
}
