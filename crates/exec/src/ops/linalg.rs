//! Linear algebra ops: MatMul, Gemm, Einsum and Det; the first three on the `matrixmultiply` path of
//! `kernels::matmul` (each output element is one FMA chain over `k` whose order depends only on `k`).
//!
//! Einsum is lowered onto strided batched matmul: per pair of operands, labels only one side needs are
//! summed out first (ReduceSum order), then `[batch, m, k] x [batch, k, n]` runs with each operand read
//! through its own strides when its `m`/`k`/`n` label groups are each one stride, and from a transposed
//! copy otherwise.
//!
//! Scratch (bytes; `e` = element size, 4 for f16/bf16 which compute in f32):
//! - MatMul/Gemm f32/f64/int: none. f16/bf16: `4 * (|A| + |B| + |Y|)` (+ `4 * |C|` for Gemm).
//! - Einsum: per pairwise step, `e * |X|` for an operand X that must be summed over a label
//!   (its reduced copy, plus `e * |X|` for a contiguous copy first when X is a strided view), `e * |X|`
//!   for an operand whose label groups are not single strides (its transposed copy), and `e * |R|` for
//!   the step's result unless it is the final output already in `[batch, m, n]` order (else the final
//!   result is transposed into the output). f16/bf16 add `4 * (sum of |inputs| + |Y|)`.
//! - Det: `8 * M * M` (one matrix's LU factorization in f64).

use std::ops::Range;

use half::{bf16, f16};
use memplan_ir::DataType;

use super::{fail, opt, req, unsupported, OpCtx, OpFail, OpFn};
use crate::kernels::matmul::{
    gemm, gemm_block, gemm_out_shape, matmul, matmul_int, matmul_out_shape, par_rows, GemmAttrs,
    GemmFloat, MatRef,
};
use crate::kernels::movement::strided_copy;
use crate::kernels::reduce::{reduce, ReduceElem, ReduceOp};
use crate::mem::ScratchBuf;
use crate::tensor::Tensor;

pub const OPS: &[(&str, OpFn)] = &[
    ("MatMul", matmul_op),
    ("Gemm", gemm_op),
    ("Einsum", einsum_op),
    ("Det", det_op),
];

/// Det of each trailing `M x M` matrix: LU factorization with partial pivoting (the first largest
/// pivot) in f64 on a counted copy of one matrix at a time, rounded to the input's type.
fn det_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let r = x.rank();
    if r < 2 || x.shape[r - 1] != x.shape[r - 2] {
        return fail(format!("Det needs square matrices, got {:?}", x.shape));
    }
    let m = x.shape[r - 1];
    let oshape = x.shape[..r - 2].to_vec();
    let nb: usize = oshape.iter().product();
    let mut out = ctx.alloc_for_overwrite(x.dtype, &oshape)?;
    let mut a = ctx.scratch::<f64>(m * m)?;
    let a = a.as_mut_slice();
    macro_rules! go {
        ($T:ty, $load:expr, $store:expr) => {{
            let (src, o) = (x.data::<$T>()?, out.data_mut::<$T>()?);
            for b in 0..nb {
                for (d, &v) in a.iter_mut().zip(&src[b * m * m..(b + 1) * m * m]) {
                    *d = $load(v);
                }
                o[b] = $store(lu_det(a, m));
            }
        }};
    }
    match x.dtype {
        DataType::F32 => go!(f32, f64::from, |d: f64| d as f32),
        DataType::F64 => go!(f64, |v| v, |d| d),
        DataType::F16 => go!(f16, |v: f16| v.to_f64(), f16::from_f64),
        DataType::BF16 => go!(bf16, |v: bf16| v.to_f64(), bf16::from_f64),
        d => return unsupported(format!("Det on {d}")),
    }
    Ok(vec![out])
}

/// The determinant of the row-major `m x m` matrix `a`, which it overwrites.
fn lu_det(a: &mut [f64], m: usize) -> f64 {
    let mut det = 1.0;
    for c in 0..m {
        let mut p = c;
        for r in c + 1..m {
            if a[r * m + c].abs() > a[p * m + c].abs() {
                p = r;
            }
        }
        if a[p * m + c] == 0.0 {
            return 0.0;
        }
        if p != c {
            for k in 0..m {
                a.swap(c * m + k, p * m + k);
            }
            det = -det;
        }
        let piv = a[c * m + c];
        det *= piv;
        for r in c + 1..m {
            let f = a[r * m + c] / piv;
            for k in c + 1..m {
                a[r * m + k] -= f * a[c * m + k];
            }
        }
    }
    det
}

/// An f16/bf16 tensor widened to f32 in a counted scratch buffer.
pub(crate) fn widen(ctx: &OpCtx, t: &Tensor) -> Result<ScratchBuf<f32>, OpFail> {
    let mut s = ctx.scratch::<f32>(t.numel())?;
    let o = s.as_mut_slice();
    match t.dtype {
        DataType::F16 => o
            .iter_mut()
            .zip(t.data::<f16>()?)
            .for_each(|(o, v)| *o = v.to_f32()),
        DataType::BF16 => o
            .iter_mut()
            .zip(t.data::<bf16>()?)
            .for_each(|(o, v)| *o = v.to_f32()),
        DataType::F32 => o.copy_from_slice(t.data::<f32>()?),
        d => return unsupported(format!("widening {d} to f32")),
    }
    Ok(s)
}

/// Rounds f32 values into an f16/bf16 output tensor.
pub(crate) fn narrow(src: &[f32], out: &mut Tensor) -> Result<(), OpFail> {
    match out.dtype {
        DataType::F16 => out
            .data_mut::<f16>()?
            .iter_mut()
            .zip(src)
            .for_each(|(o, &v)| *o = f16::from_f32(v)),
        DataType::BF16 => out
            .data_mut::<bf16>()?
            .iter_mut()
            .zip(src)
            .for_each(|(o, &v)| *o = bf16::from_f32(v)),
        DataType::F32 => out.data_mut::<f32>()?.copy_from_slice(src),
        d => return unsupported(format!("narrowing f32 to {d}")),
    }
    Ok(())
}

fn is_half(d: DataType) -> bool {
    matches!(d, DataType::F16 | DataType::BF16)
}

fn matmul_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (a, b) = (req(inputs, 0)?, req(inputs, 1)?);
    if a.dtype != b.dtype {
        return fail(format!("MatMul inputs are {} and {}", a.dtype, b.dtype));
    }
    let oshape = matmul_out_shape(&a.shape, &b.shape)?;
    // Float products write every element (beta = 0; with k = 0, zeros); integer ones accumulate.
    let mut out = match a.dtype {
        DataType::F32 | DataType::F64 => ctx.alloc_for_overwrite(a.dtype, &oshape)?,
        _ => ctx.alloc(a.dtype, &oshape)?,
    };
    match a.dtype {
        DataType::F32 => matmul::<f32>(a.data()?, &a.shape, b.data()?, &b.shape, out.data_mut()?)?,
        DataType::F64 => matmul::<f64>(a.data()?, &a.shape, b.data()?, &b.shape, out.data_mut()?)?,
        DataType::I32 => {
            matmul_int::<i32>(a.data()?, &a.shape, b.data()?, &b.shape, out.data_mut()?)?
        }
        DataType::I64 => {
            matmul_int::<i64>(a.data()?, &a.shape, b.data()?, &b.shape, out.data_mut()?)?
        }
        d if is_half(d) => {
            let (wa, wb) = (widen(ctx, a)?, widen(ctx, b)?);
            let mut y = ctx.scratch::<f32>(out.numel())?;
            matmul::<f32>(
                wa.as_slice(),
                &a.shape,
                wb.as_slice(),
                &b.shape,
                y.as_mut_slice(),
            )?;
            narrow(y.as_slice(), &mut out)?;
        }
        d => return unsupported(format!("MatMul on {d}")),
    }
    Ok(vec![out])
}

fn gemm_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (a, b, c) = (req(inputs, 0)?, req(inputs, 1)?, opt(inputs, 2));
    if a.dtype != b.dtype || c.is_some_and(|c| c.dtype != a.dtype) {
        return fail("Gemm inputs must share one type");
    }
    let (ta, tb) = (ctx.int("transA", 0)? != 0, ctx.int("transB", 0)? != 0);
    let (alpha, beta) = (ctx.float("alpha", 1.0)?, ctx.float("beta", 1.0)?);
    let oshape = gemm_out_shape(&a.shape, &b.shape, ta, tb)?;
    let mut out = ctx.alloc(a.dtype, &oshape)?;
    macro_rules! go {
        ($T:ty, $a:expr, $b:expr, $c:expr, $out:expr) => {{
            let attrs = GemmAttrs::<$T> {
                alpha: alpha as $T,
                beta: beta as $T,
                trans_a: ta,
                trans_b: tb,
            };
            gemm::<$T>($a, &a.shape, $b, &b.shape, $c, attrs, $out)?
        }};
    }
    match a.dtype {
        DataType::F32 => {
            let cv = c
                .map(|c| Ok::<_, OpFail>((c.data::<f32>()?, c.shape.as_slice())))
                .transpose()?;
            go!(f32, a.data()?, b.data()?, cv, out.data_mut()?)
        }
        DataType::F64 => {
            let cv = c
                .map(|c| Ok::<_, OpFail>((c.data::<f64>()?, c.shape.as_slice())))
                .transpose()?;
            go!(f64, a.data()?, b.data()?, cv, out.data_mut()?)
        }
        d if is_half(d) => {
            let (wa, wb) = (widen(ctx, a)?, widen(ctx, b)?);
            let wc = c.map(|c| widen(ctx, c)).transpose()?;
            let cv = c
                .zip(wc.as_ref())
                .map(|(c, w)| (w.as_slice(), c.shape.as_slice()));
            let mut y = ctx.scratch::<f32>(out.numel())?;
            go!(f32, wa.as_slice(), wb.as_slice(), cv, y.as_mut_slice());
            narrow(y.as_slice(), &mut out)?;
        }
        d => return unsupported(format!("Gemm on {d}")),
    }
    Ok(vec![out])
}

/// A parsed Einsum equation: per input, its labels (one per dim, ellipsis dims expanded into labels
/// `ELL + j`), and the output labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Equation {
    pub inputs: Vec<Vec<u32>>,
    pub output: Vec<u32>,
}

/// Labels of ellipsis dims start here (letters are their ASCII codes).
const ELL: u32 = 1000;

fn parse_term(term: &str, rank: Option<usize>, ell_rank: usize) -> Result<Vec<u32>, OpFail> {
    let term = term.trim();
    let mut labels = Vec::new();
    let parts: Vec<&str> = term.split("...").collect();
    if parts.len() > 2 {
        return fail(format!("Einsum term '{term}' has more than one ellipsis"));
    }
    let letters = |s: &str| -> Result<Vec<u32>, OpFail> {
        s.chars()
            .filter(|c| !c.is_whitespace())
            .map(|c| {
                if c.is_ascii_alphabetic() {
                    Ok(c as u32)
                } else {
                    fail(format!("Einsum label '{c}' is not a letter"))
                }
            })
            .collect()
    };
    labels.extend(letters(parts[0])?);
    if parts.len() == 2 {
        let after = letters(parts[1])?;
        let n_ell = match rank {
            Some(r) => r.checked_sub(labels.len() + after.len()).ok_or_else(|| {
                OpFail::Invalid(format!(
                    "Einsum term '{term}' has more labels than its input has dims ({r})"
                ))
            })?,
            None => ell_rank,
        };
        // Ellipsis dims are right-aligned across operands (numpy broadcasting).
        labels.extend((ell_rank - n_ell..ell_rank).map(|j| ELL + j as u32));
        labels.extend(after);
    } else if let Some(r) = rank {
        if labels.len() != r {
            return fail(format!(
                "Einsum term '{term}' has {} labels for an input of rank {r}",
                labels.len()
            ));
        }
    }
    Ok(labels)
}

/// Parses `equation` for inputs of the given ranks.
pub fn parse_equation(equation: &str, ranks: &[usize]) -> Result<Equation, OpFail> {
    let (lhs, rhs) = match equation.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (equation, None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ranks.len() {
        return fail(format!(
            "Einsum equation has {} terms for {} inputs",
            terms.len(),
            ranks.len()
        ));
    }
    let mut ell_rank = 0;
    for (t, &r) in terms.iter().zip(ranks) {
        if t.contains("...") {
            let letters = t.chars().filter(|c| c.is_ascii_alphabetic()).count();
            ell_rank = ell_rank.max(r.saturating_sub(letters));
        }
    }
    let inputs: Vec<Vec<u32>> = terms
        .iter()
        .zip(ranks)
        .map(|(t, &r)| parse_term(t, Some(r), ell_rank))
        .collect::<Result<_, _>>()?;
    let output = match rhs {
        Some(r) => parse_term(r, None, ell_rank)?,
        None => {
            // Implicit output: ellipsis dims, then labels seen exactly once, alphabetically.
            let mut out: Vec<u32> = (0..ell_rank as u32).map(|j| ELL + j).collect();
            let mut letters: Vec<u32> = inputs
                .iter()
                .flatten()
                .copied()
                .filter(|&l| l < ELL)
                .collect();
            letters.sort_unstable();
            let once: Vec<u32> = letters
                .iter()
                .copied()
                .filter(|l| letters.iter().filter(|m| *m == l).count() == 1)
                .collect();
            out.extend(once);
            out
        }
    };
    for (i, l) in output.iter().enumerate() {
        if output[..i].contains(l) {
            return fail("Einsum output repeats a label");
        }
        if !inputs.iter().flatten().any(|m| m == l) {
            return fail("Einsum output has a label no input has");
        }
    }
    Ok(Equation { inputs, output })
}

/// An Einsum operand: a strided view (`base`, `strides`) of `data` with one distinct label per dim.
struct Operand<'a, T> {
    data: &'a [T],
    base: usize,
    labels: Vec<u32>,
    dims: Vec<usize>,
    strides: Vec<isize>,
}

fn row_major(dims: &[usize]) -> Vec<isize> {
    crate::kernels::movement::istrides(dims)
}

impl<'a, T: Copy + Send + Sync> Operand<'a, T> {
    /// Merges repeated labels into one diagonal dim (stride sum).
    fn new(data: &'a [T], shape: &[usize], labels: &[u32]) -> Result<Self, OpFail> {
        let st = row_major(shape);
        let mut op = Operand {
            data,
            base: 0,
            labels: Vec::new(),
            dims: Vec::new(),
            strides: Vec::new(),
        };
        for (i, &l) in labels.iter().enumerate() {
            match op.labels.iter().position(|&m| m == l) {
                Some(j) => {
                    if op.dims[j] != shape[i] {
                        return fail(format!(
                            "Einsum diagonal over dims {} and {}",
                            op.dims[j], shape[i]
                        ));
                    }
                    op.strides[j] += st[i];
                }
                None => {
                    op.labels.push(l);
                    op.dims.push(shape[i]);
                    op.strides.push(st[i]);
                }
            }
        }
        Ok(op)
    }

    fn dim(&self, l: u32) -> Option<usize> {
        self.labels
            .iter()
            .position(|&m| m == l)
            .map(|i| self.dims[i])
    }

    fn stride(&self, l: u32) -> isize {
        self.labels.iter().position(|&m| m == l).map_or(0, |i| {
            if self.dims[i] == 1 {
                0
            } else {
                self.strides[i]
            }
        })
    }

    fn is_contiguous(&self) -> bool {
        self.base == 0 && self.strides == row_major(&self.dims)
    }
}

/// One stride for a group of labels read in the given order, when the group is a single run.
fn group_stride<T: Copy + Send + Sync>(op: &Operand<'_, T>, group: &[u32]) -> Option<isize> {
    let mut acc: Option<(isize, usize)> = None; // (stride of the innermost so far, extent so far)
    for &l in group.iter().rev() {
        let d = op.dim(l).unwrap_or(1);
        if d == 1 {
            continue;
        }
        let s = op.stride(l);
        acc = match acc {
            None => Some((s, d)),
            Some((inner, ext)) if s == inner * ext as isize => Some((inner, ext * d)),
            Some(_) => return None,
        };
    }
    Some(acc.map_or(0, |a| a.0))
}

/// Materializes `op` into a contiguous scratch buffer in label order `order`.
fn materialize<T: bytemuck::Pod + Send + Sync>(
    ctx: &OpCtx,
    op: &Operand<'_, T>,
    order: &[u32],
    store: &mut Vec<ScratchBuf<T>>,
) -> Result<(Vec<usize>, Vec<isize>), OpFail> {
    let dims: Vec<usize> = order.iter().map(|&l| op.dim(l).unwrap_or(1)).collect();
    let st: Vec<isize> = order.iter().map(|&l| op.stride(l)).collect();
    let mut buf = ctx.scratch::<T>(dims.iter().product())?;
    strided_copy(op.data, op.base, &dims, &st, buf.as_mut_slice())?;
    store.push(buf);
    Ok((
        dims,
        row_major(
            &order
                .iter()
                .map(|&l| op.dim(l).unwrap_or(1))
                .collect::<Vec<_>>(),
        ),
    ))
}

/// Element type of the Einsum lowering.
trait EinElem: GemmFloat + ReduceElem + crate::tensor::Element {}
impl EinElem for f32 {}
impl EinElem for f64 {}

/// Sums `op` over every label not in `keep`, into a new contiguous scratch operand.
fn sum_out<'b, T: EinElem>(
    ctx: &OpCtx,
    op: Operand<'b, T>,
    keep: &[u32],
    store: &'b ScratchArena<T>,
) -> Result<Operand<'b, T>, OpFail> {
    if op.labels.iter().all(|l| keep.contains(l)) {
        return Ok(op);
    }
    let contiguous: &[T] = if op.is_contiguous() {
        op.data
    } else {
        let mut buf = ctx.scratch::<T>(op.dims.iter().product())?;
        strided_copy(op.data, op.base, &op.dims, &op.strides, buf.as_mut_slice())?;
        store.push(buf)
    };
    let axes: Vec<i64> = op
        .labels
        .iter()
        .enumerate()
        .filter(|(_, l)| !keep.contains(l))
        .map(|(i, _)| i as i64)
        .collect();
    let labels: Vec<u32> = op
        .labels
        .iter()
        .copied()
        .filter(|l| keep.contains(l))
        .collect();
    let dims: Vec<usize> = op
        .labels
        .iter()
        .zip(&op.dims)
        .filter(|(l, _)| keep.contains(l))
        .map(|(_, &d)| d)
        .collect();
    let mut out = ctx.scratch::<T>(dims.iter().product())?;
    reduce(
        ReduceOp::Sum,
        contiguous,
        &op.dims,
        &axes,
        false,
        false,
        out.as_mut_slice(),
    )?;
    let data = store.push(out);
    Ok(Operand {
        data,
        base: 0,
        strides: row_major(&dims),
        labels,
        dims,
    })
}

/// Scratch buffers that live until the op returns; handing out shared slices of pushed buffers.
struct ScratchArena<T> {
    bufs: std::cell::RefCell<Vec<ScratchBuf<T>>>,
}

impl<T: bytemuck::Pod> ScratchArena<T> {
    fn new() -> Self {
        ScratchArena {
            bufs: std::cell::RefCell::new(Vec::new()),
        }
    }

    /// Keeps `b` alive for the arena's lifetime and returns its contents.
    fn push(&self, b: ScratchBuf<T>) -> &[T] {
        let ptr: *const [T] = b.as_slice();
        self.bufs.borrow_mut().push(b);
        // SAFETY: the slice lives in the buffer's own heap allocation, which does not move when the
        // `ScratchBuf` value moves into the vector; pushed buffers are never mutated and are only
        // dropped with the arena, which outlives the returned borrow of `self`.
        unsafe { &*ptr }
    }
}

/// `[batch.., m.., n..]` result of contracting `a` and `b`, where `needed` are the labels wanted
/// afterwards; writes into `dst` (which must have the result's size) and returns its labels and dims.
fn contract<T: EinElem>(
    a: &Operand<'_, T>,
    b: &Operand<'_, T>,
    needed: &[u32],
    order_hint: &[u32],
    ctx: &OpCtx,
    dst: Option<&mut [T]>,
    arena: &ScratchArena<T>,
) -> Result<(Vec<u32>, Vec<usize>, Option<ScratchBuf<T>>), OpFail> {
    let pos = |l: &u32| order_hint.iter().position(|m| m == l).unwrap_or(usize::MAX);
    let mut batch: Vec<u32> = a
        .labels
        .iter()
        .copied()
        .filter(|l| b.labels.contains(l) && needed.contains(l))
        .collect();
    let contracted: Vec<u32> = a
        .labels
        .iter()
        .copied()
        .filter(|l| b.labels.contains(l) && !needed.contains(l))
        .collect();
    let mut m_l: Vec<u32> = a
        .labels
        .iter()
        .copied()
        .filter(|l| !b.labels.contains(l))
        .collect();
    let mut n_l: Vec<u32> = b
        .labels
        .iter()
        .copied()
        .filter(|l| !a.labels.contains(l))
        .collect();
    batch.sort_by_key(pos);
    m_l.sort_by_key(pos);
    n_l.sort_by_key(pos);
    for &l in &contracted {
        if a.dim(l) != b.dim(l) {
            return unsupported("Einsum contraction over a broadcast (size-1) dim");
        }
    }
    let bdims: Vec<usize> = batch
        .iter()
        .map(|&l| {
            let (x, y) = (a.dim(l).unwrap_or(1), b.dim(l).unwrap_or(1));
            if x == y || y == 1 {
                Ok(x)
            } else if x == 1 {
                Ok(y)
            } else {
                fail(format!(
                    "Einsum dims {x} and {y} of one label do not broadcast"
                ))
            }
        })
        .collect::<Result<_, _>>()?;
    let ext = |op: &Operand<'_, T>, g: &[u32]| {
        g.iter().map(|&l| op.dim(l).unwrap_or(1)).product::<usize>()
    };
    let (m, k, n) = (ext(a, &m_l), ext(a, &contracted), ext(b, &n_l));
    let mut scratch_views: Vec<ScratchBuf<T>> = Vec::new();
    // A as [batch, m, k]; B as [batch, k, n]: strided when each group is one stride, else a copy.
    let prepare = |op: &Operand<'_, T>,
                   rows: &[u32],
                   cols: &[u32],
                   store: &mut Vec<ScratchBuf<T>>|
     -> Result<(usize, Vec<isize>, isize, isize, bool), OpFail> {
        if let (Some(rs), Some(cs)) = (group_stride(op, rows), group_stride(op, cols)) {
            let bst: Vec<isize> = batch.iter().map(|&l| op.stride(l)).collect();
            return Ok((op.base, bst, rs, cs, false));
        }
        let order: Vec<u32> = batch
            .iter()
            .chain(rows)
            .chain(cols)
            .copied()
            .filter(|l| op.labels.contains(l))
            .collect();
        let (dims, _) = materialize(ctx, op, &order, store)?;
        let copy = Operand {
            data: &[] as &[T],
            base: 0,
            labels: order.clone(),
            strides: row_major(&dims),
            dims,
        };
        let bst: Vec<isize> = batch.iter().map(|&l| copy.stride(l)).collect();
        let rs = group_stride(&copy, rows).unwrap_or(0);
        let cs = group_stride(&copy, cols).unwrap_or(0);
        Ok((0, bst, rs, cs, true))
    };
    let (abase, abst, ars, acs, acopy) = prepare(a, &m_l, &contracted, &mut scratch_views)?;
    let (bbase, bbst, brs, bcs, bcopy) = prepare(b, &contracted, &n_l, &mut scratch_views)?;
    let mut it = scratch_views.into_iter();
    let adata: &[T] = if acopy {
        it.next().map(|s| arena.push(s)).unwrap_or(&[])
    } else {
        a.data
    };
    let bdata: &[T] = if bcopy {
        it.next().map(|s| arena.push(s)).unwrap_or(&[])
    } else {
        b.data
    };
    let labels: Vec<u32> = batch.iter().chain(&m_l).chain(&n_l).copied().collect();
    let mut dims = bdims.clone();
    dims.extend(m_l.iter().map(|&l| a.dim(l).unwrap_or(1)));
    dims.extend(n_l.iter().map(|&l| b.dim(l).unwrap_or(1)));
    let total: usize = dims.iter().product();
    let mut own = None;
    let out: &mut [T] = match dst {
        Some(d) if d.len() == total => d,
        Some(_) => return fail("Einsum output size mismatch"),
        None => {
            own = Some(ctx.scratch::<T>(total)?);
            own.as_mut().map(|s| s.as_mut_slice()).unwrap_or(&mut [])
        }
    };
    let nb: usize = bdims.iter().product();
    let offs = |mut bi: usize, st: &[isize]| -> isize {
        let mut o = 0;
        for d in (0..bdims.len()).rev() {
            o += (bi % bdims[d]) as isize * st[d];
            bi /= bdims[d];
        }
        o
    };
    let run = |rows: Range<usize>, chunk: &mut [T]| -> crate::kernels::matmul::KResult<()> {
        let mut r = rows.start;
        while r < rows.end {
            let (bi, i0) = (r / m.max(1), r % m.max(1));
            let cnt = (m - i0).min(rows.end - r);
            let ao = abase as isize + offs(bi, &abst) + i0 as isize * ars;
            let bo = bbase as isize + offs(bi, &bbst);
            let at = (r - rows.start) * n;
            if k == 0 {
                chunk[at..at + cnt * n]
                    .iter_mut()
                    .for_each(|v| *v = <T as GemmFloat>::ZERO);
            } else {
                // Negative strides do not occur: every stride here comes from row-major layouts.
                gemm_block(
                    cnt,
                    k,
                    n,
                    MatRef {
                        data: adata,
                        off: ao as usize,
                        rs: ars as usize,
                        cs: acs as usize,
                    },
                    MatRef {
                        data: bdata,
                        off: bo as usize,
                        rs: brs as usize,
                        cs: bcs as usize,
                    },
                    &mut chunk[at..],
                    n,
                )?;
            }
            r += cnt;
        }
        Ok(())
    };
    if m > 0 && n > 0 {
        par_rows(nb * m, n, k, out, run)?;
    }
    Ok((labels, dims, own))
}

/// The Einsum output shape: each output label's largest extent among the inputs.
fn einsum_out_shape(eq: &Equation, shapes: &[&[usize]]) -> Vec<usize> {
    eq.output
        .iter()
        .map(|&l| {
            eq.inputs
                .iter()
                .zip(shapes)
                .flat_map(|(ls, s)| ls.iter().zip(s.iter()).filter(|(m, _)| **m == l))
                .map(|(_, &d)| d)
                .max()
                .unwrap_or(1)
        })
        .collect()
}

/// Einsum on `T` into `out` (row-major, of shape `oshape` from [`einsum_out_shape`]).
fn einsum_typed<T: EinElem>(
    ctx: &OpCtx,
    eq: &Equation,
    ins: &[(&[T], &[usize])],
    oshape: &[usize],
    out: &mut [T],
) -> Result<(), OpFail> {
    let arena = ScratchArena::<T>::new();
    let mut ops: Vec<Operand<'_, T>> = Vec::new();
    for ((data, shape), labels) in ins.iter().zip(&eq.inputs) {
        ops.push(Operand::new(data, shape, labels)?);
    }
    let mut rest = ops.into_iter();
    let Some(mut acc) = rest.next() else {
        return fail("Einsum needs an input");
    };
    let remaining: Vec<Operand<'_, T>> = rest.collect();
    let n_rest = remaining.len();
    for (i, b) in remaining.into_iter().enumerate() {
        let mut needed: Vec<u32> = eq.output.clone();
        // Labels of later operands stay needed (operands after `b`).
        for later in eq.inputs.iter().skip(i + 2) {
            needed.extend(later);
        }
        let keep_a: Vec<u32> = needed.iter().chain(&b.labels).copied().collect();
        let keep_b: Vec<u32> = needed.iter().chain(&acc.labels).copied().collect();
        let a2 = sum_out(ctx, acc, &keep_a, &arena)?;
        let b2 = sum_out(ctx, b, &keep_b, &arena)?;
        let last = i + 1 == n_rest;
        // The final step writes straight into the output when its [batch, m, n] order is the output's.
        let direct = last && {
            let batch: Vec<u32> = eq
                .output
                .iter()
                .copied()
                .filter(|l| a2.labels.contains(l) && b2.labels.contains(l))
                .collect();
            let m_l: Vec<u32> = eq
                .output
                .iter()
                .copied()
                .filter(|l| a2.labels.contains(l) && !b2.labels.contains(l))
                .collect();
            let n_l: Vec<u32> = eq
                .output
                .iter()
                .copied()
                .filter(|l| !a2.labels.contains(l) && b2.labels.contains(l))
                .collect();
            let order: Vec<u32> = batch.into_iter().chain(m_l).chain(n_l).collect();
            let dims_match = eq.output.iter().all(|&l| {
                let d = [a2.dim(l), b2.dim(l)]
                    .into_iter()
                    .flatten()
                    .max()
                    .unwrap_or(1);
                oshape[eq.output.iter().position(|&m| m == l).unwrap_or(0)] == d
            });
            order == eq.output && dims_match
        };
        let (labels, dims, buf) = if direct {
            contract(&a2, &b2, &needed, &eq.output, ctx, Some(&mut *out), &arena)?
        } else {
            contract(&a2, &b2, &needed, &eq.output, ctx, None, &arena)?
        };
        acc = match buf {
            Some(buf) => {
                let data = arena.push(buf);
                Operand {
                    data,
                    base: 0,
                    strides: row_major(&dims),
                    labels,
                    dims,
                }
            }
            None => return Ok(()),
        };
    }
    // Single operand, or a final result not in output order: sum out, then transpose into the output.
    let acc = sum_out(ctx, acc, &eq.output, &arena)?;
    let st: Vec<isize> = eq.output.iter().map(|&l| acc.stride(l)).collect();
    strided_copy(acc.data, acc.base, oshape, &st, out)?;
    Ok(())
}

fn einsum_op(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let ins: Vec<&Tensor> = inputs.iter().flatten().copied().collect();
    let Some(first) = ins.first() else {
        return fail("Einsum needs at least one input");
    };
    if ins.iter().any(|t| t.dtype != first.dtype) {
        return fail("Einsum inputs must share one type");
    }
    let Some(eqs) = ctx.string("equation")? else {
        return fail("Einsum needs 'equation'");
    };
    let ranks: Vec<usize> = ins.iter().map(|t| t.rank()).collect();
    let eq = parse_equation(&eqs, &ranks)?;
    let shapes: Vec<&[usize]> = ins.iter().map(|t| t.shape.as_slice()).collect();
    let oshape = einsum_out_shape(&eq, &shapes);
    // The last contraction or the final strided copy writes every element (or it fails).
    let mut out = ctx.alloc_for_overwrite(first.dtype, &oshape)?;
    match first.dtype {
        DataType::F32 => {
            let v: Vec<(&[f32], &[usize])> = ins
                .iter()
                .map(|t| Ok((t.data::<f32>()?, t.shape.as_slice())))
                .collect::<Result<_, OpFail>>()?;
            einsum_typed::<f32>(ctx, &eq, &v, &oshape, out.data_mut()?)?
        }
        DataType::F64 => {
            let v: Vec<(&[f64], &[usize])> = ins
                .iter()
                .map(|t| Ok((t.data::<f64>()?, t.shape.as_slice())))
                .collect::<Result<_, OpFail>>()?;
            einsum_typed::<f64>(ctx, &eq, &v, &oshape, out.data_mut()?)?
        }
        d if is_half(d) => {
            let wide: Vec<ScratchBuf<f32>> = ins
                .iter()
                .map(|t| widen(ctx, t))
                .collect::<Result<_, _>>()?;
            let v: Vec<(&[f32], &[usize])> = wide
                .iter()
                .zip(&ins)
                .map(|(w, t)| (w.as_slice(), t.shape.as_slice()))
                .collect();
            // The f32 result is scratch, rounded into the output.
            let mut y = ctx.scratch::<f32>(out.numel())?;
            einsum_typed::<f32>(ctx, &eq, &v, &oshape, y.as_mut_slice())?;
            narrow(y.as_slice(), &mut out)?;
        }
        d => return unsupported(format!("Einsum on {d}")),
    }
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::*;
    use memplan_ir::graph::AttrValue;
    use proptest::prelude::*;

    fn eins(eq: &str, ins: &[&Tensor]) -> Result<Tensor, OpFail> {
        let refs: Vec<Option<&Tensor>> = ins.iter().map(|t| Some(*t)).collect();
        Ok(run_op(
            "Einsum",
            &[("equation", AttrValue::String(eq.as_bytes().to_vec()))],
            &refs,
            1,
        )?
        .remove(0))
    }

    /// Naive Einsum over f64 (sum over every assignment of the labels).
    fn naive(eq: &Equation, ins: &[(&[f32], &[usize])]) -> (Vec<usize>, Vec<f64>) {
        let mut dim_of = std::collections::BTreeMap::new();
        for ((_, s), ls) in ins.iter().zip(&eq.inputs) {
            for (l, &d) in ls.iter().zip(s.iter()) {
                let e = dim_of.entry(*l).or_insert(d);
                *e = (*e).max(d);
            }
        }
        let all: Vec<u32> = dim_of.keys().copied().collect();
        let oshape: Vec<usize> = eq.output.iter().map(|l| dim_of[l]).collect();
        let mut out = vec![0f64; oshape.iter().product()];
        let total: usize = all.iter().map(|l| dim_of[l]).product();
        for mut i in 0..total {
            let mut val = std::collections::BTreeMap::new();
            for l in all.iter().rev() {
                val.insert(*l, i % dim_of[l]);
                i /= dim_of[l];
            }
            let mut p = 1f64;
            for ((d, s), ls) in ins.iter().zip(&eq.inputs) {
                let mut off = 0;
                for (l, &n) in ls.iter().zip(s.iter()) {
                    off = off * n + if n == 1 { 0 } else { val[l] };
                }
                p *= d[off] as f64;
            }
            let mut o = 0;
            for (l, &n) in eq.output.iter().zip(&oshape) {
                o = o * n + val[l];
            }
            out[o] += p;
        }
        (oshape, out)
    }

    fn check(eq: &str, shapes: &[&[usize]], seed: u64) {
        let ts: Vec<Tensor> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| t_f32(s, &rand_f32(s.iter().product(), seed + i as u64)))
            .collect();
        let refs: Vec<&Tensor> = ts.iter().collect();
        let got = eins(eq, &refs).unwrap();
        let ranks: Vec<usize> = shapes.iter().map(|s| s.len()).collect();
        let pe = parse_equation(eq, &ranks).unwrap();
        let ins: Vec<(&[f32], &[usize])> = ts
            .iter()
            .map(|t| (t.data::<f32>().unwrap(), t.shape.as_slice()))
            .collect();
        let (os, want) = naive(&pe, &ins);
        assert_eq!(got.shape, os, "{eq}");
        for (g, w) in got.data::<f32>().unwrap().iter().zip(&want) {
            assert!(
                (*g as f64 - w).abs() < 1e-4 * (1.0 + w.abs()),
                "{eq}: {g} vs {w}"
            );
        }
    }

    #[test]
    fn einsum_forms() {
        check("ij,jk->ik", &[&[3, 4], &[4, 5]], 1);
        check("ij,kj->ik", &[&[3, 4], &[5, 4]], 2);
        check("bhqd,bhkd->bhqk", &[&[2, 3, 4, 5], &[2, 3, 6, 5]], 3);
        check("...ik,...jk->...ij", &[&[3, 2, 3, 4], &[2, 5, 4]], 4);
        check("...ik,...jk->...ij", &[&[2, 3, 4], &[1, 5, 4]], 15);
        check("ii->i", &[&[4, 4]], 5);
        check("ii", &[&[4, 4]], 6);
        check("ij->ji", &[&[3, 4]], 7);
        check("ij,jk,kl->il", &[&[2, 3], &[3, 4], &[4, 5]], 8);
        check("ij,jk", &[&[2, 3], &[3, 4]], 9);
        check("bij,bjk->bki", &[&[2, 3, 4], &[2, 4, 5]], 10);
        check("ij,kl->ijkl", &[&[2, 3], &[2, 2]], 11);
        check("ijk,ik->j", &[&[2, 3, 4], &[2, 4]], 12);
        check("bi,bj->ij", &[&[4, 3], &[4, 5]], 13);
        assert!(eins(
            "bi,bj->ij",
            &[&t_f32(&[1, 3], &[0.; 3]), &t_f32(&[4, 5], &[0.; 20])]
        )
        .is_err());
        check("...j,j->...", &[&[2, 3, 4], &[4]], 14);
        assert!(eins(
            "ij,jk->ik",
            &[&t_f32(&[2, 3], &[0.; 6]), &t_f32(&[4, 2], &[0.; 8])]
        )
        .is_err());
        assert!(eins("ij->ik", &[&t_f32(&[2, 3], &[0.; 6])]).is_err());
    }

    #[test]
    fn matmul_gemm_hand() {
        let a = t_f32(&[2, 2], &[1., 2., 3., 4.]);
        let b = t_f32(&[2, 2], &[5., 6., 7., 8.]);
        let o = run_op("MatMul", &[], &[Some(&a), Some(&b)], 1).unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[19., 22., 43., 50.]);
        let c = t_f32(&[2], &[1., -1.]);
        let o = run_op(
            "Gemm",
            &[
                ("transB", AttrValue::Int(1)),
                ("alpha", AttrValue::Float(2.0)),
            ],
            &[Some(&a), Some(&b), Some(&c)],
            1,
        )
        .unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[35., 45., 79., 105.]);
        let h = |t: &Tensor| {
            t_of::<f16>(
                &t.shape,
                &t.data::<f32>()
                    .unwrap()
                    .iter()
                    .map(|&v| f16::from_f32(v))
                    .collect::<Vec<_>>(),
            )
        };
        let o = run_op("MatMul", &[], &[Some(&h(&a)), Some(&h(&b))], 1).unwrap();
        assert_eq!(o[0].data::<f16>().unwrap()[3], f16::from_f32(50.));
        let i = t_i64(&[1, 2], &[2, 3]);
        let o = run_op("MatMul", &[], &[Some(&i), Some(&t_i64(&[2], &[4, 5]))], 1).unwrap();
        assert_eq!(o[0].data::<i64>().unwrap(), &[23]);
        assert!(run_op(
            "MatMul",
            &[],
            &[Some(&a), Some(&t_f32(&[3], &[1., 2., 3.]))],
            1
        )
        .is_err());
    }

    proptest! {
        #[test]
        fn linalg_chunk_identity(
            b in 1usize..4, m in 1usize..20, k in 1usize..40, n in 1usize..20,
            cuts in prop::collection::vec(any::<usize>(), 0..4), seed in any::<u64>(),
        ) {
            let x = t_f32(&[b, m, k], &rand_f32(b * m * k, seed));
            let y = t_f32(&[b, k, n], &rand_f32(b * k * n, seed + 1));
            let yt = t_f32(&[b, n, k], &rand_f32(b * k * n, seed + 2));
            for ax in 0..2 {
                check_chunks("MatMul", &[], &[&x, &y], &[Some(ax), if ax == 0 { Some(0) } else { None }], ax, &cuts).unwrap();
            }
            check_chunks("MatMul", &[], &[&x, &y], &[None, Some(2)], 2, &cuts).unwrap();
            let eq = [("equation", AttrValue::String(b"bmk,bnk->bnm".to_vec()))];
            check_chunks("Einsum", &eq, &[&x, &yt], &[None, Some(1)], 1, &cuts).unwrap();
            check_chunks("Einsum", &eq, &[&x, &yt], &[Some(1), None], 2, &cuts).unwrap();
            check_chunks("Einsum", &eq, &[&x, &yt], &[Some(0), Some(0)], 0, &cuts).unwrap();
        }

        /// Gemm's record splits its rows and columns, `C` sliced where it has the axis and read
        /// whole where it broadcasts, exactly as the kernel computes the whole, transposed or not.
        #[test]
        fn gemm_flow_matches_its_kernel(
            m in 1usize..20, k in 1usize..30, n in 1usize..20, ta in any::<bool>(), tb in any::<bool>(),
            c_kind in 0usize..4, cuts in prop::collection::vec(any::<usize>(), 0..4), seed in any::<u64>(),
        ) {
            let a = if ta { [k, m] } else { [m, k] };
            let b = if tb { [n, k] } else { [k, n] };
            let a = t_f32(&a, &rand_f32(m * k, seed));
            let b = t_f32(&b, &rand_f32(k * n, seed + 1));
            let c_shape: &[usize] = match c_kind { 0 => &[m, n], 1 => &[n], 2 => &[m, 1], _ => &[1] };
            let c = t_f32(c_shape, &rand_f32(c_shape.iter().product(), seed + 2));
            let attrs = [
                ("transA", AttrValue::Int(ta as i64)),
                ("transB", AttrValue::Int(tb as i64)),
                ("alpha", AttrValue::Float(0.75)),
                ("beta", AttrValue::Float(1.5)),
            ];
            for out_axis in 0..2 {
                let axes = flow_axes("Gemm", &attrs, &[&a, &b, &c], out_axis).unwrap();
                check_chunks("Gemm", &attrs, &[&a, &b, &c], &axes, out_axis, &cuts).unwrap();
                let two = flow_axes("Gemm", &attrs, &[&a, &b], out_axis).unwrap();
                check_chunks("Gemm", &attrs, &[&a, &b], &two, out_axis, &cuts).unwrap();
            }
        }
    }

    /// Det splits its batch axes, never the matrices.
    #[test]
    fn det_flow_matches_its_kernel() {
        let x = t_f32(&[3, 2, 3, 3], &rand_f32(54, 9));
        crate::ops::testutil::check_flow("Det", &[], &[&x], 1, &[0, 1], &[1]).unwrap();
    }
}
