//! The op table: one [`OpDef`] per op (arity, shape/type rule, memory rule, axis flow), declared in
//! its family's file `ops/<family>.rs`; the executor's kernel entry lives in the same-named
//! `exec::ops::<family>` (a test there checks the two sides match, see [`FAMILIES`]).
//!
//! Adding an op means adding one line to its family's `DEFS` slice, e.g.
//! `OpDef::new("Relu", ONE, unary, Mem::UNARY).flow(axes::first_input)`, and its kernel in `exec`.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use crate::dim::Expr;
use crate::graph::Node;
use crate::infer::{Fact, InferCtx, OpError};

pub mod attention;
pub mod axes;
pub mod basic;
pub mod control;
pub mod elementwise;
#[cfg(test)]
mod fold_tests;
pub mod image;
pub mod index;
pub mod linalg;
pub mod loss;
pub mod ml;
pub mod movement;
pub mod nn;
pub mod quant;
pub mod random;
pub mod recurrent;
pub mod reduce;
pub mod sequence;
pub mod signal;
#[cfg(test)]
mod tests;
pub mod text;
pub mod training;
pub mod vision;

/// Opset assumed when a model imports none for the default domain.
pub const DEFAULT_OPSET: i64 = 18;

/// A shape/type rule: facts for each output slot, in order.
pub type InferFn = fn(&mut InferCtx) -> Result<Vec<Fact>, OpError>;

/// Scratch bytes an op's kernel allocates while it runs, from the node, the opset and its input and
/// output facts: the high-water mark of the scratch the executor's kernel holds at once, for every
/// value of the symbols (an extent that may or may not be 1 is decided with `min(d, 2) - 1`).
pub type ScratchFn =
    fn(node: &Node, opset: i64, inputs: &[Option<&Fact>], outputs: &[Option<&Fact>]) -> Expr;

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
    /// Output 0 shares input 0's bytes when its element type is input 0's (a `Cast` to the type it
    /// has: every element is converted to itself).
    SameType,
}

/// Memory behaviour of an op, declared next to its shape rule.
#[derive(Clone, Copy, Debug)]
pub struct Mem {
    pub view: View,
    /// Inputs whose buffer output 0 may overwrite when the input dies here and has the output's size
    /// and type. The executor runs every such decision in place, without a copy.
    pub inplace: &'static [usize],
    /// How the executor writes in place. `true`: elementwise (output element `i` reads only element
    /// `i` of each input, broadcast inputs aside); the op runs on staged chunks, so the same value
    /// may also be read through another input slot. `false`: output 0 starts as a copy of input 0
    /// and is modified (Trilu, CumSum, Scatter*); no other input slot may read the overwritten buffer.
    pub inplace_elementwise: bool,
    /// Scratch bytes the kernel allocates, if any.
    pub scratch: Option<ScratchFn>,
}

impl Mem {
    pub const NEW: Mem = Mem {
        view: View::None,
        inplace: &[],
        inplace_elementwise: false,
        scratch: None,
    };
    pub const ALIAS: Mem = Mem {
        view: View::Alias,
        inplace: &[],
        inplace_elementwise: false,
        scratch: None,
    };
    pub const ELEMENTWISE: Mem = Mem {
        view: View::None,
        inplace: &[0, 1],
        inplace_elementwise: true,
        scratch: None,
    };
    pub const UNARY: Mem = Mem {
        view: View::None,
        inplace: &[0],
        inplace_elementwise: true,
        scratch: None,
    };
    /// Output 0 is input 0 modified (Trilu, CumSum, Scatter*): it may take over input 0's buffer.
    pub const OVERWRITE: Mem = Mem {
        view: View::None,
        inplace: &[0],
        inplace_elementwise: false,
        scratch: None,
    };
}

/// How many inputs an op takes, `(min, max)`, per the ONNX spec: optional inputs count toward
/// `max`; variadic ops have `usize::MAX`.
pub type Arity = (usize, usize);

/// Exactly one input.
pub const ONE: Arity = (1, 1);
/// Exactly two inputs.
pub const TWO: Arity = (2, 2);
/// Exactly three inputs.
pub const THREE: Arity = (3, 3);
/// One or more inputs.
pub const VARIADIC: Arity = (1, usize::MAX);

/// One operator's definition: everything the analysis knows about it.
#[derive(Clone, Copy, Debug)]
pub struct OpDef {
    pub op: &'static str,
    /// Checked before the rule runs, so rules may index their required inputs freely.
    pub arity: Arity,
    /// Shape/type rule.
    pub infer: InferFn,
    /// Memory rule.
    pub mem: Mem,
    /// Axis flow for chunking (see [`axes`]); `None`: nothing may be split through the op.
    pub flow: Option<axes::FlowFn>,
    /// Which input elements an output element's value comes from (see [`Values`]): what the value
    /// sets of [`crate::value_set`] propagate through.
    pub values: Values,
    /// The input that holds the output's shape (`Reshape`'s and `Expand`'s target,
    /// `ConstantOfShape`'s shape): a chunk of the output needs its own.
    pub shape_input: Option<usize>,
    /// For a contraction (`MatMul`, `Gemm`, `Einsum`, `Conv`): the multiply-adds per output element
    /// (the extent of what it sums over), what its run time grows with besides the output size.
    pub contracted: Option<ContractedFn>,
    /// For an op of positions (`Trilu`, `EyeLike`): how it selects by an element's row and column
    /// (see [`Positions`]), a form chunking can write with the positions as values.
    pub positions: Option<PositionsFn>,
    /// For a movement op: how each output element's place in input 0 follows from its own (see
    /// [`Moves`]), what chunking composes along a chain of them.
    pub moves: Option<Moves>,
}

/// How a movement op places each output element at an element of input 0, an affine function of
/// the output element's index given the node's known inputs: a chain of them is one map, which
/// chunking proves to be a gather along one axis (`plan::chunk::gathers`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moves {
    /// The same elements in the same order, another shape (`Reshape`, `Flatten`, `Squeeze`,
    /// `Unsqueeze`, `Identity`).
    Order,
    /// Along each axis input 3 names (all when absent), element `start + step * i`: starts,
    /// ends and steps in inputs 1, 2 and 4 (`Slice`).
    Strided,
    /// Output axis `k` is input axis `perm[k]` (`Transpose`; reversed when `perm` is absent).
    Permuted,
    /// Along attribute `axis`, the element input 1 names (`Gather`).
    Indexed,
    /// Input 0, where the index tuples of input 1 (of its last extent, addressing the leading
    /// axes) name, replaced by the matching slices of input 2 (`ScatterND`, without a reduction).
    Scatters,
    /// Along each axis, the element [`movement::pad_map`] names for the node's amounts (inputs 1
    /// and 3, or the `pads` attribute) and mode, the constant (input 2, zero by default) where it
    /// names none (`Pad`).
    Padded,
}

/// An op whose output element `[.., i, j]` (row `i`, column `j`: the last two axes) is kept (or
/// set) where `j` compares with `i + k` as [`Positions::compare`] says, and is zero elsewhere; `k`
/// is the diagonal offset. Its axis flow mixes the last two axes (a slice of rows moves the
/// diagonal), but the same op is `Where(j cmp i + k, x, 0)` of index values, which passes both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Positions {
    pub compare: Compare,
    pub offset: Offset,
    /// `Some(i)`: the kept elements are input `i`'s (`Trilu`); `None`: they are set to one, and
    /// the output has rank 2 (`EyeLike`).
    pub keeps: Option<usize>,
}

/// How a column `j` compares with `i + k` where [`Positions`] keeps an element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compare {
    AtLeast,
    AtMost,
    Equal,
}

impl Compare {
    /// The ONNX comparison op of `j` with `i + k`.
    pub fn onnx_op(self) -> &'static str {
        match self {
            Compare::AtLeast => "GreaterOrEqual",
            Compare::AtMost => "LessOrEqual",
            Compare::Equal => "Equal",
        }
    }
}

/// Where [`Positions`]'s diagonal offset `k` comes from; 0 where it is absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offset {
    /// An optional scalar input.
    Input(usize),
    /// An integer attribute.
    Attr(&'static str),
}

/// See [`OpDef::positions`].
pub type PositionsFn = fn(&Node) -> Positions;

/// See [`OpDef::contracted`]: `None` when the facts are incomplete.
pub type ContractedFn = fn(&Node, &[Option<&Fact>]) -> Option<Expr>;

/// How an op's output element values relate to its input element values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Values {
    /// Nothing is claimed.
    Opaque,
    /// Pointwise: each output element is the op applied to the corresponding (broadcast) element of
    /// each input, the same function for every element (the elementwise family).
    Pointwise,
    /// Every element of every output is a copy of an element of one of these inputs (movement,
    /// gathers, views).
    Selects(&'static [usize]),
    /// Every element of every output is a copy of an element of some input (`Concat`).
    SelectsAny,
    /// No output value depends on an input element: only on the inputs' shapes and types (`Shape`,
    /// `Size`, the `*Like` generators). The op reads no input element.
    Shapes,
    /// Every element of the output is the op's one fill value: the one element of its `value`
    /// tensor attribute, a float zero when it has none (`ConstantOfShape`). The op reads no input
    /// element.
    Fills,
}

impl OpDef {
    /// An op without an axis flow; add one with [`OpDef::flow`].
    pub const fn new(op: &'static str, arity: Arity, infer: InferFn, mem: Mem) -> OpDef {
        OpDef {
            op,
            arity,
            infer,
            mem,
            flow: None,
            values: Values::Opaque,
            shape_input: None,
            contracted: None,
            positions: None,
            moves: None,
        }
    }

    /// The same op, an op of positions (see [`OpDef::positions`]).
    pub const fn positions(self, f: PositionsFn) -> OpDef {
        OpDef {
            positions: Some(f),
            ..self
        }
    }

    /// The same op, a movement op (see [`OpDef::moves`]).
    pub const fn moves(self, m: Moves) -> OpDef {
        OpDef {
            moves: Some(m),
            ..self
        }
    }

    /// The same op, a contraction of `f` multiply-adds per output element (see
    /// [`OpDef::contracted`]).
    pub const fn contracted(self, f: ContractedFn) -> OpDef {
        OpDef {
            contracted: Some(f),
            ..self
        }
    }

    /// The same op, its input `k` holding the output's shape (see [`OpDef::shape_input`]).
    pub const fn shape_input(self, k: usize) -> OpDef {
        OpDef {
            shape_input: Some(k),
            ..self
        }
    }

    /// The same op, pointwise (see [`Values::Pointwise`]).
    pub const fn pointwise(self) -> OpDef {
        OpDef {
            values: Values::Pointwise,
            ..self
        }
    }

    /// The same op, its outputs made of elements of `inputs` (see [`Values::Selects`]).
    pub const fn selects(self, inputs: &'static [usize]) -> OpDef {
        OpDef {
            values: Values::Selects(inputs),
            ..self
        }
    }

    /// The same op, its outputs made of elements of its inputs (see [`Values::SelectsAny`]).
    pub const fn selects_any(self) -> OpDef {
        OpDef {
            values: Values::SelectsAny,
            ..self
        }
    }

    /// The same op, reading only its inputs' shapes and types (see [`Values::Shapes`]).
    pub const fn shapes_only(self) -> OpDef {
        OpDef {
            values: Values::Shapes,
            ..self
        }
    }

    /// The same op, filling its output with one value (see [`Values::Fills`]).
    pub const fn fills(self) -> OpDef {
        OpDef {
            values: Values::Fills,
            ..self
        }
    }

    /// The same op with axis flow `f`.
    pub const fn flow(self, f: axes::FlowFn) -> OpDef {
        OpDef {
            flow: Some(f),
            ..self
        }
    }
}

/// Every family: its name (the file `ops/<name>.rs`, and `exec::ops::<name>` for the kernels) and
/// its definitions.
pub const FAMILIES: &[(&str, &[OpDef])] = &[
    ("basic", basic::DEFS),
    ("elementwise", elementwise::DEFS),
    ("index", index::DEFS),
    ("linalg", linalg::DEFS),
    ("movement", movement::DEFS),
    ("nn", nn::DEFS),
    ("reduce", reduce::DEFS),
    ("image", image::DEFS),
    ("signal", signal::DEFS),
    ("random", random::DEFS),
    ("control", control::DEFS),
    ("quant", quant::DEFS),
    ("attention", attention::DEFS),
    ("recurrent", recurrent::DEFS),
    ("training", training::DEFS),
    ("ml", ml::DEFS),
    ("text", text::DEFS),
    ("loss", loss::DEFS),
    ("vision", vision::DEFS),
    ("sequence", sequence::DEFS),
];

fn table() -> &'static BTreeMap<&'static str, &'static OpDef> {
    static TABLE: OnceLock<BTreeMap<&'static str, &'static OpDef>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = BTreeMap::new();
        for (_, fam) in FAMILIES {
            for d in *fam {
                t.insert(d.op, d);
            }
        }
        t
    })
}

/// The table key of a node's op: its name in the default domain, `<domain>.<name>` in another
/// (`ai.onnx.ml.Binarizer`); the [`OpDef::op`] of an op outside the default domain is that key.
pub fn op_key(node: &Node) -> std::borrow::Cow<'_, str> {
    if node.is_onnx_domain() {
        std::borrow::Cow::Borrowed(node.op.as_str())
    } else {
        std::borrow::Cow::Owned(format!("{}.{}", node.domain, node.op))
    }
}

/// The definition for a node's op (see [`op_key`] for ops outside the default domain).
pub fn lookup(node: &Node) -> Option<&'static OpDef> {
    table().get(&*op_key(node)).copied()
}

/// The definition for an op name in the default domain, or an [`op_key`] of another.
pub fn lookup_op(op: &str) -> Option<&'static OpDef> {
    table().get(op).copied()
}

/// Every op with a rule, sorted by name.
pub fn supported_ops() -> Vec<&'static str> {
    table().keys().copied().collect()
}

/// How many inputs an op takes (its [`OpDef::arity`]); `None` for ops without a definition.
pub fn arity(op: &str) -> Option<Arity> {
    lookup_op(op).map(|d| d.arity)
}

/// Whether output 0 of `node` is a zero-copy view of input 0, decided from the symbolic facts so that
/// the simulator and the executor agree for every value of the symbols.
///
/// `Alias` ops always are; `SameType` ops when their output's element type is their input's. A
/// `Slice` is when its steps are all 1 and the kept region is one
/// contiguous run: every axis before the first cut axis has extent 1 and every axis after it is kept
/// whole.
pub fn is_view(node: &Node, inputs: &[Option<&Fact>], outputs: &[Option<&Fact>]) -> bool {
    let Some(def) = lookup(node) else {
        return false;
    };
    match def.mem.view {
        View::None => false,
        View::Alias => true,
        View::SameType => {
            let (Some(Some(inp)), Some(Some(out))) = (inputs.first(), outputs.first()) else {
                return false;
            };
            inp.dtype.is_some() && inp.dtype == out.dtype
        }
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

// ---- Helpers for scratch rules (what `exec` kernels allocate, mirrored exactly). ----

/// Element count of a fact's shape.
pub(crate) fn numel(f: Option<&Fact>) -> Option<Expr> {
    Some(Expr::product(f?.shape.as_ref()?.iter()))
}

/// Bytes per element the kernels compute in: f16/bf16 widen to f32, bool is one byte; `None` for
/// types no kernel computes in (an op on them fails before it allocates anything).
pub(crate) fn compute_size(d: crate::dtype::DataType) -> Option<i64> {
    use crate::dtype::DataType as D;
    match d {
        D::Bool | D::U8 | D::I8 => Some(1),
        D::I16 | D::U16 => Some(2),
        D::F32 | D::I32 | D::U32 | D::F16 | D::BF16 => Some(4),
        D::F64 | D::I64 | D::U64 => Some(8),
        _ => None,
    }
}

/// Whether the type is f16 or bf16 (widened to f32 in scratch by the kernels).
pub(crate) fn is_half(d: crate::dtype::DataType) -> bool {
    matches!(
        d,
        crate::dtype::DataType::F16 | crate::dtype::DataType::BF16
    )
}

/// 1 when the extent `d` is greater than 1, else 0, for every value of its symbols (all >= 1):
/// `min(d, 2) - 1`, folded to a constant when it can be proven.
pub(crate) fn gt1(d: &Expr) -> Expr {
    if let Some(c) = d.as_const() {
        return Expr::int(i64::from(c > 1));
    }
    if d.prove_ge(&Expr::int(2)) == Some(true) {
        return Expr::one();
    }
    d.min(&Expr::int(2)) - 1
}

/// The disjunction of 0/1 indicators: their max (0 when none).
pub(crate) fn any_of(terms: Vec<Expr>) -> Expr {
    let mut kept = Vec::new();
    for t in terms {
        match t.as_const() {
            Some(0) => {}
            Some(_) => return Expr::one(),
            None => kept.push(t),
        }
    }
    Expr::max_of(kept.iter()).unwrap_or_else(Expr::zero)
}

/// 1 when the executor transposes an input of `shape` before reducing the axes marked in `red` (a
/// reduced axis of extent > 1 is followed by a kept axis of extent > 1), else 0.
pub(crate) fn needs_transpose(shape: &[Expr], red: &[bool]) -> Expr {
    let mut terms = Vec::new();
    for i in 0..shape.len() {
        if !red[i] {
            continue;
        }
        let gi = gt1(&shape[i]);
        if gi.is_zero() {
            continue;
        }
        for j in i + 1..shape.len() {
            if !red[j] {
                terms.push(&gi * gt1(&shape[j]));
            }
        }
    }
    any_of(terms)
}
