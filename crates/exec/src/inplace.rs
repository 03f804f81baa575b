//! In-place execution: output 0 of a node written over the arena range of an input that dies there,
//! as a checked plan decides.
//!
//! Kernels take `&[T]` inputs and a `&mut [T]` output, so handing an op an output that aliases one of
//! its inputs would be undefined behaviour. Two sound paths instead, both bit-identical to the
//! normal run:
//!
//! - **staged**: for the elementwise ops of [`supports_inplace`] whose other inputs have the output's
//!   shape or one element, the op runs on consecutive chunks of the flattened output. Each chunk of
//!   the overwritten input (and of any input reading the same bytes) is first copied to a small
//!   staging buffer ([`STAGE_BYTES`], not charged to the run: like a kernel's stack, its size does
//!   not grow with the model), and the op writes its output chunk straight into the arena. The op's
//!   own code computes every element, and an elementwise kernel computes each element the same way
//!   whatever slice it is given (the executor's kernel invariant), so the bits are the normal run's.
//! - **broadcast arithmetic**: `Add`/`Sub`/`Mul`/`Div` whose other input broadcasts are computed
//!   element by element over the arena range (read `a[i]`, `b[j]`, write `a[i]`) with the scalar
//!   functions the `Add`..`Div` kernels use ([`Arith`] for f32/f64/i32/i64; f16/bf16 through f32).
//!
//! Anything else is not run in place: the interpreter computes into a heap buffer and copies it over
//! the dead input, which costs the output's size beyond the plan (and is reported).

use std::sync::Arc;

use memplan_ir::DataType;

use crate::arena::{self, Arena};
use crate::kernels::elementwise::{broadcast_shapes, Arith};
use crate::ops::{OpCtx, OpFail, OpFn};
use crate::tensor::{elem_size, Tensor};

/// Bytes of the overwritten input staged at a time.
pub const STAGE_BYTES: usize = 64 << 10;

/// Elementwise ops whose output element `i` depends only on element `i` of each full-shape input
/// (and on one-element inputs): run in place through the staged path.
const STAGED: &[&str] = &[
    "Abs",
    "Acos",
    "Acosh",
    "Add",
    "And",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "BitShift",
    "BitwiseAnd",
    "BitwiseNot",
    "BitwiseOr",
    "BitwiseXor",
    "Ceil",
    "Celu",
    "Clip",
    "Cos",
    "Cosh",
    "Div",
    "Elu",
    "Erf",
    "Exp",
    "Floor",
    "Gelu",
    "HardSigmoid",
    "HardSwish",
    "LeakyRelu",
    "Log",
    "Max",
    "Mean",
    "Min",
    "Mish",
    "Mod",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "Pow",
    "PRelu",
    "Reciprocal",
    "Relu",
    "Round",
    "Selu",
    "Shrink",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Sub",
    "Sum",
    "Tan",
    "Tanh",
    "ThresholdedRelu",
    "Where",
    "Xor",
];

/// Whether the executor can run `op` (default domain) in place without a copy, when the overwritten
/// input has exactly the output's shape and dtype and each other input has the output's shape or one
/// element (`Add`, `Sub`, `Mul`, `Div`: any broadcastable other input).
///
/// The planner should plan in-place reuse only for these ops; for any other, a planned run computes
/// the output on the heap and copies it over the dead input, exceeding the planned peak.
pub fn supports_inplace(op: &str) -> bool {
    STAGED.contains(&op)
}

/// Runs the node of `ctx` in place: output 0 over `inputs[slot]`, which must occupy exactly
/// `offset..offset + len` of `arena`. `Ok(None)`: this node cannot be run in place soundly here
/// (the caller falls back to a copy).
pub(crate) fn run(
    ctx: &OpCtx,
    f: OpFn,
    inputs: &[Option<&Tensor>],
    slot: usize,
    arena: &Arc<Arena>,
    offset: usize,
    len: usize,
) -> Result<Option<Tensor>, OpFail> {
    let op = ctx.node.op.as_str();
    if !supports_inplace(op) || ctx.node.outputs.len() != 1 {
        return Ok(None);
    }
    let Some(Some(target)) = inputs.get(slot).copied() else {
        return Ok(None);
    };
    match target.arena_place() {
        Some((a, o, l)) if Arc::ptr_eq(a, arena) && o == offset && l == len => {}
        _ => return Ok(None),
    }
    let shapes: Vec<&[usize]> = inputs
        .iter()
        .flatten()
        .map(|t| t.shape.as_slice())
        .collect();
    let Ok(oshape) = broadcast_shapes(&shapes) else {
        return Ok(None);
    };
    if oshape != target.shape {
        return Ok(None);
    }
    let n = target.numel();
    let staged_ok = inputs
        .iter()
        .enumerate()
        .all(|(j, t)| j == slot || t.is_none_or(|t| t.numel() == 1 || t.shape == oshape));
    if staged_ok {
        return staged(ctx, f, inputs, slot, arena, offset, n).map(Some);
    }
    if matches!(op, "Add" | "Sub" | "Mul" | "Div") && inputs.len() == 2 {
        return broadcast_arith(ctx, inputs, slot, arena, offset, len);
    }
    Ok(None)
}

/// The staged path (see the module docs).
fn staged(
    ctx: &OpCtx,
    f: OpFn,
    inputs: &[Option<&Tensor>],
    slot: usize,
    arena: &Arc<Arena>,
    offset: usize,
    n: usize,
) -> Result<Tensor, OpFail> {
    let target = inputs[slot].ok_or_else(|| OpFail::Invalid("in-place input missing".into()))?;
    let es = elem_size(target.dtype)?;
    let chunk = (STAGE_BYTES / es).max(1);
    let mut c0 = 0;
    while c0 < n {
        let k = chunk.min(n - c0);
        let mut staged_ins: Vec<Option<Tensor>> = Vec::with_capacity(inputs.len());
        for (j, t) in inputs.iter().enumerate() {
            let Some(t) = *t else {
                staged_ins.push(None);
                continue;
            };
            let full = t.numel() == n && (j == slot || t.shares_buffer(target));
            staged_ins.push(Some(if full {
                // A copy of this chunk: the op reads it while writing the arena range it came from.
                t.view(c0, &[k])?.to_owned_buffer(None)?
            } else if t.numel() == 1 {
                t.clone()
            } else {
                t.view(c0, &[k])?
            }));
        }
        let range = (offset + c0 * es, k * es);
        {
            let mut c = arena::lock(&ctx.stats.cursor);
            c.outputs.clear();
            c.outputs.push_back(Some(range));
        }
        let refs: Vec<Option<&Tensor>> = staged_ins.iter().map(Option::as_ref).collect();
        let outs = f(ctx, &refs)?;
        drop(refs);
        drop(staged_ins);
        let out = outs
            .into_iter()
            .next()
            .ok_or_else(|| OpFail::Invalid("produced no output".into()))?;
        let placed = out
            .arena_place()
            .is_some_and(|(a, o, l)| Arc::ptr_eq(a, arena) && (o, l) == range);
        if !placed {
            if out.bytes().len() != range.1 {
                return Err(OpFail::Invalid(format!(
                    "in place: a chunk of {} elements produced {} bytes",
                    k,
                    out.bytes().len()
                )));
            }
            // SAFETY: the range is this node's output chunk; no tensor other than `out` (a heap
            // buffer) is borrowed while it is written (arena invariant; the staged inputs are dropped).
            unsafe { arena.range_mut(range.0, range.1) }.copy_from_slice(out.bytes());
            arena::lock(&ctx.stats.cursor)
                .misses
                .push("an in-place chunk was not written in the arena; copied".into());
        }
        c0 += k;
    }
    arena::lock(&ctx.stats.cursor).outputs.clear();
    Ok(Tensor::arena_range(
        target.dtype,
        &target.shape,
        arena.clone(),
        offset,
        n * es,
        false,
    ))
}

/// `Add`/`Sub`/`Mul`/`Div` with a broadcast other input, element by element over the arena range.
fn broadcast_arith(
    ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
    slot: usize,
    arena: &Arc<Arena>,
    offset: usize,
    len: usize,
) -> Result<Option<Tensor>, OpFail> {
    let (Some(Some(target)), Some(Some(other))) = (inputs.get(slot), inputs.get(1 - slot)) else {
        return Ok(None);
    };
    if other.dtype != target.dtype || other.shares_buffer(target) {
        return Ok(None);
    }
    let op = ctx.node.op.as_str();
    let shape = target.shape.clone();
    // Element strides of `other` aligned to the output's axes (0 where it broadcasts).
    let r = shape.len();
    let ob = &other.shape;
    let mut ostr = vec![0usize; r];
    let mut acc = 1usize;
    for k in (0..ob.len()).rev() {
        let ax = r - ob.len() + k;
        if ob[k] != 1 {
            ostr[ax] = acc;
        }
        acc *= ob[k];
    }
    // SAFETY: the range is the in-place output's, which is the dead input's: nothing else reads it
    // during this node (the checked plan: every other reader has run; `other` does not share it), and
    // this function holds the only reference to it.
    let bytes = unsafe { arena.range_mut(offset, len) };
    macro_rules! go {
        ($t:ty, $f:expr) => {{
            let a: &mut [$t] = bytemuck::try_cast_slice_mut(bytes)
                .map_err(|e| OpFail::Invalid(format!("in place: {e}")))?;
            let b: &[$t] = bytemuck::try_cast_slice(other.bytes())
                .map_err(|e| OpFail::Invalid(format!("in place: {e}")))?;
            let f = $f;
            for_each_index(&shape, &ostr, |i, j| {
                let (x, y) = if slot == 0 {
                    (a[i], b[j])
                } else {
                    (b[j], a[i])
                };
                a[i] = f(x, y);
            });
        }};
    }
    macro_rules! arith {
        ($t:ty) => {{
            if op == "Div" && !<$t as Arith>::IS_FLOAT {
                let b: &[$t] = bytemuck::try_cast_slice(other.bytes())
                    .map_err(|e| OpFail::Invalid(format!("in place: {e}")))?;
                if slot == 1 || b.iter().any(|v| v.is_zero()) {
                    // The kernel rejects a zero divisor; leave the whole check to it.
                    return Ok(None);
                }
            }
            let f: fn($t, $t) -> $t = match op {
                "Add" => <$t as Arith>::add,
                "Sub" => <$t as Arith>::sub,
                "Mul" => <$t as Arith>::mul,
                _ => <$t as Arith>::div,
            };
            go!($t, f)
        }};
    }
    macro_rules! half {
        ($h:ty) => {{
            let f: fn(f32, f32) -> f32 = match op {
                "Add" => |x, y| x + y,
                "Sub" => |x, y| x - y,
                "Mul" => |x, y| x * y,
                _ => |x, y| x / y,
            };
            go!($h, move |x: $h, y: $h| <$h>::from_f32(f(
                x.to_f32(),
                y.to_f32()
            )))
        }};
    }
    match target.dtype {
        DataType::F32 => arith!(f32),
        DataType::F64 => arith!(f64),
        DataType::I32 => arith!(i32),
        DataType::I64 => arith!(i64),
        DataType::F16 => half!(half::f16),
        DataType::BF16 => half!(half::bf16),
        _ => return Ok(None),
    }
    Ok(Some(Tensor::arena_range(
        target.dtype,
        &shape,
        arena.clone(),
        offset,
        len,
        false,
    )))
}

/// Calls `body(i, j)` for every element `i` of `shape` in row-major order, with `j` the offset
/// `sum(index[k] * strides[k])`.
fn for_each_index(shape: &[usize], strides: &[usize], mut body: impl FnMut(usize, usize)) {
    let n: usize = shape.iter().product();
    if n == 0 {
        return;
    }
    let r = shape.len();
    let mut idx = vec![0usize; r];
    let mut j = 0usize;
    for i in 0..n {
        body(i, j);
        for k in (0..r).rev() {
            idx[k] += 1;
            j += strides[k];
            if idx[k] < shape[k] {
                break;
            }
            j -= strides[k] * shape[k];
            idx[k] = 0;
        }
    }
}
