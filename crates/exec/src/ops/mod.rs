//! Op implementations: each ONNX op maps to a function from input tensors to output tensors, built on
//! the kernels. Outputs are allocated through [`OpCtx`] so that they are charged to the run.
//!
//! The families are those of `memplan_ir::ops`: an op's semantics (arity, shape, memory and axis
//! rules) are in `ir/src/ops/<family>.rs` and its entry here in `ops/<family>.rs` (see
//! [`FAMILIES`]; a test checks that both sides list the same ops).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use memplan_ir::graph::{AttrValue, Node};
use memplan_ir::DataType;

use crate::kernels::matmul::KernelError;
use crate::mem::{MemStats, ScratchBuf};
use crate::tensor::{Element, Tensor, TensorError};

/// Runs `$body` with the type alias `$T` bound to the Rust type of data type `$dt`, among the listed
/// `DataType => type` pairs; any other type evaluates `$else`.
macro_rules! dispatch {
    ($dt:expr, $T:ident => $body:expr, [$($d:ident => $t:ty),* $(,)?], $else:expr) => {
        match $dt {
            $(memplan_ir::DataType::$d => {
                #[allow(dead_code)]
                type $T = $t;
                $body
            })*
            #[allow(unreachable_patterns)]
            _ => $else,
        }
    };
}

/// Runs `$body` with `$T` a plain unsigned type of element size `$es` bytes (data movement moves bits).
macro_rules! by_size {
    ($es:expr, $T:ident => $body:expr) => {
        match $es {
            1 => {
                type $T = u8;
                $body
            }
            2 => {
                type $T = u16;
                $body
            }
            4 => {
                type $T = u32;
                $body
            }
            8 => {
                type $T = u64;
                $body
            }
            n => return $crate::ops::unsupported(format!("elements of {n} bytes")),
        }
    };
}

pub mod attention;
pub mod basic;
pub(crate) mod control;
pub mod elementwise;
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
#[cfg(test)]
pub(crate) mod testutil;
pub mod text;
pub mod training;
pub mod vision;

/// An op failed on its inputs (bad values, unsupported configuration).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum OpFail {
    #[error("{0}")]
    Invalid(String),
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error(transparent)]
    Tensor(#[from] TensorError),
}

impl From<KernelError> for OpFail {
    fn from(e: KernelError) -> Self {
        match e {
            KernelError::Unsupported(m) => OpFail::Unsupported(m),
            KernelError::Alloc(a) => OpFail::Tensor(TensorError::Alloc(a)),
            e => OpFail::Invalid(e.to_string()),
        }
    }
}

impl From<crate::mem::AllocError> for OpFail {
    fn from(e: crate::mem::AllocError) -> Self {
        OpFail::Tensor(TensorError::Alloc(e))
    }
}

/// Shorthand for an unsupported-configuration failure.
pub fn unsupported<T>(msg: impl Into<String>) -> Result<T, OpFail> {
    Err(OpFail::Unsupported(msg.into()))
}

/// Shorthand for an invalid-input failure.
pub fn fail<T>(msg: impl Into<String>) -> Result<T, OpFail> {
    Err(OpFail::Invalid(msg.into()))
}

/// What an op implementation sees.
pub struct OpCtx<'a> {
    pub node: &'a Node,
    pub opset: i64,
    /// The plan decided that output 0 is a zero-copy view of input 0 (see `memplan_ir::ops::is_view`);
    /// the implementation must then return a view, and a copy otherwise.
    pub view: bool,
    pub stats: &'a Arc<MemStats>,
}

impl OpCtx<'_> {
    /// A zeroed output tensor charged to the run. In a planned run it is the next planned output
    /// range of this node when the size matches (outputs are expected in output order), else a
    /// counted heap buffer that the interpreter copies into the planned range afterwards.
    pub fn alloc(&self, dtype: DataType, shape: &[usize]) -> Result<Tensor, OpFail> {
        Ok(Tensor::zeros_planned(dtype, shape, self.stats)?)
    }

    /// An output tensor placed like [`OpCtx::alloc`] whose contents are unspecified (zeros, or
    /// stale values of a reused buffer): only for an op that writes every element of it.
    pub fn alloc_for_overwrite(&self, dtype: DataType, shape: &[usize]) -> Result<Tensor, OpFail> {
        Ok(Tensor::for_overwrite_planned(dtype, shape, self.stats)?)
    }

    /// A typed output tensor filled from `values` (placed like [`OpCtx::alloc`]).
    pub fn from_vec<T: Element>(&self, shape: &[usize], values: &[T]) -> Result<Tensor, OpFail> {
        let n: usize = shape.iter().product();
        if n != values.len() {
            return Ok(Tensor::from_vec(shape, values, Some(self.stats))?);
        }
        let mut t = Tensor::zeros_planned(T::DTYPE, shape, self.stats)?;
        t.data_mut::<T>()?.copy_from_slice(values);
        Ok(t)
    }

    /// A counted scratch buffer of `n` elements, alive until dropped (see `mem::scratch`).
    pub fn scratch<T: bytemuck::Pod>(&self, n: usize) -> Result<ScratchBuf<T>, OpFail> {
        Ok(crate::mem::scratch(n, Some(self.stats))?)
    }

    /// Whether the node has an attribute `name`.
    pub fn has(&self, name: &str) -> bool {
        self.attr(name).is_some()
    }

    fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.node.attr(name)
    }

    fn kind_err<T>(&self, name: &str, want: &str, got: &AttrValue) -> Result<T, OpFail> {
        fail(format!(
            "attribute '{name}' must be {want}, got {}",
            got.kind_name()
        ))
    }

    pub fn int(&self, name: &str, default: i64) -> Result<i64, OpFail> {
        match self.attr(name) {
            None => Ok(default),
            Some(AttrValue::Int(v)) => Ok(*v),
            Some(o) => self.kind_err(name, "INT", o),
        }
    }

    pub fn opt_int(&self, name: &str) -> Result<Option<i64>, OpFail> {
        match self.attr(name) {
            None => Ok(None),
            Some(AttrValue::Int(v)) => Ok(Some(*v)),
            Some(o) => self.kind_err(name, "INT", o),
        }
    }

    /// The data type named by INT attribute `name` (an ONNX `TensorProto.DataType` code); `None`
    /// when absent. A code that names no type is an error (as `InferCtx::attr_dtype` in `ir`).
    pub fn dtype(&self, name: &str) -> Result<Option<DataType>, OpFail> {
        self.opt_int(name)?
            .map(|c| DataType::from_attr(name, c).map_err(OpFail::Invalid))
            .transpose()
    }

    pub fn float(&self, name: &str, default: f32) -> Result<f32, OpFail> {
        match self.attr(name) {
            None => Ok(default),
            Some(AttrValue::Float(v)) => Ok(*v),
            Some(o) => self.kind_err(name, "FLOAT", o),
        }
    }

    pub fn opt_float(&self, name: &str) -> Result<Option<f32>, OpFail> {
        match self.attr(name) {
            None => Ok(None),
            Some(AttrValue::Float(v)) => Ok(Some(*v)),
            Some(o) => self.kind_err(name, "FLOAT", o),
        }
    }

    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, OpFail> {
        match self.attr(name) {
            None => Ok(None),
            Some(AttrValue::Ints(v)) => Ok(Some(v.clone())),
            Some(o) => self.kind_err(name, "INTS", o),
        }
    }

    pub fn floats(&self, name: &str) -> Result<Option<Vec<f32>>, OpFail> {
        match self.attr(name) {
            None => Ok(None),
            Some(AttrValue::Floats(v)) => Ok(Some(v.clone())),
            Some(o) => self.kind_err(name, "FLOATS", o),
        }
    }

    pub fn string(&self, name: &str) -> Result<Option<String>, OpFail> {
        match self.attr(name) {
            None => Ok(None),
            Some(AttrValue::String(v)) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
            Some(o) => self.kind_err(name, "STRING", o),
        }
    }

    pub fn tensor_attr(&self, name: &str) -> Result<Option<&memplan_ir::TensorData>, OpFail> {
        match self.attr(name) {
            None => Ok(None),
            Some(AttrValue::Tensor(t)) => Ok(Some(t)),
            Some(o) => self.kind_err(name, "TENSOR", o),
        }
    }
}

/// Input `i`, required.
pub fn req<'t>(inputs: &[Option<&'t Tensor>], i: usize) -> Result<&'t Tensor, OpFail> {
    match inputs.get(i) {
        Some(Some(t)) => Ok(t),
        _ => fail(format!("input {i} is required")),
    }
}

/// Input `i` when given (absent inputs and empty names are `None`).
pub fn opt<'t>(inputs: &[Option<&'t Tensor>], i: usize) -> Option<&'t Tensor> {
    inputs.get(i).copied().flatten()
}

/// The elements of `t` reinterpreted as `T` (same size as the element type; used by data movement).
pub fn raw<T: bytemuck::Pod>(t: &Tensor) -> Result<&[T], OpFail> {
    bytemuck::try_cast_slice(t.bytes()).map_err(|e| {
        OpFail::Invalid(format!(
            "tensor bytes as {}: {e}",
            std::any::type_name::<T>()
        ))
    })
}

/// The elements of `t` reinterpreted as `T`, writable.
pub fn raw_mut<T: bytemuck::Pod>(t: &mut Tensor) -> Result<&mut [T], OpFail> {
    bytemuck::try_cast_slice_mut(t.bytes_mut()?).map_err(|e| {
        OpFail::Invalid(format!(
            "tensor bytes as {}: {e}",
            std::any::type_name::<T>()
        ))
    })
}

/// A scalar (or one-element) operand as i64.
pub fn scalar_i64(t: &Tensor, what: &str) -> Result<i64, OpFail> {
    let v = t.to_i64_vec()?;
    match v.as_slice() {
        [x] => Ok(*x),
        _ => fail(format!("{what} must hold one element, has {}", v.len())),
    }
}

/// A shape operand as non-negative dims.
pub fn dims_of(t: &Tensor, what: &str) -> Result<Vec<usize>, OpFail> {
    t.to_i64_vec()?
        .into_iter()
        .map(|d| {
            usize::try_from(d)
                .map_err(|_| OpFail::Invalid(format!("{what} has a negative dim {d}")))
        })
        .collect()
}

/// Normalizes a possibly negative axis.
pub fn axis(a: i64, rank: usize) -> Result<usize, OpFail> {
    let r = rank as i64;
    let x = if a < 0 { a + r } else { a };
    if x < 0 || x >= r.max(1) {
        return fail(format!("axis {a} is out of range for rank {rank}"));
    }
    Ok(x as usize)
}

/// An op implementation.
pub type OpFn = fn(&OpCtx, &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail>;

/// An op whose output 0 is input 0 modified (Trilu, CumSum, Scatter*; `Mem::OVERWRITE` in the op
/// table): it turns `out`, which holds input 0's bytes, into the output. It must not read input 0's
/// data (only its type and shape), so that `out` may be input 0's own buffer when the op runs in
/// place ([`crate::inplace`]).
pub type OverwriteFn = fn(&OpCtx, &[Option<&Tensor>], &mut [u8]) -> Result<(), OpFail>;

/// Runs an [`OverwriteFn`] on a new output that starts as a copy of input 0.
pub fn copy_then(
    ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
    f: OverwriteFn,
) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let mut out = ctx.alloc(x.dtype, &x.shape)?;
    out.bytes_mut()?.copy_from_slice(x.bytes());
    f(ctx, inputs, out.bytes_mut()?)?;
    Ok(vec![out])
}

/// The overwrite form of an op (default domain), if it has one.
pub fn overwrite(op: &str) -> Option<OverwriteFn> {
    [index::OVERWRITE, movement::OVERWRITE, reduce::OVERWRITE]
        .iter()
        .flat_map(|fam| fam.iter())
        .find(|(name, _)| *name == op)
        .map(|(_, f)| *f)
}

/// `bytes` as elements of `T`.
pub fn cast_mut<T: bytemuck::Pod>(bytes: &mut [u8]) -> Result<&mut [T], OpFail> {
    bytemuck::try_cast_slice_mut(bytes).map_err(|e| {
        OpFail::Invalid(format!(
            "tensor bytes as {}: {e}",
            std::any::type_name::<T>()
        ))
    })
}

/// Every family, named as in `memplan_ir::ops::FAMILIES`, with its implementations.
pub const FAMILIES: &[(&str, &[(&str, OpFn)])] = &[
    ("basic", basic::OPS),
    ("elementwise", elementwise::OPS),
    ("index", index::OPS),
    ("linalg", linalg::OPS),
    ("movement", movement::OPS),
    ("nn", nn::OPS),
    ("reduce", reduce::OPS),
    ("image", image::OPS),
    ("signal", signal::OPS),
    ("random", random::OPS),
    ("control", control::OPS),
    ("quant", quant::OPS),
    ("attention", attention::OPS),
    ("recurrent", recurrent::OPS),
    ("training", training::OPS),
    ("ml", ml::OPS),
    ("text", text::OPS),
    ("loss", loss::OPS),
    ("vision", vision::OPS),
    ("sequence", sequence::OPS),
];

fn table() -> &'static BTreeMap<&'static str, OpFn> {
    static T: OnceLock<BTreeMap<&'static str, OpFn>> = OnceLock::new();
    T.get_or_init(|| {
        let mut m = BTreeMap::new();
        for (_, fam) in FAMILIES {
            for (name, f) in *fam {
                m.insert(*name, *f);
            }
        }
        m
    })
}

/// The implementation of a node's op (keyed like the op table, `memplan_ir::ops::op_key`).
pub fn lookup(node: &Node) -> Option<OpFn> {
    table().get(&*memplan_ir::ops::op_key(node)).copied()
}

/// Ops the executor implements, sorted.
pub fn implemented() -> Vec<&'static str> {
    table().keys().copied().collect()
}
