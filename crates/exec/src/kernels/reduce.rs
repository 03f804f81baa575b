//! Kernels: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare and ArgMax/ArgMin.
//!
//! *Accumulation order.* For each output element the reduced elements form one sequence in row-major
//! order of the reduced axes. That sequence is folded by [`fold_lanes`]: 16 interleaved partial
//! accumulators over the full blocks of 16, combined by a fixed pairwise tree, then the tail in order
//! (sequences shorter than 16 are folded left to right). The order depends only on the sequence length,
//! never on the layout, on which outputs are computed together, or on the thread count, so reducing a
//! slice of the input along a kept axis gives the same bits as the whole reduction. Strided sequences
//! are gathered into a contiguous scratch buffer first so that every layout runs the same code.
//! Arithmetic is done in the element type (f32 in f32, as onnxruntime does), integers wrap.

use super::matmul::{check_len, shape_err, KResult, KernelError};

/// Number of interleaved accumulators of [`fold_lanes`].
pub const LANES: usize = 16;

/// Folds `map(x)` over `xs` with `comb` in the canonical order described in the module docs;
/// `empty` is returned for an empty slice.
#[inline(always)]
pub fn fold_lanes<T: Copy>(
    xs: &[T],
    map: impl Fn(T) -> T,
    comb: impl Fn(T, T) -> T,
    empty: T,
) -> T {
    let n = xs.len();
    if n == 0 {
        return empty;
    }
    if n < LANES {
        let mut acc = map(xs[0]);
        for &x in &xs[1..] {
            acc = comb(acc, map(x));
        }
        return acc;
    }
    let mut acc = [empty; LANES];
    for l in 0..LANES {
        acc[l] = map(xs[l]);
    }
    let blocks = xs[LANES..].chunks_exact(LANES);
    let tail = blocks.remainder();
    for blk in blocks {
        for l in 0..LANES {
            acc[l] = comb(acc[l], map(blk[l]));
        }
    }
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for l in 0..w {
            acc[l] = comb(acc[l], acc[l + w]);
        }
    }
    let mut r = acc[0];
    for &x in tail {
        r = comb(r, map(x));
    }
    r
}

/// An element type the reductions run on. Integer types wrap; their float functions are never used
/// by the public entry points (those reject float-only ops for integer types).
pub trait ReduceElem: Copy + Send + Sync + PartialOrd + 'static {
    /// Additive identity.
    const ZERO: Self;
    /// Multiplicative identity.
    const ONE: Self;
    /// Identity of max (-inf or the minimum value).
    const LOWEST: Self;
    /// Identity of min (+inf or the maximum value).
    const HIGHEST: Self;
    /// Whether this is a floating-point type.
    const IS_FLOAT: bool;
    /// Addition (wrapping for integers).
    fn add(self, o: Self) -> Self;
    /// Multiplication (wrapping for integers).
    fn mul(self, o: Self) -> Self;
    /// Subtraction (wrapping for integers).
    fn sub(self, o: Self) -> Self;
    /// Absolute value (wrapping for integers).
    fn abs(self) -> Self;
    /// NaN test (false for integers).
    fn is_nan(self) -> bool;
    /// `self / n` (truncating for integers); used by Mean.
    fn div_count(self, n: usize) -> Self;
    /// Exponential.
    fn exp(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Whether the value is +-infinity.
    fn is_infinite(self) -> bool;
}

macro_rules! float_elem {
    ($t:ty, $exp:path) => {
        impl ReduceElem for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const LOWEST: Self = <$t>::NEG_INFINITY;
            const HIGHEST: Self = <$t>::INFINITY;
            const IS_FLOAT: bool = true;
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self * o
            }
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                self - o
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            #[inline(always)]
            fn div_count(self, n: usize) -> Self {
                self / n as $t
            }
            #[inline(always)]
            fn exp(self) -> Self {
                $exp(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn is_infinite(self) -> bool {
                <$t>::is_infinite(self)
            }
        }
    };
}
// f32 exp is the vectorizable `fastmath::exp_f32` (within 2 ulp); f64 stays on the platform libm.
float_elem!(f32, super::fastmath::exp_f32);
float_elem!(f64, f64::exp);

macro_rules! int_elem {
    ($t:ty, $abs:expr) => {
        impl ReduceElem for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const LOWEST: Self = <$t>::MIN;
            const HIGHEST: Self = <$t>::MAX;
            const IS_FLOAT: bool = false;
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                $abs(self)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                false
            }
            #[inline(always)]
            fn div_count(self, n: usize) -> Self {
                match <$t>::try_from(n) {
                    Ok(d) if d != 0 => self.wrapping_div(d),
                    _ => 0,
                }
            }
            fn exp(self) -> Self {
                self
            }
            fn ln(self) -> Self {
                self
            }
            fn sqrt(self) -> Self {
                self
            }
            fn is_infinite(self) -> bool {
                false
            }
        }
    };
}
int_elem!(i32, i32::wrapping_abs);
int_elem!(i64, i64::wrapping_abs);
int_elem!(u8, |v: u8| v);

/// NaN-propagating max: the first NaN wins, ties keep the earlier value.
#[inline(always)]
pub fn max_nan<T: ReduceElem>(a: T, b: T) -> T {
    // Non-short-circuit `|` and `&`: a select the compiler vectorizes (`||` became branches).
    if (b > a) | (b.is_nan() & !a.is_nan()) {
        b
    } else {
        a
    }
}

/// NaN-propagating min: the first NaN wins, ties keep the earlier value.
#[inline(always)]
pub fn min_nan<T: ReduceElem>(a: T, b: T) -> T {
    if (b < a) | (b.is_nan() & !a.is_nan()) {
        b
    } else {
        a
    }
}

/// Sum of a sequence in the canonical order.
#[inline(always)]
pub fn sum_seq<T: ReduceElem>(xs: &[T]) -> T {
    fold_lanes(xs, |x| x, T::add, T::ZERO)
}

/// Max of a sequence (NaN-propagating), `LOWEST` for an empty one.
#[inline]
pub fn max_seq<T: ReduceElem>(xs: &[T]) -> T {
    fold_lanes(xs, |x| x, max_nan, T::LOWEST)
}

/// The ONNX reduce operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// ReduceSum.
    Sum,
    /// ReduceMean (sum divided by the count).
    Mean,
    /// ReduceMax.
    Max,
    /// ReduceMin.
    Min,
    /// ReduceProd.
    Prod,
    /// ReduceL1 (sum of |x|).
    L1,
    /// ReduceL2 (sqrt of the sum of squares).
    L2,
    /// ReduceLogSum (ln of the sum).
    LogSum,
    /// ReduceLogSumExp, computed as `m + ln(sum(exp(x - m)))` with `m` the max.
    LogSumExp,
    /// ReduceSumSquare.
    SumSquare,
}

impl ReduceOp {
    /// Whether the op is defined for integer types here.
    pub fn supports_int(self) -> bool {
        matches!(
            self,
            Self::Sum
                | Self::Mean
                | Self::Max
                | Self::Min
                | Self::Prod
                | Self::L1
                | Self::SumSquare
        )
    }
}

/// What a layout does with an op's fold: `finish(n, fold of map(x) by comb from the lanes)` over the
/// `n` elements of each output's sequence, `init` being an empty sequence's value. Generic methods,
/// so each op's parts are inlined into the layout's loop (a body called through a pointer per
/// element was 5-10x slower).
trait FoldLayout<T> {
    fn fold(
        self,
        map: impl Fn(T) -> T + Sync,
        comb: impl Fn(T, T) -> T + Sync,
        init: T,
        finish: impl Fn(usize, T) -> T + Sync,
    );
}

/// Every op's parts, given once to `layout`; `false` for LogSumExp, which folds twice (its
/// second pass reads the max) and is not one fold.
#[inline(always)]
fn fold_op<T: ReduceElem>(op: ReduceOp, layout: impl FoldLayout<T>) -> bool {
    let id = |v: T| v;
    let done = |_: usize, v: T| v;
    let square = |v: T| v.mul(v);
    match op {
        ReduceOp::Sum => layout.fold(id, T::add, T::ZERO, done),
        ReduceOp::Mean => layout.fold(id, T::add, T::ZERO, |n, v: T| v.div_count(n)),
        ReduceOp::Max => layout.fold(id, max_nan, T::LOWEST, done),
        ReduceOp::Min => layout.fold(id, min_nan, T::HIGHEST, done),
        ReduceOp::Prod => layout.fold(id, T::mul, T::ONE, done),
        ReduceOp::L1 => layout.fold(T::abs, T::add, T::ZERO, done),
        ReduceOp::L2 => layout.fold(square, T::add, T::ZERO, |_, v: T| v.sqrt()),
        ReduceOp::SumSquare => layout.fold(square, T::add, T::ZERO, done),
        ReduceOp::LogSum => layout.fold(id, T::add, T::ZERO, |_, v: T| v.ln()),
        ReduceOp::LogSumExp => return false,
    }
    true
}

/// One sequence, its value into `out`.
struct Seq<'a, T> {
    xs: &'a [T],
    out: &'a mut T,
}

impl<T: ReduceElem> FoldLayout<T> for Seq<'_, T> {
    #[inline(always)]
    fn fold(
        self,
        map: impl Fn(T) -> T + Sync,
        comb: impl Fn(T, T) -> T + Sync,
        init: T,
        finish: impl Fn(usize, T) -> T + Sync,
    ) {
        *self.out = finish(self.xs.len(), fold_lanes(self.xs, map, comb, init));
    }
}

/// Reduces one sequence (the reduced elements of one output, in canonical order).
#[inline]
pub fn reduce_seq<T: ReduceElem>(op: ReduceOp, xs: &[T]) -> T {
    let mut r = T::ZERO;
    if fold_op(op, Seq { xs, out: &mut r }) {
        return r;
    }
    // LogSumExp.
    let m = max_seq(xs);
    if m.is_infinite() || m.is_nan() {
        // All -inf gives -inf; any +inf gives +inf; NaN propagates.
        return m;
    }
    m.add(fold_lanes(xs, |x| x.sub(m).exp(), T::add, T::ZERO).ln())
}

/// Normalizes ONNX axes (negative allowed) to a sorted, deduplicated list.
pub fn normalize_axes(rank: usize, axes: &[i64]) -> KResult<Vec<usize>> {
    let mut v = Vec::with_capacity(axes.len());
    for &a in axes {
        let r = rank as i64;
        if a < -r || a >= r {
            return Err(KernelError::Attribute(format!(
                "axis {a} out of range for rank {rank}"
            )));
        }
        v.push(if a < 0 { (a + r) as usize } else { a as usize });
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// Output shape of a Reduce* op. Empty `axes` means all axes unless `noop_with_empty_axes`.
pub fn reduce_out_shape(
    shape: &[usize],
    axes: &[i64],
    keepdims: bool,
    noop_with_empty_axes: bool,
) -> KResult<Vec<usize>> {
    let red = reduced_mask(shape, axes, noop_with_empty_axes)?;
    Ok(shape
        .iter()
        .zip(&red)
        .filter_map(|(&d, &r)| {
            if !r {
                Some(d)
            } else if keepdims {
                Some(1)
            } else {
                None
            }
        })
        .collect())
}

fn reduced_mask(shape: &[usize], axes: &[i64], noop: bool) -> KResult<Vec<bool>> {
    let axes = normalize_axes(shape.len(), axes)?;
    let mut red = vec![axes.is_empty() && !noop; shape.len()];
    for a in axes {
        red[a] = true;
    }
    Ok(red)
}

/// Iteration plan: kept and reduced groups of `(extent, stride)` after dropping size-1 axes and
/// merging neighbours of the same kind.
#[derive(Debug)]
struct Groups {
    kept: Vec<(usize, usize)>,
    reduced: Vec<(usize, usize)>,
    red_len: usize,
    out_len: usize,
}

fn groups(shape: &[usize], red: &[bool]) -> Groups {
    let mut strides = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    let (mut kept, mut reduced): (Vec<(usize, usize)>, Vec<(usize, usize)>) = (vec![], vec![]);
    let mut last_kind: Option<bool> = None;
    for i in 0..shape.len() {
        if shape[i] == 1 {
            continue;
        }
        let list = if red[i] { &mut reduced } else { &mut kept };
        match list.last_mut() {
            Some(g) if last_kind == Some(red[i]) && g.1 == shape[i] * strides[i] => {
                g.0 *= shape[i];
                g.1 = strides[i];
            }
            _ => list.push((shape[i], strides[i])),
        }
        last_kind = Some(red[i]);
    }
    let red_len = reduced.iter().map(|g| g.0).product();
    let out_len = kept.iter().map(|g| g.0).product();
    Groups {
        kept,
        reduced,
        red_len,
        out_len,
    }
}

/// Offset of kept-index `o` (row-major over the kept groups).
#[inline]
fn kept_offset(kept: &[(usize, usize)], mut o: usize) -> usize {
    let mut off = 0;
    for &(e, s) in kept.iter().rev() {
        off += (o % e) * s;
        o /= e;
    }
    off
}

/// Offsets of all reduced elements but the innermost group, relative to an output's base.
fn outer_offsets(reduced: &[(usize, usize)]) -> Vec<usize> {
    let mut offs = vec![0usize];
    for &(e, s) in reduced.iter().take(reduced.len().saturating_sub(1)) {
        offs = offs
            .iter()
            .flat_map(|&b| (0..e).map(move |i| b + i * s))
            .collect();
    }
    offs
}

/// Minimum input elements per rayon task, and below which everything stays on one thread.
const PAR_MIN_ELEMS: usize = 1 << 16;

/// Calls `f(base_offset, sequence)` per output element, where `sequence` holds that output's reduced
/// elements in row-major order (a slice of `x` when contiguous, else a gathered copy), in parallel for
/// large inputs. `out` has `g.out_len` elements.
fn for_each_output<T: ReduceElem, U: Send>(
    x: &[T],
    g: &Groups,
    out: &mut [U],
    f: impl Fn(&[T]) -> U + Sync,
) {
    let contiguous = g.reduced.len() <= 1 && g.reduced.first().is_none_or(|r| r.1 == 1);
    let outer = outer_offsets(&g.reduced);
    let (inner_e, inner_s) = g.reduced.last().copied().unwrap_or((1, 1));
    // Contiguous sequences of consecutive outputs follow each other in `x` when the kept axes form
    // one group (the reduced one is innermost).
    let consecutive = contiguous && g.kept.len() <= 1 && g.red_len > 0;
    let run = |o0: usize, chunk: &mut [U]| {
        if consecutive {
            let from = o0 * g.red_len;
            let seqs = x[from..from + chunk.len() * g.red_len].chunks_exact(g.red_len);
            for (slot, seq) in chunk.iter_mut().zip(seqs) {
                *slot = f(seq);
            }
            return;
        }
        let mut scratch: Vec<T> = Vec::new();
        for (i, slot) in chunk.iter_mut().enumerate() {
            let base = kept_offset(&g.kept, o0 + i);
            if contiguous {
                *slot = f(&x[base..base + g.red_len]);
            } else {
                scratch.clear();
                for &oo in &outer {
                    let b = base + oo;
                    scratch.extend((0..inner_e).map(|t| x[b + t * inner_s]));
                }
                *slot = f(&scratch);
            }
        }
    };
    // One output element a row.
    super::par::row_blocks(out, 1, outputs_per_task(g.out_len, g.red_len), run);
}

/// Outputs per task for `outputs` reductions of `seq_len` elements each: at least
/// [`PAR_MIN_ELEMS`] input elements a task and about eight tasks a thread; `None` (one thread)
/// below [`PAR_MIN_ELEMS`] in all.
fn outputs_per_task(outputs: usize, seq_len: usize) -> Option<usize> {
    let seq_len = seq_len.max(1);
    (outputs.saturating_mul(seq_len) >= PAR_MIN_ELEMS).then(|| {
        PAR_MIN_ELEMS
            .div_ceil(seq_len)
            .max(outputs.div_ceil(rayon::current_num_threads() * 8))
    })
}

/// A reduction over one group of axes between kept ones, `[outer, rows, width]` with the reduced
/// `rows` in the middle and `width > 1` kept elements contiguous: every output is a column of a
/// `rows x width` block, and the columns of a block are folded side by side.
#[derive(Debug, Clone, Copy)]
struct Columns {
    rows: usize,
    width: usize,
}

impl Columns {
    fn of(g: &Groups) -> Option<Columns> {
        let (&[(rows, stride)], Some(&(width, 1))) = (g.reduced.as_slice(), g.kept.last()) else {
            return None;
        };
        let outer_ok = match g.kept.as_slice() {
            [_] => true,
            [(_, s), _] => *s == rows * width,
            _ => false,
        };
        (stride == width && width > 1 && rows > 1 && outer_ok).then_some(Columns { rows, width })
    }
}

/// Columns folded side by side per task: 32 f32 are two cache lines of each row.
const STRIP: usize = 32;

/// [`fold_lanes`] of each column of the `rows x out.len()` strip whose row `r` starts at
/// `src[r * stride]`, into `out` (at most [`STRIP`] columns): the same accumulators in the same
/// order as `fold_lanes` of the column's sequence, one column per vector lane, so the same bits.
#[inline(always)]
fn fold_strip<T: Copy>(
    src: &[T],
    stride: usize,
    rows: usize,
    out: &mut [T],
    map: &impl Fn(T) -> T,
    comb: &impl Fn(T, T) -> T,
) {
    let w = out.len();
    let row = |r: usize| &src[r * stride..r * stride + w];
    let fold_into = |acc: &mut [T], r: usize| {
        for (a, &v) in acc.iter_mut().zip(row(r)) {
            *a = comb(*a, map(v));
        }
    };
    if rows < LANES {
        for (o, &v) in out.iter_mut().zip(row(0)) {
            *o = map(v);
        }
        for r in 1..rows {
            fold_into(out, r);
        }
        return;
    }
    let mut acc = [[src[0]; STRIP]; LANES];
    for (l, lane) in acc.iter_mut().enumerate() {
        for (a, &v) in lane.iter_mut().zip(row(l)) {
            *a = map(v);
        }
    }
    let full = (rows - LANES) / LANES;
    for b in 0..full {
        for (l, lane) in acc.iter_mut().enumerate() {
            fold_into(&mut lane[..w], LANES + b * LANES + l);
        }
    }
    let mut k = LANES;
    while k > 1 {
        k /= 2;
        let (lo, hi) = acc.split_at_mut(k);
        for (a, b) in lo.iter_mut().zip(hi.iter()) {
            for (x, &y) in a[..w].iter_mut().zip(&b[..w]) {
                *x = comb(*x, y);
            }
        }
    }
    out.copy_from_slice(&acc[0][..w]);
    for r in LANES + full * LANES..rows {
        fold_into(out, r);
    }
}

/// Every output of a [`Columns`] reduction.
struct ColumnsOf<'a, T> {
    x: &'a [T],
    c: Columns,
    out: &'a mut [T],
}

impl<T: ReduceElem> FoldLayout<T> for ColumnsOf<'_, T> {
    fn fold(
        self,
        map: impl Fn(T) -> T + Sync,
        comb: impl Fn(T, T) -> T + Sync,
        _init: T,
        finish: impl Fn(usize, T) -> T + Sync,
    ) {
        let ColumnsOf { x, c, out } = self;
        let Columns { rows, width } = c;
        let run = |o0: usize, chunk: &mut [T]| {
            let mut o = o0;
            let mut rest = chunk;
            while !rest.is_empty() {
                // The part of this task's outputs in one block: columns b0.. of block `o / width`.
                let (block, b0) = (o / width, o % width);
                let n = (width - b0).min(rest.len());
                let (head, tail) = std::mem::take(&mut rest).split_at_mut(n);
                let base = block * rows * width + b0;
                for (i, strip) in head.chunks_mut(STRIP).enumerate() {
                    fold_strip(&x[base + i * STRIP..], width, rows, strip, &map, &comb);
                }
                for v in head.iter_mut() {
                    *v = finish(rows, *v);
                }
                o += n;
                rest = tail;
            }
        };
        let per_task = outputs_per_task(out.len(), rows).map(|n| n.next_multiple_of(STRIP));
        super::par::row_blocks(out, 1, per_task, run);
    }
}

/// ONNX Reduce* for one element type. `out` holds `reduce_out_shape(..)` elements.
/// Float-only ops (L2, LogSum, LogSumExp) return `Unsupported` for integer types.
pub fn reduce<T: ReduceElem>(
    op: ReduceOp,
    x: &[T],
    shape: &[usize],
    axes: &[i64],
    keepdims: bool,
    noop_with_empty_axes: bool,
    out: &mut [T],
) -> KResult<()> {
    if !T::IS_FLOAT && !op.supports_int() {
        return Err(KernelError::Unsupported(format!(
            "{op:?} on an integer type"
        )));
    }
    check_len("Reduce input", x.len(), shape)?;
    let red = reduced_mask(shape, axes, noop_with_empty_axes)?;
    let out_shape = reduce_out_shape(shape, axes, keepdims, noop_with_empty_axes)?;
    check_len("Reduce output", out.len(), &out_shape)?;
    let g = groups(shape, &red);
    if g.out_len != out.len() {
        // Only possible with a zero-sized kept axis, where there is nothing to compute.
        return if out.is_empty() {
            Ok(())
        } else {
            Err(shape_err("Reduce output length mismatch"))
        };
    }
    // LogSumExp (not one fold) takes the sequences' path.
    if let Some(c) = Columns::of(&g) {
        if fold_op(
            op,
            ColumnsOf {
                x,
                c,
                out: &mut *out,
            },
        ) {
            return Ok(());
        }
    }
    for_each_output(x, &g, out, |seq| reduce_seq(op, seq));
    Ok(())
}

/// ONNX Reduce* on f32.
pub fn reduce_f32(
    op: ReduceOp,
    x: &[f32],
    shape: &[usize],
    axes: &[i64],
    keepdims: bool,
    out: &mut [f32],
) -> KResult<()> {
    reduce(op, x, shape, axes, keepdims, false, out)
}

/// Output shape of ArgMax/ArgMin.
pub fn arg_out_shape(shape: &[usize], axis: i64, keepdims: bool) -> KResult<Vec<usize>> {
    let rank = shape.len().max(1);
    let a = normalize_axes(rank, &[axis])?[0];
    if shape.is_empty() {
        return Ok(vec![]);
    }
    let mut s = shape.to_vec();
    if keepdims {
        s[a] = 1;
    } else {
        s.remove(a);
    }
    Ok(s)
}

/// ArgMax (`max = true`) or ArgMin along `axis`, writing i64 indices. Scans in index order; the first
/// (or with `select_last_index` the last) extreme wins; a NaN counts as the extreme, like numpy.
/// An empty reduced axis is an error.
pub fn arg_extreme<T: ReduceElem>(
    max: bool,
    x: &[T],
    shape: &[usize],
    axis: i64,
    keepdims: bool,
    select_last_index: bool,
    out: &mut [i64],
) -> KResult<()> {
    check_len("ArgMax/ArgMin input", x.len(), shape)?;
    let out_shape = arg_out_shape(shape, axis, keepdims)?;
    check_len("ArgMax/ArgMin output", out.len(), &out_shape)?;
    let a = normalize_axes(shape.len().max(1), &[axis])?[0];
    let d = shape.get(a).copied().unwrap_or(1);
    if d == 0 {
        return if out.is_empty() {
            Ok(())
        } else {
            Err(shape_err("ArgMax/ArgMin over an empty axis"))
        };
    }
    let mut red = vec![false; shape.len()];
    if let Some(r) = red.get_mut(a) {
        *r = true;
    }
    let g = groups(shape, &red);
    if g.out_len != out.len() {
        return if out.is_empty() {
            Ok(())
        } else {
            Err(shape_err("ArgMax/ArgMin output length mismatch"))
        };
    }
    for_each_output(x, &g, out, |seq| {
        let mut best = 0usize;
        for (i, &v) in seq.iter().enumerate().skip(1) {
            let b = seq[best];
            if b.is_nan() {
                break;
            }
            let better = if max { v > b } else { v < b };
            let tie = v == b;
            if better || v.is_nan() || (select_last_index && tie) {
                best = i;
                if v.is_nan() {
                    break;
                }
            }
        }
        best as i64
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::matmul::testutil::*;
    use super::*;
    use proptest::prelude::*;

    /// Straightforward f64 reference: iterate outputs, then reduced elements by full index decoding.
    fn naive(op: ReduceOp, x: &[f32], shape: &[usize], axes: &[usize]) -> Vec<f64> {
        let rank = shape.len();
        let out_dims: Vec<usize> = (0..rank)
            .map(|i| if axes.contains(&i) { 1 } else { shape[i] })
            .collect();
        let out_n: usize = out_dims.iter().product();
        let mut res = vec![];
        for o in 0..out_n {
            let mut oi = vec![0; rank];
            let mut t = o;
            for i in (0..rank).rev() {
                oi[i] = t % out_dims[i];
                t /= out_dims[i];
            }
            let mut vals = vec![];
            for (flat, &v) in x.iter().enumerate() {
                let mut t = flat;
                let mut ok = true;
                for i in (0..rank).rev() {
                    let idx = t % shape[i];
                    t /= shape[i];
                    if !axes.contains(&i) && idx != oi[i] {
                        ok = false;
                    }
                }
                if ok {
                    vals.push(v as f64);
                }
            }
            let s: f64 = vals.iter().sum();
            res.push(match op {
                ReduceOp::Sum => s,
                ReduceOp::Mean => s / vals.len() as f64,
                ReduceOp::Max => vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                ReduceOp::Min => vals.iter().cloned().fold(f64::INFINITY, f64::min),
                ReduceOp::Prod => vals.iter().product(),
                ReduceOp::L1 => vals.iter().map(|v| v.abs()).sum(),
                ReduceOp::L2 => vals.iter().map(|v| v * v).sum::<f64>().sqrt(),
                ReduceOp::SumSquare => vals.iter().map(|v| v * v).sum(),
                ReduceOp::LogSum => s.ln(),
                ReduceOp::LogSumExp => vals.iter().map(|v| v.exp()).sum::<f64>().ln(),
            });
        }
        res
    }

    const OPS: [ReduceOp; 10] = [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
        ReduceOp::L1,
        ReduceOp::L2,
        ReduceOp::LogSum,
        ReduceOp::LogSumExp,
        ReduceOp::SumSquare,
    ];

    #[test]
    fn hand_computed() {
        let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut o = [0.0f32; 2];
        reduce_f32(ReduceOp::Sum, &x, &[2, 3], &[1], false, &mut o).unwrap();
        assert_eq!(o, [6.0, 15.0]);
        let mut o3 = [0.0f32; 3];
        reduce_f32(ReduceOp::Mean, &x, &[2, 3], &[0], true, &mut o3).unwrap();
        assert_eq!(o3, [2.5, 3.5, 4.5]);
        reduce_f32(ReduceOp::Prod, &x, &[2, 3], &[-2], false, &mut o3).unwrap();
        assert_eq!(o3, [4.0, 10.0, 18.0]);
        let mut s = [0.0f32; 1];
        reduce_f32(ReduceOp::Max, &x, &[2, 3], &[], false, &mut s).unwrap();
        assert_eq!(s, [6.0]);
        let mut lse = [0.0f32; 1];
        reduce_f32(
            ReduceOp::LogSumExp,
            &[f32::NEG_INFINITY; 3],
            &[3],
            &[0],
            false,
            &mut lse,
        )
        .unwrap();
        assert_eq!(lse[0], f32::NEG_INFINITY);
        reduce_f32(
            ReduceOp::LogSumExp,
            &[1000.0, 1000.0],
            &[2],
            &[0],
            false,
            &mut lse,
        )
        .unwrap();
        assert!((lse[0] - (1000.0 + 2f32.ln())).abs() < 1e-3);
        let mut oi = [0i64; 2];
        reduce(
            ReduceOp::Sum,
            &[1i64, 2, 3, 4, 5, 6],
            &[2, 3],
            &[1],
            false,
            false,
            &mut oi,
        )
        .unwrap();
        assert_eq!(oi, [6, 15]);
        reduce(
            ReduceOp::Min,
            &[3i32, -2, 7, 1],
            &[2, 2],
            &[0],
            false,
            false,
            &mut [0i32; 2],
        )
        .unwrap();
        assert!(reduce(ReduceOp::L2, &[1i32], &[1], &[0], false, false, &mut [0i32]).is_err());
        // noop_with_empty_axes keeps every element (SumSquare still squares it).
        let mut id = [0.0f32; 6];
        reduce(ReduceOp::SumSquare, &x, &[2, 3], &[], true, true, &mut id).unwrap();
        assert_eq!(id, [1.0, 4.0, 9.0, 16.0, 25.0, 36.0]);
        assert!(reduce_f32(ReduceOp::Sum, &x, &[2, 3], &[2], false, &mut o).is_err());
        assert!(reduce_f32(ReduceOp::Sum, &x, &[2, 3], &[1], false, &mut o3).is_err());
    }

    #[test]
    fn all_ops_match_naive() {
        let shape = [3, 4, 5, 2];
        let x: Vec<f32> = rand_vec(120, 3).iter().map(|v| v + 1.5).collect();
        for axes in [
            vec![0usize],
            vec![1],
            vec![3],
            vec![1, 2],
            vec![0, 2],
            vec![0, 1, 2, 3],
            vec![0, 3],
        ] {
            for op in OPS {
                let ax: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
                let os = reduce_out_shape(&shape, &ax, true, false).unwrap();
                let mut out = vec![0.0f32; os.iter().product()];
                reduce_f32(op, &x, &shape, &ax, true, &mut out).unwrap();
                let want = naive(op, &x, &shape, &axes);
                for (g, w) in out.iter().zip(&want) {
                    assert!(
                        ((*g as f64) - w).abs() <= 1e-4 * w.abs().max(1.0),
                        "{op:?} {axes:?}: {g} vs {w}"
                    );
                }
            }
        }
    }

    /// A reduction over a middle group of axes folds its columns side by side (`Columns`); each
    /// output has the bits of `reduce_seq` of its gathered column: fewer rows than the lanes, whole
    /// blocks of lanes, a tail, strips cut at `STRIP`, several outer blocks, tasks that start inside a
    /// block (the last shape is split over threads), NaNs and infinities.
    #[test]
    fn middle_axis_reductions_fold_columns_with_the_bits_of_each_sequence() {
        for &(a, r, w) in &[
            (1, 2, 3),
            (3, 15, 33),
            (2, 16, 32),
            (2, 17, 70),
            (1, 49, 5),
            (4, 100, 65),
            (3, 40, 999),
        ] {
            let shape = [a, r, w];
            let mut x: Vec<f32> = (0..a * r * w)
                .map(|i| ((i * 7919) % 1013) as f32 * 0.01 - 3.0)
                .collect();
            if a * r * w > 200 {
                x[101] = f32::NAN;
                x[150] = f32::INFINITY;
                x[151] = f32::NEG_INFINITY;
            }
            let g = groups(&shape, &[false, true, false]);
            assert!(Columns::of(&g).is_some(), "{shape:?}");
            // LogSumExp, whose second pass reads each column's max, keeps the gathering path.
            for op in OPS.into_iter().filter(|&o| o != ReduceOp::LogSumExp) {
                let mut out = vec![0f32; a * w];
                reduce(op, &x, &shape, &[1], false, false, &mut out).unwrap();
                for (o, got) in out.iter().enumerate() {
                    let (i, j) = (o / w, o % w);
                    let seq: Vec<f32> = (0..r).map(|k| x[(i * r + k) * w + j]).collect();
                    let want = reduce_seq(op, &seq);
                    assert!(
                        got.to_bits() == want.to_bits() || got.is_nan() && want.is_nan(),
                        "{op:?} {shape:?} output {o}: {got} vs {want}"
                    );
                }
            }
        }
        // Reduced axes that are not one group, or a reduced innermost axis, take the other path.
        assert!(Columns::of(&groups(&[4, 5, 6], &[true, false, true])).is_none());
        assert!(Columns::of(&groups(&[4, 5, 6], &[false, false, true])).is_none());
        assert!(Columns::of(&groups(&[4, 5, 6], &[true, true, false])).is_some());
    }

    #[test]
    fn argmax_argmin() {
        let x = [1.0f32, 5.0, 5.0, 0.0, -1.0, -1.0];
        let mut o = [0i64; 2];
        arg_extreme(true, &x, &[2, 3], 1, false, false, &mut o).unwrap();
        assert_eq!(o, [1, 0]);
        arg_extreme(true, &x, &[2, 3], -1, true, true, &mut o).unwrap();
        assert_eq!(o, [2, 0]);
        arg_extreme(false, &x, &[2, 3], 1, false, true, &mut o).unwrap();
        assert_eq!(o, [0, 2]);
        let mut o3 = [0i64; 3];
        arg_extreme(false, &x, &[2, 3], 0, false, false, &mut o3).unwrap();
        assert_eq!(o3, [1, 1, 1]);
        arg_extreme(
            true,
            &[1.0, f32::NAN, 3.0],
            &[3],
            0,
            false,
            false,
            &mut o[..1],
        )
        .unwrap();
        assert_eq!(o[0], 1);
        assert_eq!(arg_out_shape(&[2, 3], 0, true).unwrap(), vec![1, 3]);
        assert!(arg_extreme(true, &x, &[2, 3], 2, false, false, &mut o).is_err());
    }

    #[test]
    fn thread_count_identity() {
        let shape = [64, 37, 129];
        let x = rand_vec(64 * 37 * 129, 5);
        for axes in [vec![2i64], vec![1], vec![0, 2]] {
            let os = reduce_out_shape(&shape, &axes, false, false).unwrap();
            let n: usize = os.iter().product();
            let run = |t: usize| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(t)
                    .build()
                    .unwrap();
                let mut out = vec![0.0f32; n];
                pool.install(|| {
                    reduce_f32(ReduceOp::LogSumExp, &x, &shape, &axes, false, &mut out)
                })
                .unwrap();
                out
            };
            let one = run(1);
            assert!(same_bits(&one, &run(2)));
            assert!(same_bits(&one, &run(3)));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn reduce_chunk_identity(d0 in 1usize..5, d1 in 1usize..40, d2 in 1usize..40, mask in 1usize..8,
                                 op_i in 0usize..10, cut in 0usize..1000, seed in 0u64..1000) {
            let shape = [d0, d1, d2];
            let x = rand_vec(d0 * d1 * d2, seed);
            let axes: Vec<i64> = (0..3).filter(|i| mask & (1 << i) != 0).map(|i| i as i64).collect();
            let op = OPS[op_i];
            let os = reduce_out_shape(&shape, &axes, true, false).unwrap();
            let mut full = vec![0.0f32; os.iter().product()];
            reduce_f32(op, &x, &shape, &axes, true, &mut full).unwrap();
            for ax in 0..3usize {
                if axes.contains(&(ax as i64)) { continue; }
                let d = shape[ax];
                let s0 = cut % d;
                let s1 = s0 + (cut / 7) % (d - s0) + 1;
                let xs = slice_axis(&x, &shape, ax, s0, s1);
                let sshape = with_dim(&shape, ax, s1 - s0);
                let sos = reduce_out_shape(&sshape, &axes, true, false).unwrap();
                let mut part = vec![0.0f32; sos.iter().product()];
                reduce_f32(op, &xs, &sshape, &axes, true, &mut part).unwrap();
                prop_assert!(same_bits(&part, &slice_axis(&full, &os, ax, s0, s1)));
                let mut am = vec![0i64; part.len()];
                if axes.len() == 1 {
                    arg_extreme(true, &xs, &sshape, axes[0], true, false, &mut am).unwrap();
                    let mut amf = vec![0i64; full.len()];
                    arg_extreme(true, &x, &shape, axes[0], true, false, &mut amf).unwrap();
                    prop_assert_eq!(am, slice_axis(&amf, &os, ax, s0, s1));
                }
            }
        }
    }
}
