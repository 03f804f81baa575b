//! Elementwise kernels: numpy broadcasting, the unary/binary/ternary/variadic drivers and the ONNX
//! elementwise operators built on them.
//!
//! Contract: every output element is a pure function of the input elements it broadcasts from, computed
//! by the same scalar code wherever it lies in the output (plain IEEE operations that LLVM may
//! autovectorize exactly; no fast-math, no FMA contraction). Computing any sub-block of the output, with
//! the matching input sub-blocks, therefore gives bit-identical results to computing it whole, and the
//! rayon split (by output rows, above [`PAR_THRESHOLD`] elements) cannot change any bit either.
//!
//! f16/bf16 arithmetic is not done here: the interpreter widens them to f32 (see `cast`), so [`Arith`]
//! and [`Float`] cover f32, f64 and the integer types only. [`Elem`] covers every element type and is
//! what the data-movement kernels (`movement`, `index`, `topk`, `cast`) are generic over.

use super::matmul::{check_len, shape_err, KResult, KernelError};
use half::{bf16, f16};
use rayon::prelude::*;

/// An element type a kernel can move: every ONNX numeric type plus bool.
pub trait Elem:
    Copy + Send + Sync + Default + PartialEq + PartialOrd + std::fmt::Debug + 'static
{
}

macro_rules! impl_elem {
    ($($t:ty),*) => { $(impl Elem for $t {})* };
}
impl_elem!(f32, f64, i64, i32, i16, i8, u8, u16, u32, u64, bool, f16, bf16);

/// Outputs at least this large are split over rayon tasks.
pub const PAR_THRESHOLD: usize = 1 << 15;
/// Broadcast rows shorter than this are processed in blocks of the two innermost dims.
const SHORT_ROW: usize = 16;
/// Elements per rayon task once an output is split.
const PAR_TASK: usize = 1 << 14;
/// [`PAR_THRESHOLD`] and [`PAR_TASK`] for a function of several nanoseconds per element (a libm
/// call through a function pointer: `Erf`, `Tanh`, `Gelu`, ...), where 16 Ki elements on one
/// thread take hundreds of microseconds.
const COSTLY_PAR_THRESHOLD: usize = 1 << 12;
const COSTLY_PAR_TASK: usize = 1 << 11;

/// The error for an index outside `[-len, len)` (or `[0, len)` where negatives are not allowed).
pub(crate) fn index_err(index: i64, axis: usize, len: usize) -> KernelError {
    shape_err(format!(
        "index {index} is out of range for axis {axis} of length {len}"
    ))
}

/// Row-major element strides of a shape.
pub(crate) fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// The numpy broadcast of several shapes: right-aligned, each dimension equal or 1.
pub fn broadcast_shapes(shapes: &[&[usize]]) -> KResult<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in shapes {
        let pad = rank - s.len();
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[pad + i];
            if d == 1 || d == *o {
                continue;
            }
            if *o == 1 {
                *o = d;
            } else {
                return Err(shape_err(format!("shapes {shapes:?} do not broadcast")));
            }
        }
    }
    Ok(out)
}

/// A broadcast of `K` inputs onto an output, with size-1 output dims dropped and adjacent dims merged
/// where every input is contiguous (or broadcast) across them. `dims` is never empty.
pub(crate) struct Layout<const K: usize> {
    pub(crate) dims: Vec<usize>,
    pub(crate) strides: [Vec<usize>; K],
}

impl<const K: usize> Layout<K> {
    /// Checks that every input broadcasts to `oshape` and builds the coalesced layout.
    pub(crate) fn new(oshape: &[usize], ishapes: [&[usize]; K]) -> KResult<Self> {
        let rank = oshape.len();
        let mut full: [Vec<usize>; K] = std::array::from_fn(|_| vec![0usize; rank]);
        for (k, s) in ishapes.iter().enumerate() {
            if s.len() > rank {
                return Err(shape_err(format!(
                    "input shape {s:?} does not broadcast to {oshape:?}"
                )));
            }
            let pad = rank - s.len();
            let st = strides_of(s);
            for (i, &d) in s.iter().enumerate() {
                let o = oshape[pad + i];
                if d == o {
                    full[k][pad + i] = if d == 1 { 0 } else { st[i] };
                } else if d != 1 {
                    return Err(shape_err(format!(
                        "input shape {s:?} does not broadcast to {oshape:?}"
                    )));
                }
            }
        }
        let mut dims: Vec<usize> = Vec::with_capacity(rank);
        let mut strides: [Vec<usize>; K] = std::array::from_fn(|_| Vec::with_capacity(rank));
        for i in 0..rank {
            let d = oshape[i];
            if d == 1 {
                continue;
            }
            let merge =
                !dims.is_empty() && (0..K).all(|k| strides[k].last() == Some(&(full[k][i] * d)));
            if merge {
                if let Some(last) = dims.last_mut() {
                    *last *= d;
                }
                for k in 0..K {
                    if let Some(last) = strides[k].last_mut() {
                        *last = full[k][i];
                    }
                }
            } else {
                dims.push(d);
                for k in 0..K {
                    strides[k].push(full[k][i]);
                }
            }
        }
        if dims.is_empty() {
            dims.push(1);
            for s in strides.iter_mut() {
                s.push(0);
            }
        }
        Ok(Layout { dims, strides })
    }

    /// Length of a row (the innermost merged dim).
    pub(crate) fn inner(&self) -> usize {
        self.dims.last().copied().unwrap_or(1)
    }

    /// Input strides along a row.
    pub(crate) fn inner_strides(&self) -> [usize; K] {
        std::array::from_fn(|k| self.strides[k].last().copied().unwrap_or(0))
    }

    /// Calls `row(i, offsets)` for rows `first..first + count` (`i` counts from 0), with each input's
    /// element offset of the row start. Index arithmetic is one division per call, then an odometer.
    pub(crate) fn for_rows(&self, first: usize, count: usize, row: impl FnMut(usize, [usize; K])) {
        self.for_blocks(1, first, count, row)
    }

    /// Calls `run(i, len, offsets)` for rows `first..first + count` in runs of consecutive rows along
    /// the second-innermost dim: `len` rows from row `first + i`, with each input's element offset of
    /// the run's first row (row to row, input `k` moves by [`Layout::row_strides`]`[k]`). One run per
    /// block of the two innermost dims, cut at `first` and `first + count`.
    pub(crate) fn for_runs(
        &self,
        first: usize,
        count: usize,
        mut run: impl FnMut(usize, usize, [usize; K]),
    ) {
        if count == 0 {
            return;
        }
        let rank = self.dims.len();
        if rank < 2 {
            return run(0, count, [0; K]);
        }
        let d2 = self.dims[rank - 2];
        let rs = self.row_strides();
        let (b0, b1) = (first / d2, (first + count).div_ceil(d2));
        self.for_blocks(2, b0, b1 - b0, |bi, offs| {
            let start = (b0 + bi) * d2;
            let lo = first.max(start);
            let hi = (first + count).min(start + d2);
            run(
                lo - first,
                hi - lo,
                std::array::from_fn(|k| offs[k] + (lo - start) * rs[k]),
            );
        });
    }

    /// Each input's stride from one row to the next along the second-innermost dim (0 at rank 1).
    pub(crate) fn row_strides(&self) -> [usize; K] {
        let rank = self.dims.len();
        std::array::from_fn(|k| {
            if rank < 2 {
                0
            } else {
                self.strides[k][rank - 2]
            }
        })
    }

    /// Like [`Layout::for_rows`] with a "row" made of the `inner_dims` innermost dims (1 or 2,
    /// at most the rank).
    pub(crate) fn for_blocks(
        &self,
        inner_dims: usize,
        first: usize,
        count: usize,
        mut row: impl FnMut(usize, [usize; K]),
    ) {
        let outer = &self.dims[..self.dims.len().saturating_sub(inner_dims)];
        let mut idx = vec![0usize; outer.len()];
        let mut rem = first;
        for d in (0..outer.len()).rev() {
            idx[d] = rem % outer[d];
            rem /= outer[d];
        }
        let mut offs: [usize; K] =
            std::array::from_fn(|k| idx.iter().zip(&self.strides[k]).map(|(i, s)| i * s).sum());
        for i in 0..count {
            row(i, offs);
            for d in (0..outer.len()).rev() {
                idx[d] += 1;
                if idx[d] < outer[d] {
                    for k in 0..K {
                        offs[k] += self.strides[k][d];
                    }
                    break;
                }
                idx[d] = 0;
                for k in 0..K {
                    offs[k] -= self.strides[k][d] * (outer[d] - 1);
                }
            }
        }
    }
}

/// When an elementwise kernel splits its output over rayon tasks: from `threshold` elements, in
/// tasks of `task` elements (whole rows at least). The split never changes a bit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Split {
    threshold: usize,
    task: usize,
}

/// A function of a fraction of a nanosecond per element (arithmetic, comparisons, selects).
pub(crate) const CHEAP: Split = Split {
    threshold: PAR_THRESHOLD,
    task: PAR_TASK,
};
/// A function of several nanoseconds per element (a libm call: `powf`, `fmodf`, `erff`, ...).
pub(crate) const COSTLY: Split = Split {
    threshold: COSTLY_PAR_THRESHOLD,
    task: COSTLY_PAR_TASK,
};

/// Runs `body(first_row, rows_of_out)` over `out` split into whole rows of `inner` elements, on rayon
/// tasks when `out` is at least [`PAR_THRESHOLD`] long.
pub(crate) fn par_rows<O: Send>(
    out: &mut [O],
    inner: usize,
    body: impl Fn(usize, &mut [O]) + Sync,
) {
    par_rows_split(out, inner, CHEAP, body)
}

/// [`par_rows`] at the given split.
fn par_rows_split<O: Send>(
    out: &mut [O],
    inner: usize,
    split: Split,
    body: impl Fn(usize, &mut [O]) + Sync,
) {
    let inner = inner.max(1);
    let rows_per_task = (out.len() >= split.threshold).then(|| split.task.div_ceil(inner));
    super::par::row_blocks(out, inner, rows_per_task, body);
}

/// `o[i] = f(a[i])`, compiled for AVX2 when the CPU has it (the same IEEE operations, only wider:
/// the bits do not depend on which version runs).
#[inline]
pub(crate) fn map1<A: Copy, O>(a: &[A], o: &mut [O], f: &impl Fn(A) -> O) {
    #[inline(always)]
    fn body<A: Copy, O>(a: &[A], o: &mut [O], f: &impl Fn(A) -> O) {
        for (o, &x) in o.iter_mut().zip(a) {
            *o = f(x);
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        unsafe fn wide<A: Copy, O>(a: &[A], o: &mut [O], f: &impl Fn(A) -> O) {
            body(a, o, f)
        }
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { wide(a, o, f) };
        }
    }
    body(a, o, f)
}

/// `o[i] = f(a[i], b[i])`, multiversioned like [`map1`].
#[inline]
pub(crate) fn map2<A: Copy, B: Copy, O>(a: &[A], b: &[B], o: &mut [O], f: &impl Fn(A, B) -> O) {
    #[inline(always)]
    fn body<A: Copy, B: Copy, O>(a: &[A], b: &[B], o: &mut [O], f: &impl Fn(A, B) -> O) {
        for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
            *o = f(x, y);
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        unsafe fn wide<A: Copy, B: Copy, O>(a: &[A], b: &[B], o: &mut [O], f: &impl Fn(A, B) -> O) {
            body(a, b, o, f)
        }
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { wide(a, b, o, f) };
        }
    }
    body(a, b, o, f)
}

/// `o[i] = f(a[i], b[i], c[i])`, multiversioned like [`map1`].
#[inline]
pub(crate) fn map3<A: Copy, B: Copy, C: Copy, O>(
    a: &[A],
    b: &[B],
    c: &[C],
    o: &mut [O],
    f: &impl Fn(A, B, C) -> O,
) {
    #[inline(always)]
    fn body<A: Copy, B: Copy, C: Copy, O>(
        a: &[A],
        b: &[B],
        c: &[C],
        o: &mut [O],
        f: &impl Fn(A, B, C) -> O,
    ) {
        for (((o, &x), &y), &z) in o.iter_mut().zip(a).zip(b).zip(c) {
            *o = f(x, y, z);
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        unsafe fn wide<A: Copy, B: Copy, C: Copy, O>(
            a: &[A],
            b: &[B],
            c: &[C],
            o: &mut [O],
            f: &impl Fn(A, B, C) -> O,
        ) {
            body(a, b, c, o, f)
        }
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { wide(a, b, c, o, f) };
        }
    }
    body(a, b, c, o, f)
}

/// `out[i] = f(a[i])` for equal-length slices.
pub fn unary<A: Elem, O: Elem>(a: &[A], out: &mut [O], f: impl Fn(A) -> O + Sync) -> KResult<()> {
    unary_split(a, out, f, CHEAP)
}

/// [`unary`] for a function of several nanoseconds per element: split over threads from a few
/// thousand elements (a chunk's slice of a large tensor is often that small). The split never
/// changes a bit: each element is `f` of its input.
pub fn unary_costly<A: Elem, O: Elem>(
    a: &[A],
    out: &mut [O],
    f: impl Fn(A) -> O + Sync,
) -> KResult<()> {
    unary_split(a, out, f, COSTLY)
}

fn unary_split<A: Elem, O: Elem>(
    a: &[A],
    out: &mut [O],
    f: impl Fn(A) -> O + Sync,
    split: Split,
) -> KResult<()> {
    let Split { threshold, task } = split;
    if a.len() != out.len() {
        return Err(shape_err(format!(
            "unary: input has {} elements, output {}",
            a.len(),
            out.len()
        )));
    }
    let run = |a: &[A], o: &mut [O]| map1(a, o, &f);
    if out.len() < threshold {
        run(a, out);
    } else {
        out.par_chunks_mut(task)
            .zip(a.par_chunks(task))
            .for_each(|(o, a)| run(a, o));
    }
    Ok(())
}

/// `out = f(a, b)` with numpy broadcasting; `oshape` must be the broadcast of `ashape` and `bshape`.
pub fn binary<A: Elem, B: Elem, O: Elem>(
    a: &[A],
    ashape: &[usize],
    b: &[B],
    bshape: &[usize],
    out: &mut [O],
    oshape: &[usize],
    f: impl Fn(A, B) -> O + Sync,
) -> KResult<()> {
    binary_split(a, ashape, b, bshape, out, oshape, CHEAP, f)
}

/// [`binary`] at the given split ([`COSTLY`] for a function of several nanoseconds per element).
#[allow(clippy::too_many_arguments)]
fn binary_split<A: Elem, B: Elem, O: Elem>(
    a: &[A],
    ashape: &[usize],
    b: &[B],
    bshape: &[usize],
    out: &mut [O],
    oshape: &[usize],
    split: Split,
    f: impl Fn(A, B) -> O + Sync,
) -> KResult<()> {
    check_len("binary input a", a.len(), ashape)?;
    check_len("binary input b", b.len(), bshape)?;
    check_len("binary output", out.len(), oshape)?;
    let want = broadcast_shapes(&[ashape, bshape])?;
    if want != oshape {
        return Err(shape_err(format!(
            "binary: output shape {oshape:?} is not the broadcast {want:?}"
        )));
    }
    let n = out.len();
    if n == 0 {
        return Ok(());
    }
    // Same shape (an input with as many elements as the output has the output's layout).
    if a.len() == n && b.len() == n {
        let run = |a: &[A], b: &[B], o: &mut [O]| map2(a, b, o, &f);
        if n < split.threshold {
            run(a, b, out);
        } else {
            out.par_chunks_mut(split.task)
                .zip(a.par_chunks(split.task))
                .zip(b.par_chunks(split.task))
                .for_each(|((o, a), b)| run(a, b, o));
        }
        return Ok(());
    }
    if a.len() == 1 && b.len() == n {
        let x = a[0];
        return unary_split(b, out, |y| f(x, y), split);
    }
    if b.len() == 1 && a.len() == n {
        let y = b[0];
        return unary_split(a, out, |x| f(x, y), split);
    }
    let l = Layout::new(oshape, [ashape, bshape])?;
    let inner = l.inner();
    let [sa, sb] = l.inner_strides();
    let rank = l.dims.len();
    if inner < SHORT_ROW && rank >= 2 {
        // Short rows: blocks of the two innermost dims, so that the per-row bookkeeping is paid once
        // per block.
        let d2 = l.dims[rank - 2];
        let (sa2, sb2) = (l.strides[0][rank - 2], l.strides[1][rank - 2]);
        let block = d2 * inner;
        par_rows_split(out, block, split, |first, chunk| {
            l.for_blocks(2, first, chunk.len() / block, |r, [oa, ob]| {
                let o = &mut chunk[r * block..(r + 1) * block];
                for (i2, o) in o.chunks_exact_mut(inner).enumerate() {
                    let (pa, pb) = (oa + i2 * sa2, ob + i2 * sb2);
                    for (i, o) in o.iter_mut().enumerate() {
                        *o = f(a[pa + i * sa], b[pb + i * sb]);
                    }
                }
            });
        });
        return Ok(());
    }
    let [ra, rb] = l.row_strides();
    par_rows_split(out, inner, split, |first, chunk| {
        l.for_runs(first, chunk.len() / inner, |i, len, [oa, ob]| {
            let o = &mut chunk[i * inner..(i + len) * inner];
            let wa = Walk {
                start: oa,
                row: ra,
                step: sa,
            };
            let wb = Walk {
                start: ob,
                row: rb,
                step: sb,
            };
            rows2(
                Pair {
                    a,
                    wa,
                    b,
                    wb,
                    inner,
                },
                o,
                &f,
            );
        });
    });
    Ok(())
}

/// Where one operand's rows of a broadcast lie: the first row's offset, the stride from row to
/// row, and the stride along a row (0, broadcast, or 1).
#[derive(Clone, Copy)]
struct Walk {
    start: usize,
    row: usize,
    step: usize,
}

/// The two operands of a run of rows of a broadcast binary op, each with its [`Walk`], and the
/// length of a row.
#[derive(Clone, Copy)]
struct Pair<'s, A, B> {
    a: &'s [A],
    wa: Walk,
    b: &'s [B],
    wb: Walk,
    inner: usize,
}

/// `o[r * inner + i] = f(a[..], b[..])` for the rows of `o`, each operand read along its [`Walk`]:
/// one multiversioned loop over a run of rows, since calling and dispatching a vectorized loop per
/// row costs as much as a row of 32 elements. Each element is `f` of the same two inputs as row by
/// row.
fn rows2<A: Copy, B: Copy, O: Copy>(x: Pair<'_, A, B>, o: &mut [O], f: &impl Fn(A, B) -> O) {
    #[inline(always)]
    fn body<A: Copy, B: Copy, O: Copy>(x: Pair<'_, A, B>, o: &mut [O], f: &impl Fn(A, B) -> O) {
        let Pair {
            a,
            wa,
            b,
            wb,
            inner,
        } = x;
        let rows = o.chunks_exact_mut(inner).enumerate();
        let at = |w: Walk, r: usize| w.start + r * w.row;
        match (wa.step, wb.step) {
            (0, 0) => rows.for_each(|(r, o)| o.fill(f(a[at(wa, r)], b[at(wb, r)]))),
            (0, _) => rows.for_each(|(r, o)| {
                let (x, pb) = (a[at(wa, r)], at(wb, r));
                for (o, &y) in o.iter_mut().zip(&b[pb..pb + inner]) {
                    *o = f(x, y);
                }
            }),
            (_, 0) => rows.for_each(|(r, o)| {
                let (pa, y) = (at(wa, r), b[at(wb, r)]);
                for (o, &x) in o.iter_mut().zip(&a[pa..pa + inner]) {
                    *o = f(x, y);
                }
            }),
            _ => rows.for_each(|(r, o)| {
                let (pa, pb) = (at(wa, r), at(wb, r));
                for ((o, &x), &y) in o.iter_mut().zip(&a[pa..pa + inner]).zip(&b[pb..pb + inner]) {
                    *o = f(x, y);
                }
            }),
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        unsafe fn wide<A: Copy, B: Copy, O: Copy>(
            x: Pair<'_, A, B>,
            o: &mut [O],
            f: &impl Fn(A, B) -> O,
        ) {
            body(x, o, f)
        }
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { wide(x, o, f) };
        }
    }
    body(x, o, f)
}

/// `out = f(out, b)` in place, with `b` broadcast to `oshape` (used by variadic ops and Expand).
pub fn assign_broadcast<T: Elem, B: Elem>(
    out: &mut [T],
    oshape: &[usize],
    b: &[B],
    bshape: &[usize],
    f: impl Fn(T, B) -> T + Sync,
) -> KResult<()> {
    check_len("broadcast output", out.len(), oshape)?;
    check_len("broadcast input", b.len(), bshape)?;
    if out.is_empty() {
        return Ok(());
    }
    let l = Layout::new(oshape, [bshape])?;
    let inner = l.inner();
    let [sb] = l.inner_strides();
    par_rows(out, inner, |first, chunk| {
        l.for_rows(first, chunk.len() / inner, |r, [ob]| {
            let o = &mut chunk[r * inner..(r + 1) * inner];
            if sb == 0 {
                let y = b[ob];
                for o in o.iter_mut() {
                    *o = f(*o, y);
                }
            } else {
                for (o, &y) in o.iter_mut().zip(&b[ob..ob + inner]) {
                    *o = f(*o, y);
                }
            }
        });
    });
    Ok(())
}

/// `out = f(a, b, c)` with numpy broadcasting of all three inputs onto `oshape`.
pub fn ternary<A: Elem, B: Elem, C: Elem, O: Elem>(
    a: (&[A], &[usize]),
    b: (&[B], &[usize]),
    c: (&[C], &[usize]),
    out: &mut [O],
    oshape: &[usize],
    f: impl Fn(A, B, C) -> O + Sync,
) -> KResult<()> {
    check_len("ternary input a", a.0.len(), a.1)?;
    check_len("ternary input b", b.0.len(), b.1)?;
    check_len("ternary input c", c.0.len(), c.1)?;
    check_len("ternary output", out.len(), oshape)?;
    let want = broadcast_shapes(&[a.1, b.1, c.1])?;
    if want != oshape {
        return Err(shape_err(format!(
            "ternary: output shape {oshape:?} is not the broadcast {want:?}"
        )));
    }
    let n = out.len();
    if n == 0 {
        return Ok(());
    }
    let l = Layout::new(oshape, [a.1, b.1, c.1])?;
    let (a, b, c) = (a.0, b.0, c.0);
    // Every input the output's size (its layout) or one element (`Where(mask, x, -inf)`): flat
    // chunks, a one-element input read once per chunk.
    let flat = |len: usize| len == n || len == 1;
    if flat(a.len()) && flat(b.len()) && flat(c.len()) {
        let Split { threshold, task } = CHEAP;
        if n < threshold {
            flat3(a, b, c, 0, out, &f);
        } else {
            out.par_chunks_mut(task)
                .enumerate()
                .for_each(|(t, o)| flat3(a, b, c, t * task, o, &f));
        }
        return Ok(());
    }
    let inner = l.inner();
    let [sa, sb, sc] = l.inner_strides();
    par_rows(out, inner, |first, chunk| {
        l.for_rows(first, chunk.len() / inner, |r, [oa, ob, oc]| {
            let o = &mut chunk[r * inner..(r + 1) * inner];
            for (i, o) in o.iter_mut().enumerate() {
                *o = f(a[oa + i * sa], b[ob + i * sb], c[oc + i * sc]);
            }
        });
    });
    Ok(())
}

/// `o[i] = f(a[start + i], b[start + i], c[start + i])`, a one-element input standing for every
/// element, as straight loops over slices (see [`ternary`]).
fn flat3<A: Copy, B: Copy, C: Copy, O>(
    a: &[A],
    b: &[B],
    c: &[C],
    start: usize,
    o: &mut [O],
    f: &impl Fn(A, B, C) -> O,
) {
    let r = start..start + o.len();
    match (a.len() == 1, b.len() == 1, c.len() == 1) {
        (false, false, false) => map3(&a[r.clone()], &b[r.clone()], &c[r], o, f),
        (false, false, true) => {
            let z = c[0];
            map2(&a[r.clone()], &b[r], o, &|x, y| f(x, y, z))
        }
        (false, true, false) => {
            let y = b[0];
            map2(&a[r.clone()], &c[r], o, &|x, z| f(x, y, z))
        }
        (true, false, false) => {
            let x = a[0];
            map2(&b[r.clone()], &c[r], o, &|y, z| f(x, y, z))
        }
        (false, true, true) => {
            let (y, z) = (b[0], c[0]);
            map1(&a[r], o, &|x| f(x, y, z))
        }
        (true, false, true) => {
            let (x, z) = (a[0], c[0]);
            map1(&b[r], o, &|y| f(x, y, z))
        }
        (true, true, false) => {
            let (x, y) = (a[0], b[0]);
            map1(&c[r], o, &|z| f(x, y, z))
        }
        (true, true, true) => o.iter_mut().for_each(|o| *o = f(a[0], b[0], c[0])),
    }
}

/// Numeric element types with ONNX arithmetic: f32, f64 and the integer types.
///
/// Integer `add`/`sub`/`mul`/`neg` wrap (two's complement, as onnxruntime's C++ does in practice);
/// integer `div` truncates toward zero and wraps `MIN / -1`. Callers reject integer zero divisors
/// before calling `div`, `fmod` or `floor_mod` (see [`binary_op`]).
pub trait Arith: Elem {
    /// True for f32 and f64.
    const IS_FLOAT: bool;
    /// Additive identity.
    const ZERO: Self;
    /// Multiplicative identity.
    const ONE: Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    /// Floats: `powf`. Integers: exact wrapping power; a negative exponent truncates `1 / a^-b`.
    fn pow(self, o: Self) -> Self;
    /// Remainder with the sign of the dividend (C `fmod`, Rust `%`).
    fn fmod(self, o: Self) -> Self;
    /// Remainder with the sign of the divisor (Python `%`, numpy `mod`).
    fn floor_mod(self, o: Self) -> Self;
    fn neg(self) -> Self;
    fn abs(self) -> Self;
    /// -1, 0 or 1 (floats: NaN stays NaN).
    fn sign(self) -> Self;
    fn is_zero(self) -> bool;
    /// True only for a float NaN.
    fn is_nan(self) -> bool;
    /// The value of a count (used by Mean); saturates for narrow integers.
    fn from_usize(n: usize) -> Self;
    /// numpy `maximum`: NaN if either operand is NaN.
    fn max_nan(self, o: Self) -> Self {
        if self.is_nan() {
            self
        } else if o.is_nan() || o > self {
            o
        } else {
            self
        }
    }
    /// numpy `minimum`: NaN if either operand is NaN.
    fn min_nan(self, o: Self) -> Self {
        if self.is_nan() {
            self
        } else if o.is_nan() || o < self {
            o
        } else {
            self
        }
    }
}

macro_rules! impl_arith_int {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            const IS_FLOAT: bool = false;
            const ZERO: Self = 0;
            const ONE: Self = 1;
            #[inline] fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline] fn sub(self, o: Self) -> Self { self.wrapping_sub(o) }
            #[inline] fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[inline] fn div(self, o: Self) -> Self { if o == 0 { 0 } else { self.wrapping_div(o) } }
            fn pow(self, o: Self) -> Self {
                #[allow(unused_comparisons)]
                let neg = o < 0;
                if neg {
                    // 1 / self^|o| truncated toward zero.
                    return match self as i128 {
                        1 => 1,
                        -1 => if (o as i128) % 2 == 0 { 1 } else { self },
                        _ => 0,
                    };
                }
                let (mut base, mut e, mut acc) = (self, o as u128, 1 as $t);
                while e > 0 {
                    if e & 1 == 1 { acc = acc.wrapping_mul(base); }
                    base = base.wrapping_mul(base);
                    e >>= 1;
                }
                acc
            }
            #[inline] fn fmod(self, o: Self) -> Self { if o == 0 { 0 } else { self.wrapping_rem(o) } }
            #[inline] fn floor_mod(self, o: Self) -> Self {
                if o == 0 { return 0; }
                let r = self.wrapping_rem(o);
                #[allow(unused_comparisons)]
                let fix = r != 0 && ((r < 0) != (o < 0));
                if fix { r.wrapping_add(o) } else { r }
            }
            #[inline] fn neg(self) -> Self { (0 as $t).wrapping_sub(self) }
            #[inline] fn abs(self) -> Self {
                #[allow(unused_comparisons)]
                let n = self < 0;
                if n { (0 as $t).wrapping_sub(self) } else { self }
            }
            #[inline] fn sign(self) -> Self {
                #[allow(unused_comparisons)]
                let n = self < 0;
                if n { (0 as $t).wrapping_sub(1) } else if self == 0 { 0 } else { 1 }
            }
            #[inline] fn is_zero(self) -> bool { self == 0 }
            #[inline] fn is_nan(self) -> bool { false }
            fn from_usize(n: usize) -> Self { <$t>::try_from(n).unwrap_or(<$t>::MAX) }
        }
    )*};
}
impl_arith_int!(i8, i16, i32, i64, u8, u16, u32, u64);

/// Float element types (f32, f64) with the transcendental functions ONNX needs. Everything is a scalar
/// function of one element: [`super::fastmath`]'s inlined ones for f32 exp, ln, erf and tanh, std
/// (the platform libm) for f64 exp, ln and tanh and for sin/cos/powf, `libm` for f64 erf.
pub trait Float: Arith {
    fn from_f32(v: f32) -> Self;
    fn sqrt(self) -> Self;
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn tanh(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn erf(self) -> Self;
    fn floor(self) -> Self;
    fn ceil(self) -> Self;
    /// Round half to even.
    fn round_even(self) -> Self;
    fn is_infinite(self) -> bool;
    fn is_sign_negative(self) -> bool;
}

macro_rules! impl_float {
    ($($t:ty, $erf:path, $exp:path, $ln:path, $tanh:path);*) => {$(
        impl Arith for $t {
            const IS_FLOAT: bool = true;
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[inline] fn add(self, o: Self) -> Self { self + o }
            #[inline] fn sub(self, o: Self) -> Self { self - o }
            #[inline] fn mul(self, o: Self) -> Self { self * o }
            #[inline] fn div(self, o: Self) -> Self { self / o }
            #[inline] fn pow(self, o: Self) -> Self { self.powf(o) }
            #[inline] fn fmod(self, o: Self) -> Self { self % o }
            #[inline] fn floor_mod(self, o: Self) -> Self {
                // numpy `mod`: the remainder moves to the divisor's sign; a zero takes its sign.
                let r = self % o;
                if r == 0.0 {
                    <$t>::copysign(0.0, o)
                } else if (r < 0.0) != (o < 0.0) {
                    r + o
                } else {
                    r
                }
            }
            #[inline] fn neg(self) -> Self { -self }
            #[inline] fn abs(self) -> Self { <$t>::abs(self) }
            #[inline] fn sign(self) -> Self {
                if self > 0.0 { 1.0 } else if self < 0.0 { -1.0 } else { self }
            }
            #[inline] fn is_zero(self) -> bool { self == 0.0 }
            #[inline] fn is_nan(self) -> bool { <$t>::is_nan(self) }
            fn from_usize(n: usize) -> Self { n as $t }
        }
        impl Float for $t {
            #[inline] fn from_f32(v: f32) -> Self { v as $t }
            #[inline] fn sqrt(self) -> Self { <$t>::sqrt(self) }
            #[inline(always)] fn exp(self) -> Self { $exp(self) }
            #[inline(always)] fn ln(self) -> Self { $ln(self) }
            #[inline] fn tanh(self) -> Self { $tanh(self) }
            #[inline] fn sin(self) -> Self { <$t>::sin(self) }
            #[inline] fn cos(self) -> Self { <$t>::cos(self) }
            #[inline] fn erf(self) -> Self { $erf(self) }
            #[inline] fn floor(self) -> Self { <$t>::floor(self) }
            #[inline] fn ceil(self) -> Self { <$t>::ceil(self) }
            #[inline] fn round_even(self) -> Self { <$t>::round_ties_even(self) }
            #[inline] fn is_infinite(self) -> bool { <$t>::is_infinite(self) }
            #[inline] fn is_sign_negative(self) -> bool { <$t>::is_sign_negative(self) }
        }
    )*};
}
// f32 exp and ln are the vectorizable `fastmath::exp_f32` and `ln_f32` (within 2 ulp of correctly
// rounded); f32 `erf` and `tanh` are the vectorizable rational approximations of `fastmath` (within
// 8 ulp).
impl_float!(
    f32, super::fastmath::erf_f32, super::fastmath::exp_f32, super::fastmath::ln_f32,
        super::fastmath::tanh_f32;
    f64, libm::erf, f64::exp, f64::ln, f64::tanh
);

/// Binary arithmetic ONNX operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// Integers truncate toward zero; an integer zero divisor is an error.
    Div,
    Pow,
    /// `fmod = false`: sign of the divisor (numpy `mod`); `true`: sign of the dividend.
    Mod {
        fmod: bool,
    },
    /// Two-input Max with numpy NaN propagation (variadic Max folds this).
    Max,
    /// Two-input Min with numpy NaN propagation.
    Min,
}

/// Applies a [`BinaryOp`] with broadcasting. Errors: bad shapes, an integer zero divisor in Div/Mod.
pub fn binary_op<T: Arith>(
    op: BinaryOp,
    a: &[T],
    ashape: &[usize],
    b: &[T],
    bshape: &[usize],
    out: &mut [T],
    oshape: &[usize],
) -> KResult<()> {
    let divides = matches!(op, BinaryOp::Div | BinaryOp::Mod { .. });
    if divides && !T::IS_FLOAT && b.iter().any(|v| v.is_zero()) {
        return Err(KernelError::Unsupported(format!(
            "{op:?}: integer division by zero"
        )));
    }
    match op {
        BinaryOp::Add => binary(a, ashape, b, bshape, out, oshape, T::add),
        BinaryOp::Sub => binary(a, ashape, b, bshape, out, oshape, T::sub),
        BinaryOp::Mul => binary(a, ashape, b, bshape, out, oshape, T::mul),
        BinaryOp::Div => binary(a, ashape, b, bshape, out, oshape, T::div),
        // A libm call per element.
        BinaryOp::Pow => binary_split(a, ashape, b, bshape, out, oshape, COSTLY, T::pow),
        BinaryOp::Mod { fmod: true } => {
            binary_split(a, ashape, b, bshape, out, oshape, COSTLY, T::fmod)
        }
        BinaryOp::Mod { fmod: false } => binary(a, ashape, b, bshape, out, oshape, T::floor_mod),
        BinaryOp::Max => binary(a, ashape, b, bshape, out, oshape, T::max_nan),
        BinaryOp::Min => binary(a, ashape, b, bshape, out, oshape, T::min_nan),
    }
}

/// Comparison operators, producing bool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    Equal,
    Less,
    Greater,
    LessOrEqual,
    GreaterOrEqual,
}

/// Applies a [`CmpOp`] with broadcasting (IEEE semantics: any comparison with NaN is false).
pub fn compare<T: Elem>(
    op: CmpOp,
    a: &[T],
    ashape: &[usize],
    b: &[T],
    bshape: &[usize],
    out: &mut [bool],
    oshape: &[usize],
) -> KResult<()> {
    match op {
        CmpOp::Equal => binary(a, ashape, b, bshape, out, oshape, |x, y| x == y),
        CmpOp::Less => binary(a, ashape, b, bshape, out, oshape, |x, y| x < y),
        CmpOp::Greater => binary(a, ashape, b, bshape, out, oshape, |x, y| x > y),
        CmpOp::LessOrEqual => binary(a, ashape, b, bshape, out, oshape, |x, y| x <= y),
        CmpOp::GreaterOrEqual => binary(a, ashape, b, bshape, out, oshape, |x, y| x >= y),
    }
}

/// Boolean binary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogicOp {
    And,
    Or,
    Xor,
}

/// Applies a [`LogicOp`] with broadcasting.
pub fn logical(
    op: LogicOp,
    a: &[bool],
    ashape: &[usize],
    b: &[bool],
    bshape: &[usize],
    out: &mut [bool],
    oshape: &[usize],
) -> KResult<()> {
    match op {
        LogicOp::And => binary(a, ashape, b, bshape, out, oshape, |x, y| x & y),
        LogicOp::Or => binary(a, ashape, b, bshape, out, oshape, |x, y| x | y),
        LogicOp::Xor => binary(a, ashape, b, bshape, out, oshape, |x, y| x ^ y),
    }
}

/// ONNX Not.
pub fn not(a: &[bool], out: &mut [bool]) -> KResult<()> {
    unary(a, out, |x| !x)
}

/// Unsigned integers, for BitShift.
pub trait Shift: Elem {
    /// `self << amount`, 0 when `amount` is at least the bit width.
    fn shl(self, amount: Self) -> Self;
    /// `self >> amount`, 0 when `amount` is at least the bit width.
    fn shr(self, amount: Self) -> Self;
}

macro_rules! impl_shift {
    ($($t:ty),*) => {$(
        impl Shift for $t {
            #[inline] fn shl(self, a: Self) -> Self {
                u32::try_from(a).ok().and_then(|a| self.checked_shl(a)).unwrap_or(0)
            }
            #[inline] fn shr(self, a: Self) -> Self {
                u32::try_from(a).ok().and_then(|a| self.checked_shr(a)).unwrap_or(0)
            }
        }
    )*};
}
impl_shift!(u8, u16, u32, u64);

/// Signed shifts (BitShift from opset 28, as the ONNX reference computes them): a shift amount
/// outside `0..bits` gives 0 to the left and the sign fill (0 or -1) to the right; a left shift
/// wraps as on the unsigned bits; a right shift is arithmetic.
macro_rules! impl_shift_signed {
    ($($t:ty),*) => {$(
        impl Shift for $t {
            #[inline] fn shl(self, a: Self) -> Self {
                if a < 0 || a as u32 >= <$t>::BITS { 0 } else { self.wrapping_shl(a as u32) }
            }
            #[inline] fn shr(self, a: Self) -> Self {
                if a < 0 || a as u32 >= <$t>::BITS {
                    if self < 0 { -1 } else { 0 }
                } else {
                    self >> a
                }
            }
        }
    )*};
}
impl_shift_signed!(i8, i16, i32, i64);

/// ONNX BitShift (`left = direction == "LEFT"`), with broadcasting.
pub fn bitshift<T: Shift>(
    left: bool,
    a: &[T],
    ashape: &[usize],
    b: &[T],
    bshape: &[usize],
    out: &mut [T],
    oshape: &[usize],
) -> KResult<()> {
    if left {
        binary(a, ashape, b, bshape, out, oshape, T::shl)
    } else {
        binary(a, ashape, b, bshape, out, oshape, T::shr)
    }
}

/// ONNX Where: `out = if cond { x } else { y }`, all three broadcast.
pub fn where_<T: Elem>(
    cond: &[bool],
    cshape: &[usize],
    x: &[T],
    xshape: &[usize],
    y: &[T],
    yshape: &[usize],
    out: &mut [T],
    oshape: &[usize],
) -> KResult<()> {
    ternary(
        (cond, cshape),
        (x, xshape),
        (y, yshape),
        out,
        oshape,
        |c, x, y| if c { x } else { y },
    )
}

/// Unary ONNX operators. Attributes are the f32 values ONNX stores.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    Neg,
    Abs,
    Sign,
    Relu,
    Sqrt,
    Exp,
    Log,
    Tanh,
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    Erf,
    LeakyRelu {
        alpha: f32,
    },
    Elu {
        alpha: f32,
    },
    /// `tanh = false`: `0.5 x (1 + erf(x / sqrt 2))`; `true`: the tanh approximation.
    Gelu {
        tanh: bool,
    },
    /// `max(0, min(1, alpha x + beta))`.
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
    /// `x * HardSigmoid(x; 1/6, 1/2)`.
    HardSwish,
    /// `x > 0 ? x + ln(1 + exp(-x)) : ln(1 + exp(x))` (overflow-safe form).
    Softplus,
    Reciprocal,
    Floor,
    Ceil,
    /// Half to even.
    Round,
    Sin,
    Cos,
}

impl UnaryOp {
    /// Whether the op is defined on integers ([`unary_arith_op`]).
    pub fn integer_ok(self) -> bool {
        matches!(
            self,
            UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sign | UnaryOp::Relu
        )
    }
}

#[inline]
fn hard_sigmoid<T: Float>(x: T, alpha: T, beta: T) -> T {
    let v = alpha.mul(x).add(beta);
    if v > T::ONE {
        T::ONE
    } else if v < T::ZERO {
        T::ZERO
    } else {
        v
    }
}

#[inline]
fn relu<T: Arith>(x: T) -> T {
    if x < T::ZERO {
        T::ZERO
    } else {
        x
    }
}

/// Applies a float [`UnaryOp`] elementwise.
pub fn unary_op<T: Float>(op: UnaryOp, x: &[T], out: &mut [T]) -> KResult<()> {
    let half = T::from_f32(0.5);
    match op {
        UnaryOp::Neg => unary(x, out, T::neg),
        UnaryOp::Abs => unary(x, out, T::abs),
        UnaryOp::Sign => unary(x, out, T::sign),
        UnaryOp::Relu => unary(x, out, relu),
        UnaryOp::Sqrt => unary(x, out, T::sqrt),
        UnaryOp::Exp => unary(x, out, T::exp),
        UnaryOp::Log => unary(x, out, T::ln),
        UnaryOp::Tanh => unary(x, out, T::tanh),
        UnaryOp::Sigmoid => unary(x, out, |v| T::ONE.div(T::ONE.add(v.neg().exp()))),
        UnaryOp::Erf => unary(x, out, T::erf),
        UnaryOp::LeakyRelu { alpha } => {
            let alpha = T::from_f32(alpha);
            unary(x, out, |v| if v < T::ZERO { alpha.mul(v) } else { v })
        }
        UnaryOp::Elu { alpha } => {
            let alpha = T::from_f32(alpha);
            unary(x, out, |v| {
                if v < T::ZERO {
                    alpha.mul(v.exp().sub(T::ONE))
                } else {
                    v
                }
            })
        }
        UnaryOp::Gelu { tanh: false } => {
            let inv_sqrt2 = T::ONE.div(T::from_f32(2.0).sqrt());
            unary(x, out, |v| {
                half.mul(v).mul(T::ONE.add(v.mul(inv_sqrt2).erf()))
            })
        }
        UnaryOp::Gelu { tanh: true } => {
            let c = T::from_f32(2.0)
                .div(T::from_f32(std::f32::consts::PI))
                .sqrt();
            let k = T::from_f32(0.044715);
            unary(x, out, |v| {
                let inner = c.mul(v.add(k.mul(v).mul(v).mul(v)));
                half.mul(v).mul(T::ONE.add(inner.tanh()))
            })
        }
        UnaryOp::HardSigmoid { alpha, beta } => {
            let (alpha, beta) = (T::from_f32(alpha), T::from_f32(beta));
            unary(x, out, |v| hard_sigmoid(v, alpha, beta))
        }
        UnaryOp::HardSwish => {
            let alpha = T::ONE.div(T::from_f32(6.0));
            unary(x, out, |v| v.mul(hard_sigmoid(v, alpha, half)))
        }
        UnaryOp::Softplus => unary(x, out, |v| {
            if v > T::ZERO {
                v.add(v.neg().exp().add(T::ONE).ln())
            } else {
                v.exp().add(T::ONE).ln()
            }
        }),
        UnaryOp::Reciprocal => unary(x, out, |v| T::ONE.div(v)),
        UnaryOp::Floor => unary(x, out, T::floor),
        UnaryOp::Ceil => unary(x, out, T::ceil),
        UnaryOp::Round => unary(x, out, T::round_even),
        UnaryOp::Sin => unary(x, out, T::sin),
        UnaryOp::Cos => unary(x, out, T::cos),
    }
}

/// Applies an integer-capable [`UnaryOp`] (Neg, Abs, Sign, Relu) to any [`Arith`] type; other ops
/// are an error.
pub fn unary_arith_op<T: Arith>(op: UnaryOp, x: &[T], out: &mut [T]) -> KResult<()> {
    match op {
        UnaryOp::Neg => unary(x, out, T::neg),
        UnaryOp::Abs => unary(x, out, T::abs),
        UnaryOp::Sign => unary(x, out, T::sign),
        UnaryOp::Relu => unary(x, out, relu),
        _ => Err(KernelError::Unsupported(format!(
            "{op:?} is defined for floating-point inputs only"
        ))),
    }
}

/// ONNX IsNaN.
pub fn is_nan<T: Float>(x: &[T], out: &mut [bool]) -> KResult<()> {
    unary(x, out, T::is_nan)
}

/// ONNX IsInf with its `detect_positive` / `detect_negative` attributes.
pub fn is_inf<T: Float>(
    x: &[T],
    out: &mut [bool],
    detect_positive: bool,
    detect_negative: bool,
) -> KResult<()> {
    unary(x, out, |v| {
        v.is_infinite()
            && if v.is_sign_negative() {
                detect_negative
            } else {
                detect_positive
            }
    })
}

/// ONNX Clip: `min(max(x, lo), hi)` where given; NaN inputs pass through. `lo > hi` gives `hi`
/// everywhere (as onnxruntime).
pub fn clip<T: Arith>(x: &[T], out: &mut [T], lo: Option<T>, hi: Option<T>) -> KResult<()> {
    unary(x, out, |v| {
        let v = match lo {
            Some(l) if v < l => l,
            _ => v,
        };
        match hi {
            Some(h) if v > h => h,
            _ => v,
        }
    })
}

/// Variadic elementwise ONNX operators (folded left to right with broadcasting).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VariadicOp {
    Sum,
    /// Sum, then one division by the input count.
    Mean,
    Max,
    Min,
}

/// Folds `f` over `inputs` left to right: `out = f(...f(f(in0, in1), in2)...)`, each broadcast to
/// `oshape`, which must be the broadcast of all input shapes.
pub fn variadic<T: Elem>(
    inputs: &[(&[T], &[usize])],
    out: &mut [T],
    oshape: &[usize],
    f: impl Fn(T, T) -> T + Sync,
) -> KResult<()> {
    let Some(((first, fshape), rest)) = inputs.split_first() else {
        return Err(shape_err("variadic op needs at least one input"));
    };
    let shapes: Vec<&[usize]> = inputs.iter().map(|(_, s)| *s).collect();
    let want = broadcast_shapes(&shapes)?;
    if want != oshape {
        return Err(shape_err(format!(
            "variadic: output shape {oshape:?} is not the broadcast {want:?}"
        )));
    }
    for (data, shape) in inputs {
        check_len("variadic input", data.len(), shape)?;
    }
    assign_broadcast(out, oshape, first, fshape, |_, v| v)?;
    for (data, shape) in rest {
        assign_broadcast(out, oshape, data, shape, &f)?;
    }
    Ok(())
}

/// Applies a [`VariadicOp`].
pub fn variadic_op<T: Arith>(
    op: VariadicOp,
    inputs: &[(&[T], &[usize])],
    out: &mut [T],
    oshape: &[usize],
) -> KResult<()> {
    match op {
        VariadicOp::Sum => variadic(inputs, out, oshape, T::add),
        VariadicOp::Max => variadic(inputs, out, oshape, T::max_nan),
        VariadicOp::Min => variadic(inputs, out, oshape, T::min_nan),
        VariadicOp::Mean => {
            variadic(inputs, out, oshape, T::add)?;
            let n = T::from_usize(inputs.len());
            for v in out.iter_mut() {
                *v = v.div(n);
            }
            Ok(())
        }
    }
}

/// Helpers shared by the kernel tests of this family of files.
#[cfg(test)]
pub(crate) mod testutil {
    use super::strides_of;
    use proptest::prelude::*;

    /// Elements `lo..hi` along `axis` of a row-major tensor (naive reference, no kernel code).
    pub(crate) fn take_axis<T: Copy>(
        x: &[T],
        shape: &[usize],
        axis: usize,
        lo: usize,
        hi: usize,
    ) -> Vec<T> {
        let outer: usize = shape[..axis].iter().product();
        let inner: usize = shape[axis + 1..].iter().product();
        let d = shape[axis];
        let mut out = Vec::new();
        for o in 0..outer {
            out.extend_from_slice(&x[(o * d + lo) * inner..(o * d + hi) * inner]);
        }
        out
    }

    /// `shape` with `shape[axis]` replaced.
    pub(crate) fn with_dim(shape: &[usize], axis: usize, d: usize) -> Vec<usize> {
        let mut s = shape.to_vec();
        s[axis] = d;
        s
    }

    /// Cut points (sorted, deduplicated, inside `0..=len`) turned into consecutive ranges.
    pub(crate) fn ranges(len: usize, cuts: &[usize]) -> Vec<(usize, usize)> {
        let mut c: Vec<usize> = cuts.iter().map(|c| c % (len + 1)).collect();
        c.push(0);
        c.push(len);
        c.sort_unstable();
        c.dedup();
        c.windows(2).map(|w| (w[0], w[1])).collect()
    }

    /// Deterministic pseudo-random values in `[-4, 4)` with a few specials mixed in.
    pub(crate) fn data_f32(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let v = ((s >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0;
                match (s >> 20) % 61 {
                    0 => f32::NAN,
                    1 => 0.0,
                    2 => -0.0,
                    _ => v,
                }
            })
            .collect()
    }

    /// Deterministic pseudo-random integers in `[lo, hi)`.
    pub(crate) fn data_i64(n: usize, seed: u64, lo: i64, hi: i64) -> Vec<i64> {
        let mut s = seed ^ 0x9e37_79b9_7f4a_7c15;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                lo + ((s >> 33) % (hi - lo) as u64) as i64
            })
            .collect()
    }

    pub(crate) fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Flat input offset of output multi-index `idx` for an input of `ishape` broadcast to it.
    pub(crate) fn bcast_offset(idx: &[usize], ishape: &[usize]) -> usize {
        let pad = idx.len() - ishape.len();
        let st = strides_of(ishape);
        ishape
            .iter()
            .enumerate()
            .map(|(i, &d)| if d == 1 { 0 } else { idx[pad + i] * st[i] })
            .sum()
    }

    /// Multi-index of flat offset `i` in `shape`.
    pub(crate) fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
        let mut idx = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            idx[d] = i % shape[d];
            i /= shape[d];
        }
        idx
    }

    /// A shape of rank 1..=4 with dims 1..=5.
    pub(crate) fn shape_strategy() -> impl Strategy<Value = Vec<usize>> {
        prop::collection::vec(1usize..=5, 1..=4)
    }

    /// `oshape` with a random subset of dims set to 1 and a random number of leading dims dropped.
    pub(crate) fn broadcastable(oshape: &[usize], mask: u8, drop: usize) -> Vec<usize> {
        let s: Vec<usize> = oshape
            .iter()
            .enumerate()
            .map(|(i, &d)| if mask >> i & 1 == 1 { 1 } else { d })
            .collect();
        s[drop.min(s.len())..].to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;
    use proptest::prelude::*;

    fn naive_binary(
        a: &[f32],
        ashape: &[usize],
        b: &[f32],
        bshape: &[usize],
        oshape: &[usize],
        f: impl Fn(f32, f32) -> f32,
    ) -> Vec<f32> {
        let n: usize = oshape.iter().product();
        (0..n)
            .map(|i| {
                let idx = unravel(i, oshape);
                f(a[bcast_offset(&idx, ashape)], b[bcast_offset(&idx, bshape)])
            })
            .collect()
    }

    /// The input slice a chunk `lo..hi` of output axis `axis` reads.
    fn input_chunk(
        x: &[f32],
        xshape: &[usize],
        orank: usize,
        axis: usize,
        lo: usize,
        hi: usize,
    ) -> (Vec<f32>, Vec<usize>) {
        let pad = orank - xshape.len();
        if axis < pad || xshape[axis - pad] == 1 {
            return (x.to_vec(), xshape.to_vec());
        }
        let ia = axis - pad;
        (
            take_axis(x, xshape, ia, lo, hi),
            with_dim(xshape, ia, hi - lo),
        )
    }

    #[test]
    fn broadcast_shapes_follows_numpy() {
        assert_eq!(
            broadcast_shapes(&[&[2, 1, 3], &[4, 1]]).unwrap(),
            vec![2, 4, 3]
        );
        assert_eq!(broadcast_shapes(&[&[], &[5]]).unwrap(), vec![5]);
        assert_eq!(broadcast_shapes(&[&[0, 1], &[1, 7]]).unwrap(), vec![0, 7]);
        assert_eq!(broadcast_shapes(&[]).unwrap(), Vec::<usize>::new());
        assert!(broadcast_shapes(&[&[2, 3], &[3, 2]]).is_err());
        assert!(broadcast_shapes(&[&[0], &[2]]).is_err());
    }

    #[test]
    fn binary_checks_shapes_and_lengths() {
        let mut out = [0f32; 6];
        let r = binary(
            &[1f32; 6],
            &[2, 3],
            &[1f32; 2],
            &[2],
            &mut out,
            &[2, 3],
            |x, y| x + y,
        );
        assert!(r.is_err());
        let r = binary(
            &[1f32; 5],
            &[2, 3],
            &[1f32; 3],
            &[3],
            &mut out,
            &[2, 3],
            |x, y| x + y,
        );
        assert!(r.is_err());
        let r = binary(
            &[1f32; 6],
            &[2, 3],
            &[1f32; 3],
            &[3],
            &mut out,
            &[6],
            |x, y| x + y,
        );
        assert!(r.is_err());
    }

    #[test]
    fn binary_broadcast_hand_values() {
        let a = [1f32, 2., 3.];
        let b = [10f32, 20.];
        let mut out = [0f32; 6];
        binary(&a, &[1, 3], &b, &[2, 1], &mut out, &[2, 3], |x, y| x + y).unwrap();
        assert_eq!(out, [11., 12., 13., 21., 22., 23.]);
        binary(&b, &[2, 1], &a, &[3], &mut out, &[2, 3], |x, y| x - y).unwrap();
        assert_eq!(out, [9., 8., 7., 19., 18., 17.]);
    }

    #[test]
    fn large_outputs_take_the_parallel_path_and_match_naive() {
        let oshape = [3usize, 257, 131];
        let ashape = [3usize, 1, 131];
        let bshape = [257usize, 1];
        let a = data_f32(3 * 131, 1);
        let b = data_f32(257, 2);
        let mut out = vec![0f32; 3 * 257 * 131];
        assert!(out.len() >= PAR_THRESHOLD);
        binary(&a, &ashape, &b, &bshape, &mut out, &oshape, |x, y| x * y).unwrap();
        let want = naive_binary(&a, &ashape, &b, &bshape, &oshape, |x, y| x * y);
        assert_eq!(bits(&out), bits(&want));
        let x = data_f32(out.len(), 3);
        let mut same = vec![0f32; x.len()];
        binary(&x, &oshape, &out, &oshape, &mut same, &oshape, |x, y| x + y).unwrap();
        let want: Vec<f32> = x.iter().zip(&out).map(|(x, y)| x + y).collect();
        assert_eq!(bits(&same), bits(&want));
    }

    #[test]
    fn a_costly_unary_splits_small_outputs_without_changing_a_bit() {
        // Sizes below, at and past the costly threshold, with a ragged last task.
        for n in [
            1,
            COSTLY_PAR_THRESHOLD - 1,
            COSTLY_PAR_THRESHOLD,
            3 * COSTLY_PAR_TASK + 7,
        ] {
            let x = data_f32(n, 5);
            let f = |v: f32| libm::erff(v) * 3.0 + v;
            let mut out = vec![0f32; n];
            unary_costly(&x, &mut out, f).unwrap();
            let want: Vec<f32> = x.iter().map(|&v| f(v)).collect();
            assert_eq!(bits(&out), bits(&want), "n={n}");
        }
        let mut short = vec![0f32; 3];
        assert!(unary_costly(&[1f32, 2.0], &mut short, |v| v).is_err());
    }

    #[test]
    fn a_costly_binary_splits_small_outputs_without_changing_a_bit() {
        // Same shapes, a one-element exponent, and a broadcast row; below, at and past the
        // costly threshold, with a ragged last task.
        let f = |x: f32, y: f32| x.abs().powf(y);
        for n in [
            COSTLY_PAR_THRESHOLD - 1,
            COSTLY_PAR_THRESHOLD,
            3 * COSTLY_PAR_TASK + 7,
        ] {
            let x = data_f32(n, 6);
            let e = data_f32(n, 7);
            for (b, bshape) in [(e.clone(), vec![n]), (vec![3.0], vec![1])] {
                let mut out = vec![0f32; n];
                binary_split(&x, &[n], &b, &bshape, &mut out, &[n], COSTLY, f).unwrap();
                let want = naive_binary(&x, &[n], &b, &bshape, &[n], f);
                assert_eq!(bits(&out), bits(&want), "n={n} b={bshape:?}");
            }
            let rows = n.div_ceil(32);
            let x = data_f32(rows * 32, 8);
            let row = data_f32(32, 9);
            let mut out = vec![0f32; rows * 32];
            binary_split(
                &x,
                &[rows, 32],
                &row,
                &[32],
                &mut out,
                &[rows, 32],
                COSTLY,
                f,
            )
            .unwrap();
            let want = naive_binary(&x, &[rows, 32], &row, &[32], &[rows, 32], f);
            assert_eq!(bits(&out), bits(&want), "rows={rows}");
        }
    }

    #[test]
    fn a_ternary_of_full_and_one_element_inputs_matches_element_by_element() {
        let f = |k: u8, x: f32, y: f32| if k != 0 { x * 2.0 } else { y - x };
        for n in [1, 5, PAR_THRESHOLD + 3 * PAR_TASK + 11] {
            let k: Vec<u8> = (0..n).map(|i| (i % 3 == 0) as u8).collect();
            let x = data_f32(n, 10);
            let y = data_f32(n, 11);
            for (ka, xa, ya) in [
                (true, true, true),
                (true, false, false),
                (false, true, false),
            ] {
                let pick = |full: bool, v: &[f32]| if full { v.to_vec() } else { vec![v[0]] };
                let kk = if ka { k.clone() } else { vec![1] };
                let (xx, yy) = (pick(xa, &x), pick(ya, &y));
                let sh = |v: usize| if v == 1 && n > 1 { vec![1] } else { vec![n] };
                let mut out = vec![0f32; n];
                ternary(
                    (&kk, &sh(kk.len())),
                    (&xx, &sh(xx.len())),
                    (&yy, &sh(yy.len())),
                    &mut out,
                    &[n],
                    f,
                )
                .unwrap();
                let at = |v: &[f32], i: usize| v[if v.len() == 1 { 0 } else { i }];
                let want: Vec<f32> = (0..n)
                    .map(|i| {
                        f(
                            kk[if kk.len() == 1 { 0 } else { i }],
                            at(&xx, i),
                            at(&yy, i),
                        )
                    })
                    .collect();
                assert_eq!(bits(&out), bits(&want), "n={n} {ka} {xa} {ya}");
            }
        }
    }

    #[test]
    fn integer_div_truncates_and_rejects_zero() {
        let a = [-7i32, 7, -7, 7, i32::MIN];
        let b = [2i32, 2, -2, -2, -1];
        let mut out = [0i32; 5];
        binary_op(BinaryOp::Div, &a, &[5], &b, &[5], &mut out, &[5]).unwrap();
        assert_eq!(out, [-3, 3, 3, -3, i32::MIN]);
        let e = binary_op(
            BinaryOp::Div,
            &a,
            &[5],
            &[1, 0, 1, 1, 1],
            &[5],
            &mut out,
            &[5],
        );
        assert!(matches!(e, Err(KernelError::Unsupported(m)) if m.contains("division by zero")));
        let e = binary_op(
            BinaryOp::Mod { fmod: true },
            &a,
            &[5],
            &[0],
            &[1],
            &mut out,
            &[5],
        );
        assert!(e.is_err());
    }

    #[test]
    fn mod_matches_onnx_examples() {
        // Examples from the ONNX Mod operator documentation.
        let x = [-4i64, 7, 5, 4, -7, 8];
        let y = [2i64, -3, 8, -2, 3, 5];
        let mut out = [0i64; 6];
        binary_op(
            BinaryOp::Mod { fmod: false },
            &x,
            &[6],
            &y,
            &[6],
            &mut out,
            &[6],
        )
        .unwrap();
        assert_eq!(out, [0, -2, 5, 0, 2, 3]);
        binary_op(
            BinaryOp::Mod { fmod: true },
            &x,
            &[6],
            &y,
            &[6],
            &mut out,
            &[6],
        )
        .unwrap();
        assert_eq!(out, [0, 1, 5, 0, -1, 3]);
        let xf = [-4.3f32, 7.2, 5.0, 4.3, -7.2, 8.0];
        let yf = [2.1f32, -3.4, 8.0, -2.1, 3.4, 5.0];
        let mut of = [0f32; 6];
        binary_op(
            BinaryOp::Mod { fmod: true },
            &xf,
            &[6],
            &yf,
            &[6],
            &mut of,
            &[6],
        )
        .unwrap();
        let want = [-0.1f32, 0.4, 5.0, 0.1, -0.4, 3.0];
        for (g, w) in of.iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "{of:?}");
        }
        binary_op(
            BinaryOp::Mod { fmod: false },
            &xf,
            &[6],
            &yf,
            &[6],
            &mut of,
            &[6],
        )
        .unwrap();
        let want = [2.0f32, -3.0, 5.0, -2.0, 3.0, 3.0];
        for (g, w) in of.iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "{of:?}");
        }
        // numpy `mod`: a zero remainder takes the divisor's sign.
        let mut z = [1f32; 2];
        binary_op(
            BinaryOp::Mod { fmod: false },
            &[0.0f32, -0.0],
            &[2],
            &[-2.0f32, 2.0],
            &[2],
            &mut z,
            &[2],
        )
        .unwrap();
        assert!(z[0].is_sign_negative() && z[1].is_sign_positive());
    }

    #[test]
    fn pow_float_and_int() {
        let mut out = [0i64; 5];
        let b = [10i64, 0, -1, -3, 3];
        binary_op(
            BinaryOp::Pow,
            &[2i64, 5, 2, -1, -3],
            &[5],
            &b,
            &[5],
            &mut out,
            &[5],
        )
        .unwrap();
        assert_eq!(out, [1024, 1, 0, -1, -27]);
        let mut of = [0f32; 3];
        binary_op(
            BinaryOp::Pow,
            &[2f32, 4., -8.],
            &[3],
            &[3f32],
            &[1],
            &mut of,
            &[3],
        )
        .unwrap();
        assert_eq!(of, [8., 64., -512.]);
    }

    #[test]
    fn max_min_propagate_nan_and_fold_variadically() {
        let a = [1f32, f32::NAN, 3.];
        let b = [2f32, 0., f32::NAN];
        let c = [0.5f32];
        let mut out = [0f32; 3];
        variadic_op(
            VariadicOp::Max,
            &[(&a, &[3]), (&b, &[3]), (&c, &[1])],
            &mut out,
            &[3],
        )
        .unwrap();
        assert_eq!(out[0], 2.);
        assert!(out[1].is_nan() && out[2].is_nan());
        variadic_op(VariadicOp::Min, &[(&a, &[3]), (&c, &[1])], &mut out, &[3]).unwrap();
        assert_eq!(out[0], 0.5);
        assert!(out[1].is_nan());
        assert_eq!(out[2], 0.5);
        let s = [[1f32, 2.], [3., 4.]];
        let t = [10f32];
        let mut o = [0f32; 4];
        variadic_op(
            VariadicOp::Sum,
            &[(&s[0], &[2]), (&s[1], &[2]), (&t, &[1])],
            &mut o[..2],
            &[2],
        )
        .unwrap();
        assert_eq!(o[..2], [14., 16.]);
        let m = [[1f32, 2.], [3., 4.]];
        variadic_op(
            VariadicOp::Mean,
            &[(&m[0], &[1, 2]), (&m[1], &[2, 1])],
            &mut o,
            &[2, 2],
        )
        .unwrap();
        assert_eq!(o, [2., 2.5, 2.5, 3.]);
        assert!(variadic::<f32>(&[], &mut o, &[4], |x, _| x).is_err());
    }

    #[test]
    fn comparisons_logic_and_shifts() {
        let mut out = [false; 4];
        let a = [1f32, 2., f32::NAN, 4.];
        compare(
            CmpOp::GreaterOrEqual,
            &a,
            &[4],
            &[2f32],
            &[1],
            &mut out,
            &[4],
        )
        .unwrap();
        assert_eq!(out, [false, true, false, true]);
        compare(CmpOp::Equal, &a, &[4], &a, &[4], &mut out, &[4]).unwrap();
        assert_eq!(out, [true, true, false, true]);
        let t = [true, true, false, false];
        let u = [true, false, true, false];
        logical(LogicOp::Xor, &t, &[4], &u, &[4], &mut out, &[4]).unwrap();
        assert_eq!(out, [false, true, true, false]);
        let mut n = [false; 4];
        not(&out, &mut n).unwrap();
        assert_eq!(n, [true, false, false, true]);
        let mut s = [0u8; 4];
        bitshift(
            true,
            &[16u8, 4, 1, 1],
            &[4],
            &[1u8, 2, 7, 8],
            &[4],
            &mut s,
            &[4],
        )
        .unwrap();
        assert_eq!(s, [32, 16, 128, 0]);
        bitshift(
            false,
            &[16u8, 4, 1, 255],
            &[4],
            &[1u8, 2, 7, 200],
            &[4],
            &mut s,
            &[4],
        )
        .unwrap();
        assert_eq!(s, [8, 1, 0, 0]);
    }

    #[test]
    fn where_broadcasts_all_three() {
        let c = [true, false];
        let x = [1i64, 2, 3];
        let y = [-1i64];
        let mut out = [0i64; 6];
        where_(&c, &[2, 1], &x, &[3], &y, &[], &mut out, &[2, 3]).unwrap();
        assert_eq!(out, [1, 2, 3, -1, -1, -1]);
        assert!(where_(&c, &[2], &x, &[3], &y, &[], &mut out, &[2, 3]).is_err());
    }

    #[test]
    fn unary_ops_hand_values() {
        let x = [0.5f32, 1.5, 2.5, -0.5, -1.5];
        let mut out = [0f32; 5];
        unary_op(UnaryOp::Round, &x, &mut out).unwrap();
        assert_eq!(bits(&out), bits(&[0., 2., 2., -0., -2.]));
        let x = [-2f32, 0., 3.];
        let mut out = [0f32; 3];
        unary_op(UnaryOp::LeakyRelu { alpha: 0.5 }, &x, &mut out).unwrap();
        assert_eq!(out, [-1., 0., 3.]);
        unary_op(UnaryOp::HardSwish, &x, &mut out).unwrap();
        assert_eq!(out, [-2. * (-2. / 6. + 0.5), 0., 3.]);
        unary_op(UnaryOp::Sigmoid, &[0f32], &mut out[..1]).unwrap();
        assert_eq!(out[0], 0.5);
        unary_op(UnaryOp::Softplus, &[1000f32, -1000.], &mut out[..2]).unwrap();
        assert_eq!(out[..2], [1000., 0.]);
        unary_op(UnaryOp::Gelu { tanh: false }, &[0f32, 1.], &mut out[..2]).unwrap();
        assert_eq!(out[0], 0.);
        assert!((out[1] - 0.841_344_7).abs() < 1e-6);
        unary_op(UnaryOp::Gelu { tanh: true }, &[1f32], &mut out[..1]).unwrap();
        assert!((out[0] - 0.841_192).abs() < 1e-5);
        unary_op(UnaryOp::Erf, &[0.5f64], &mut [0f64]).unwrap();
        let mut o64 = [0f64];
        unary_op(UnaryOp::Erf, &[0.5f64], &mut o64).unwrap();
        assert!((o64[0] - 0.520_499_877_813_046_5).abs() < 1e-15);
        let mut oi = [0i32; 3];
        unary_arith_op(UnaryOp::Abs, &[-3i32, 0, i32::MIN], &mut oi).unwrap();
        assert_eq!(oi, [3, 0, i32::MIN]);
        unary_arith_op(UnaryOp::Sign, &[-3i32, 0, 9], &mut oi).unwrap();
        assert_eq!(oi, [-1, 0, 1]);
        assert!(unary_arith_op(UnaryOp::Exp, &[1i32], &mut oi[..1]).is_err());
        assert!(unary_op(UnaryOp::Exp, &[1f32, 2.], &mut out[..1]).is_err());
    }

    #[test]
    fn clip_isnan_isinf() {
        let x = [-5f32, 0.5, f32::NAN, 9.];
        let mut out = [0f32; 4];
        clip(&x, &mut out, Some(0.), Some(1.)).unwrap();
        assert_eq!(out[..2], [0., 0.5]);
        assert!(out[2].is_nan());
        assert_eq!(out[3], 1.);
        let mut o = [0i64; 2];
        clip(&[-9i64, 9], &mut o, None, Some(3)).unwrap();
        assert_eq!(o, [-9, 3]);
        let y = [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1.];
        let mut b = [false; 4];
        is_inf(&y, &mut b, true, false).unwrap();
        assert_eq!(b, [true, false, false, false]);
        is_inf(&y, &mut b, true, true).unwrap();
        assert_eq!(b, [true, true, false, false]);
        is_nan(&y, &mut b).unwrap();
        assert_eq!(b, [false, false, true, false]);
    }

    const OPS: [BinaryOp; 5] = [
        BinaryOp::Add,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Max,
    ];

    proptest! {
        #[test]
        fn binary_matches_naive(
            oshape in shape_strategy(),
            (ma, da, mb, db) in (any::<u8>(), 0usize..3, any::<u8>(), 0usize..3),
            seed in any::<u64>(),
        ) {
            let ashape = broadcastable(&oshape, ma, da);
            let bshape = broadcastable(&oshape, mb, db);
            let oshape = broadcast_shapes(&[&ashape, &bshape]).unwrap();
            let a = data_f32(ashape.iter().product(), seed);
            let b = data_f32(bshape.iter().product(), seed + 1);
            let mut out = vec![0f32; oshape.iter().product()];
            binary(&a, &ashape, &b, &bshape, &mut out, &oshape, |x, y| x - y).unwrap();
            let want = naive_binary(&a, &ashape, &b, &bshape, &oshape, |x, y| x - y);
            prop_assert_eq!(bits(&out), bits(&want));
        }

        #[test]
        fn binary_chunk_identity(
            oshape in shape_strategy(),
            (ma, da, mb, db) in (any::<u8>(), 0usize..3, any::<u8>(), 0usize..3),
            axis_pick in any::<usize>(),
            cuts in prop::collection::vec(any::<usize>(), 0..4),
            op_pick in 0usize..5,
            seed in any::<u64>(),
        ) {
            let ashape = broadcastable(&oshape, ma, da);
            let bshape = broadcastable(&oshape, mb, db);
            let oshape = broadcast_shapes(&[&ashape, &bshape]).unwrap();
            let a = data_f32(ashape.iter().product(), seed);
            let b = data_f32(bshape.iter().product(), seed + 1);
            let op = OPS[op_pick];
            let mut whole = vec![0f32; oshape.iter().product()];
            binary_op(op, &a, &ashape, &b, &bshape, &mut whole, &oshape).unwrap();
            prop_assume!(!oshape.is_empty());
            let axis = axis_pick % oshape.len();
            for (lo, hi) in ranges(oshape[axis], &cuts) {
                let (ac, acs) = input_chunk(&a, &ashape, oshape.len(), axis, lo, hi);
                let (bc, bcs) = input_chunk(&b, &bshape, oshape.len(), axis, lo, hi);
                let cs = with_dim(&oshape, axis, hi - lo);
                let mut part = vec![0f32; cs.iter().product()];
                binary_op(op, &ac, &acs, &bc, &bcs, &mut part, &cs).unwrap();
                prop_assert_eq!(bits(&part), bits(&take_axis(&whole, &oshape, axis, lo, hi)));
            }
        }

        #[test]
        fn where_and_variadic_chunk_identity(
            oshape in shape_strategy(),
            (mc, mx, my) in (any::<u8>(), any::<u8>(), any::<u8>()),
            axis_pick in any::<usize>(),
            cuts in prop::collection::vec(any::<usize>(), 0..4),
            seed in any::<u64>(),
        ) {
            let cshape = broadcastable(&oshape, mc, 0);
            let xshape = broadcastable(&oshape, mx, 1);
            let yshape = broadcastable(&oshape, my, 0);
            let oshape = broadcast_shapes(&[&cshape, &xshape, &yshape]).unwrap();
            let cf = data_f32(cshape.iter().product(), seed);
            let c: Vec<bool> = cf.iter().map(|v| *v > 0.0).collect();
            let x = data_f32(xshape.iter().product(), seed + 1);
            let y = data_f32(yshape.iter().product(), seed + 2);
            let n: usize = oshape.iter().product();
            let mut whole = vec![0f32; n];
            where_(&c, &cshape, &x, &xshape, &y, &yshape, &mut whole, &oshape).unwrap();
            let naive: Vec<f32> = (0..n).map(|i| {
                let idx = unravel(i, &oshape);
                if c[bcast_offset(&idx, &cshape)] { x[bcast_offset(&idx, &xshape)] }
                else { y[bcast_offset(&idx, &yshape)] }
            }).collect();
            prop_assert_eq!(bits(&whole), bits(&naive));
            let mut mean = vec![0f32; n];
            let ins: [(&[f32], &[usize]); 3] = [(&cf, &cshape), (&x, &xshape), (&y, &yshape)];
            variadic_op(VariadicOp::Mean, &ins, &mut mean, &oshape).unwrap();
            let axis = axis_pick % oshape.len();
            let r = oshape.len();
            for (lo, hi) in ranges(oshape[axis], &cuts) {
                let (cc, ccs) = input_chunk(&cf, &cshape, r, axis, lo, hi);
                let cb: Vec<bool> = cc.iter().map(|v| *v > 0.0).collect();
                let (xc, xcs) = input_chunk(&x, &xshape, r, axis, lo, hi);
                let (yc, ycs) = input_chunk(&y, &yshape, r, axis, lo, hi);
                let cs = with_dim(&oshape, axis, hi - lo);
                let mut part = vec![0f32; cs.iter().product()];
                where_(&cb, &ccs, &xc, &xcs, &yc, &ycs, &mut part, &cs).unwrap();
                prop_assert_eq!(bits(&part), bits(&take_axis(&whole, &oshape, axis, lo, hi)));
                let ins: [(&[f32], &[usize]); 3] = [(&cc, &ccs), (&xc, &xcs), (&yc, &ycs)];
                variadic_op(VariadicOp::Mean, &ins, &mut part, &cs).unwrap();
                prop_assert_eq!(bits(&part), bits(&take_axis(&mean, &oshape, axis, lo, hi)));
            }
        }

        #[test]
        fn unary_chunk_identity(
            n in 0usize..300,
            cuts in prop::collection::vec(any::<usize>(), 0..5),
            op_pick in 0usize..12,
            seed in any::<u64>(),
        ) {
            let ops = [
                UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Sigmoid, UnaryOp::Erf,
                UnaryOp::Gelu { tanh: false }, UnaryOp::Gelu { tanh: true }, UnaryOp::Softplus,
                UnaryOp::Elu { alpha: 0.7 }, UnaryOp::HardSwish, UnaryOp::Log, UnaryOp::Sqrt,
                UnaryOp::Round,
            ];
            let op = ops[op_pick];
            let x = data_f32(n, seed);
            let mut whole = vec![0f32; n];
            unary_op(op, &x, &mut whole).unwrap();
            for (lo, hi) in ranges(n, &cuts) {
                let mut part = vec![0f32; hi - lo];
                unary_op(op, &x[lo..hi], &mut part).unwrap();
                prop_assert_eq!(bits(&part), bits(&whole[lo..hi]));
            }
        }
    }
}
