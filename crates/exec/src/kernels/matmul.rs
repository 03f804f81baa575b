//! Kernels: MatMul (numpy semantics), Gemm and integer matmul over contiguous row-major slices.
//!
//! Float products go through `matrixmultiply` (its own threading feature off) and are always called with
//! alpha = 1 and beta = 0. With those arguments the value of every output element is one FMA chain over
//! `k` in order (split into fixed `kc` blocks that depend only on `k`), so it does not depend on `m`, `n`,
//! on which tile of the call the element falls in (full or masked micro-kernel), nor on the thread count.
//! Alpha/beta/bias are applied afterwards element by element. This is what makes row and column chunking
//! bit-identical; `tests::sgemm_block_identity` checks it.
//!
//! The crate-wide kernel error type [`KernelError`] lives here because `mod.rs` belongs to no single
//! kernel family; `reduce`, `norm`, `conv` and `pool` use it too.

use std::ops::{Add, Mul, Range};

/// Error returned by a kernel for inputs that are not valid for the operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// Shapes (or slice lengths) that do not fit the operator's rule.
    #[error("shape error: {0}")]
    Shape(String),
    /// An attribute value the operator does not accept.
    #[error("invalid attribute: {0}")]
    Attribute(String),
    /// An operator/dtype combination that is not defined.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A kernel-side buffer could not be allocated.
    #[error("{0}")]
    Alloc(#[from] crate::mem::AllocError),
}

/// An empty vector with room for `n` elements, or an allocation error instead of an abort.
pub(crate) fn try_vec<T>(n: usize) -> KResult<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| crate::mem::AllocError(n.saturating_mul(std::mem::size_of::<T>())))?;
    Ok(v)
}

/// Result of a kernel.
pub type KResult<T> = Result<T, KernelError>;

pub(crate) fn shape_err(msg: impl Into<String>) -> KernelError {
    KernelError::Shape(msg.into())
}

/// Number of elements of a shape, or an error on overflow.
pub(crate) fn numel(shape: &[usize]) -> KResult<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| shape_err(format!("element count of {shape:?} overflows")))
}

/// Checks that a slice holds exactly the elements of `shape`.
pub(crate) fn check_len(what: &str, len: usize, shape: &[usize]) -> KResult<()> {
    let want = numel(shape)?;
    if len != want {
        return Err(shape_err(format!(
            "{what}: slice has {len} elements but shape {shape:?} needs {want}"
        )));
    }
    Ok(())
}

/// Below this many multiply-adds a matmul runs on the calling thread.
const PAR_MIN_WORK: usize = 1 << 18;
/// Smallest number of multiply-adds worth a rayon task (a few microseconds).
const TASK_MIN_WORK: usize = 1 << 16;
/// Row blocks are rounded to this (the widest micro-kernel height) so that few tiles are masked.
const ROW_ALIGN: usize = 16;
/// Fewest rows in a task when there are more tasks than threads: every task packs the whole right
/// operand, so tasks of a few rows each (a chunk of 16 rows times a `[1024, 256]` weight, cut into
/// 8 tasks of 2 rows) spend most of their time packing the same matrix again.
const TASK_MIN_ROWS: usize = 64;

/// A float type with a general-stride GEMM from `matrixmultiply`.
pub trait GemmFloat:
    Copy + Send + Sync + Default + PartialEq + Add<Output = Self> + Mul<Output = Self> + 'static
{
    /// One.
    const ONE: Self;
    /// Zero.
    const ZERO: Self;

    /// `C = A * B` for an `m x k` times `k x n` product with arbitrary element strides.
    ///
    /// # Safety
    /// Every element addressed through the pointers and strides must be in bounds, and `c` must not
    /// alias `a` or `b`.
    unsafe fn gemm_raw(
        m: usize,
        k: usize,
        n: usize,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        c: *mut Self,
        rsc: isize,
        csc: isize,
    );
}

impl GemmFloat for f32 {
    const ONE: Self = 1.0;
    const ZERO: Self = 0.0;
    unsafe fn gemm_raw(
        m: usize,
        k: usize,
        n: usize,
        a: *const f32,
        rsa: isize,
        csa: isize,
        b: *const f32,
        rsb: isize,
        csb: isize,
        c: *mut f32,
        rsc: isize,
        csc: isize,
    ) {
        // A small B is multiplied without packing A (same bits as `matrixmultiply`, see
        // `gemm_small`), which pays when A is large and `k` or `n` small.
        #[cfg(target_arch = "x86_64")]
        if csc == 1 && m >= 4 && super::gemm_small::usable(k, n) {
            // SAFETY: forwarded contract of `gemm_raw`; `usable` holds.
            unsafe { super::gemm_small::gemm(m, k, n, a, rsa, csa, b, rsb, csb, c, rsc) };
            return;
        }
        // SAFETY: forwarded contract of `gemm_raw`.
        unsafe { matrixmultiply::sgemm(m, k, n, 1.0, a, rsa, csa, b, rsb, csb, 0.0, c, rsc, csc) }
    }
}

impl GemmFloat for f64 {
    const ONE: Self = 1.0;
    const ZERO: Self = 0.0;
    unsafe fn gemm_raw(
        m: usize,
        k: usize,
        n: usize,
        a: *const f64,
        rsa: isize,
        csa: isize,
        b: *const f64,
        rsb: isize,
        csb: isize,
        c: *mut f64,
        rsc: isize,
        csc: isize,
    ) {
        // SAFETY: forwarded contract of `gemm_raw`.
        unsafe { matrixmultiply::dgemm(m, k, n, 1.0, a, rsa, csa, b, rsb, csb, 0.0, c, rsc, csc) }
    }
}

/// A strided read-only matrix view into a slice: element `(i, j)` is `data[off + i*rs + j*cs]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MatRef<'a, T> {
    pub data: &'a [T],
    pub off: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<T> MatRef<'_, T> {
    fn fits(&self, rows: usize, cols: usize) -> bool {
        if rows == 0 || cols == 0 {
            return true;
        }
        let last = (rows - 1)
            .checked_mul(self.rs)
            .and_then(|r| {
                (cols - 1)
                    .checked_mul(self.cs)
                    .and_then(|c| r.checked_add(c))
            })
            .and_then(|rc| rc.checked_add(self.off));
        matches!(last, Some(l) if l < self.data.len())
    }
}

/// `c[i*ldc + j] = sum_p a(i,p) * b(p,j)` for `i < m`, `j < n`, bounds-checked, alpha 1 / beta 0.
pub(crate) fn gemm_block<T: GemmFloat>(
    m: usize,
    k: usize,
    n: usize,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: &mut [T],
    ldc: usize,
) -> KResult<()> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    if !a.fits(m, k) || !b.fits(k, n) || (m - 1) * ldc + n > c.len() || ldc < n {
        return Err(shape_err("gemm block out of bounds"));
    }
    let stride = |s: usize| isize::try_from(s).map_err(|_| shape_err("stride overflows isize"));
    let (rsa, csa, rsb, csb, rsc) = (
        stride(a.rs)?,
        stride(a.cs)?,
        stride(b.rs)?,
        stride(b.cs)?,
        stride(ldc)?,
    );
    // SAFETY: `fits` proved every addressed element of A and B in bounds, the check above did for C,
    // and `c` is a unique borrow so it cannot alias `a` or `b`. With k == 0 nothing of A/B is read.
    unsafe {
        T::gemm_raw(
            m,
            k,
            n,
            a.data.as_ptr().add(a.off.min(a.data.len())),
            rsa,
            csa,
            b.data.as_ptr().add(b.off.min(b.data.len())),
            rsb,
            csb,
            c.as_mut_ptr(),
            rsc,
            1,
        );
    }
    Ok(())
}

/// Shapes resolved for an ONNX MatMul: numpy 1-D promotion and batch broadcasting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatMulPlan {
    /// Shape of the output tensor.
    pub out_shape: Vec<usize>,
    /// Rows per batch matrix.
    pub m: usize,
    /// Contraction length.
    pub k: usize,
    /// Columns of the output matrix (1 when B is 1-D).
    pub n: usize,
    batch_dims: Vec<usize>,
    a_bstrides: Vec<usize>,
    b_bstrides: Vec<usize>,
}

impl MatMulPlan {
    /// Resolves shapes, or explains why they do not multiply.
    pub fn new(a_shape: &[usize], b_shape: &[usize]) -> KResult<Self> {
        if a_shape.is_empty() || b_shape.is_empty() {
            return Err(shape_err("MatMul inputs must have rank >= 1"));
        }
        let (m, ka, a_batch) = if a_shape.len() == 1 {
            (1, a_shape[0], &a_shape[..0])
        } else {
            let r = a_shape.len();
            (a_shape[r - 2], a_shape[r - 1], &a_shape[..r - 2])
        };
        let (kb, n, b_batch) = if b_shape.len() == 1 {
            (b_shape[0], 1, &b_shape[..0])
        } else {
            let r = b_shape.len();
            (b_shape[r - 2], b_shape[r - 1], &b_shape[..r - 2])
        };
        if ka != kb {
            return Err(shape_err(format!(
                "MatMul contraction mismatch: A {a_shape:?} vs B {b_shape:?}"
            )));
        }
        let k = ka;
        let rank = a_batch.len().max(b_batch.len());
        let mut batch_dims = vec![0; rank];
        for i in 0..rank {
            let da = if i + a_batch.len() >= rank {
                a_batch[i + a_batch.len() - rank]
            } else {
                1
            };
            let db = if i + b_batch.len() >= rank {
                b_batch[i + b_batch.len() - rank]
            } else {
                1
            };
            batch_dims[i] = if da == db || db == 1 {
                da
            } else if da == 1 {
                db
            } else {
                return Err(shape_err(format!(
                    "MatMul batch dims do not broadcast: A {a_shape:?} vs B {b_shape:?}"
                )));
            };
        }
        let strides = |batch: &[usize], mat: usize| -> Vec<usize> {
            let mut s = vec![0; rank];
            let mut acc = mat;
            for j in (0..batch.len()).rev() {
                let i = j + rank - batch.len();
                s[i] = if batch[j] == 1 { 0 } else { acc };
                acc = acc.saturating_mul(batch[j]);
            }
            s
        };
        let a_bstrides = strides(a_batch, m * k);
        let b_bstrides = strides(b_batch, k * n);
        let mut out_shape = batch_dims.clone();
        if a_shape.len() > 1 {
            out_shape.push(m);
        }
        if b_shape.len() > 1 {
            out_shape.push(n);
        }
        numel(&out_shape)?;
        let mut plan = MatMulPlan {
            out_shape,
            m,
            k,
            n,
            batch_dims,
            a_bstrides,
            b_bstrides,
        };
        // When B is shared by every batch and A is not broadcast, the batches of A are consecutive rows
        // of one tall matrix: fold them into `m` (bit-identical, since results do not depend on `m`).
        let a_count: usize = a_batch.iter().product();
        let out_count: usize = plan.batch_dims.iter().product();
        if plan.b_bstrides.iter().all(|&s| s == 0) && a_count == out_count {
            plan.m *= out_count;
            plan.batch_dims.clear();
            plan.a_bstrides.clear();
            plan.b_bstrides.clear();
        }
        Ok(plan)
    }

    /// Rows of the output seen as a `rows() x n` matrix (batches times `m`).
    pub fn rows(&self) -> usize {
        self.batch_dims.iter().product::<usize>() * self.m
    }

    fn batch_offsets(&self, mut bi: usize) -> (usize, usize) {
        let (mut ao, mut bo) = (0, 0);
        for i in (0..self.batch_dims.len()).rev() {
            let d = self.batch_dims[i];
            let idx = bi % d;
            bi /= d;
            ao += idx * self.a_bstrides[i];
            bo += idx * self.b_bstrides[i];
        }
        (ao, bo)
    }

    /// Calls `f(a_off, b_off, i_in_batch, count, out_row)` for each run of output rows in `rows` that
    /// lies inside one batch matrix; `a_off` is the offset of A's first needed row.
    fn for_each_segment(
        &self,
        rows: Range<usize>,
        mut f: impl FnMut(usize, usize, usize, usize, usize) -> KResult<()>,
    ) -> KResult<()> {
        let mut r = rows.start;
        while r < rows.end {
            let bi = r / self.m;
            let i0 = r % self.m;
            let cnt = (self.m - i0).min(rows.end - r);
            let (ao, bo) = self.batch_offsets(bi);
            f(ao + i0 * self.k, bo, i0, cnt, r - rows.start)?;
            r += cnt;
        }
        Ok(())
    }
}

/// Output shape of ONNX MatMul for these input shapes.
pub fn matmul_out_shape(a_shape: &[usize], b_shape: &[usize]) -> KResult<Vec<usize>> {
    Ok(MatMulPlan::new(a_shape, b_shape)?.out_shape)
}

/// Splits `rows x n` outputs into row blocks and runs `f(row_range, out_block)` on them, in parallel
/// when the work (`rows * n * k` multiply-adds) is large. The split never changes any result.
pub(crate) fn par_rows<T: Send>(
    rows: usize,
    n: usize,
    k: usize,
    out: &mut [T],
    f: impl Fn(Range<usize>, &mut [T]) -> KResult<()> + Sync,
) -> KResult<()> {
    let work = rows.saturating_mul(n).saturating_mul(k.max(1));
    let threads = rayon::current_num_threads();
    if n == 0 || rows == 0 {
        return Ok(());
    }
    let per_row = n.saturating_mul(k.max(1)).max(1);
    let min_rows = TASK_MIN_WORK.div_ceil(per_row).max(1);
    let mut rpt = rows
        .div_ceil(threads * 4)
        .max(min_rows)
        .max(TASK_MIN_ROWS.min(rows.div_ceil(threads)));
    if rpt >= ROW_ALIGN {
        rpt = rpt.div_ceil(ROW_ALIGN) * ROW_ALIGN;
    }
    let rpt = (work >= PAR_MIN_WORK).then_some(rpt);
    super::par::try_row_blocks(out, n, rpt, |r0, block| {
        f(r0..(r0 + block.len() / n).min(rows), block)
    })
}

/// ONNX MatMul for a float type; `out` must hold `matmul_out_shape(a_shape, b_shape)` elements.
pub fn matmul<T: GemmFloat>(
    a: &[T],
    a_shape: &[usize],
    b: &[T],
    b_shape: &[usize],
    out: &mut [T],
) -> KResult<()> {
    let plan = MatMulPlan::new(a_shape, b_shape)?;
    check_len("MatMul A", a.len(), a_shape)?;
    check_len("MatMul B", b.len(), b_shape)?;
    check_len("MatMul output", out.len(), &plan.out_shape)?;
    let (rows, n, k) = (plan.rows(), plan.n, plan.k);
    // Row blocks only: a column split would need a buffer per task (uncounted, thread-dependent).
    par_rows(rows, n, k, out, |r, chunk| {
        matmul_rows_unchecked(&plan, a, b, r, chunk)
    })
}

fn matmul_rows_unchecked<T: GemmFloat>(
    plan: &MatMulPlan,
    a: &[T],
    b: &[T],
    rows: Range<usize>,
    out: &mut [T],
) -> KResult<()> {
    let (k, n) = (plan.k, plan.n);
    plan.for_each_segment(rows, |ao, bo, _i0, cnt, orow| {
        gemm_block(
            cnt,
            k,
            n,
            MatRef {
                data: a,
                off: ao,
                rs: k,
                cs: 1,
            },
            MatRef {
                data: b,
                off: bo,
                rs: n,
                cs: 1,
            },
            &mut out[orow * n..],
            n,
        )
    })
}

/// Computes only output rows `rows` of ONNX MatMul, with the output seen as a `plan.rows() x plan.n`
/// matrix (all batch dims and `m` flattened; each element is a row when B is 1-D).
/// `out` holds `rows.len() * n` elements. Bit-identical to the same rows of [`matmul`].
pub fn matmul_rows<T: GemmFloat>(
    a: &[T],
    a_shape: &[usize],
    b: &[T],
    b_shape: &[usize],
    rows: Range<usize>,
    out: &mut [T],
) -> KResult<()> {
    let plan = MatMulPlan::new(a_shape, b_shape)?;
    check_len("MatMul A", a.len(), a_shape)?;
    check_len("MatMul B", b.len(), b_shape)?;
    if rows.start > rows.end || rows.end > plan.rows() {
        return Err(shape_err(format!(
            "row range {rows:?} outside 0..{}",
            plan.rows()
        )));
    }
    if out.len() != rows.len() * plan.n {
        return Err(shape_err("matmul_rows: output length mismatch"));
    }
    par_rows(rows.len(), plan.n, plan.k, out, |r, chunk| {
        matmul_rows_unchecked(&plan, a, b, r.start + rows.start..r.end + rows.start, chunk)
    })
}

/// ONNX MatMul on f32.
pub fn matmul_f32(
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    out: &mut [f32],
) -> KResult<()> {
    matmul(a, a_shape, b, b_shape, out)
}

/// ONNX MatMul on f64.
pub fn matmul_f64(
    a: &[f64],
    a_shape: &[usize],
    b: &[f64],
    b_shape: &[usize],
    out: &mut [f64],
) -> KResult<()> {
    matmul(a, a_shape, b, b_shape, out)
}

/// An integer element for the naive integer matmul (wrapping arithmetic, as onnxruntime's int kernels).
pub trait IntElem: Copy + Send + Sync + Default + 'static {
    /// `self + a * b` with wrap-around.
    fn mul_add_wrapping(self, a: Self, b: Self) -> Self;
}

impl IntElem for i64 {
    fn mul_add_wrapping(self, a: Self, b: Self) -> Self {
        self.wrapping_add(a.wrapping_mul(b))
    }
}

impl IntElem for i32 {
    fn mul_add_wrapping(self, a: Self, b: Self) -> Self {
        self.wrapping_add(a.wrapping_mul(b))
    }
}

/// ONNX MatMul on integers (i32/i64), wrapping on overflow. Exact, so any split gives the same result.
pub fn matmul_int<T: IntElem>(
    a: &[T],
    a_shape: &[usize],
    b: &[T],
    b_shape: &[usize],
    out: &mut [T],
) -> KResult<()> {
    let plan = MatMulPlan::new(a_shape, b_shape)?;
    check_len("MatMul A", a.len(), a_shape)?;
    check_len("MatMul B", b.len(), b_shape)?;
    check_len("MatMul output", out.len(), &plan.out_shape)?;
    let (k, n) = (plan.k, plan.n);
    par_rows(plan.rows(), n, k, out, |rows, chunk| {
        plan.for_each_segment(rows, |ao, bo, _i0, cnt, orow| {
            for i in 0..cnt {
                let orow_s = &mut chunk[(orow + i) * n..(orow + i + 1) * n];
                orow_s.fill(T::default());
                let arow = &a[ao + i * k..ao + (i + 1) * k];
                for (p, &av) in arow.iter().enumerate() {
                    let brow = &b[bo + p * n..bo + (p + 1) * n];
                    for (o, &bv) in orow_s.iter_mut().zip(brow) {
                        *o = o.mul_add_wrapping(av, bv);
                    }
                }
            }
            Ok(())
        })
    })
}

/// Attributes of ONNX Gemm.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmAttrs<T> {
    /// Scale of `op(A) * op(B)`.
    pub alpha: T,
    /// Scale of `C`.
    pub beta: T,
    /// Use `A^T`.
    pub trans_a: bool,
    /// Use `B^T`.
    pub trans_b: bool,
}

/// `(M, K, N)` of ONNX Gemm, checking that A and B are 2-D and agree on K.
pub fn gemm_dims(
    a_shape: &[usize],
    b_shape: &[usize],
    trans_a: bool,
    trans_b: bool,
) -> KResult<(usize, usize, usize)> {
    if a_shape.len() != 2 || b_shape.len() != 2 {
        return Err(shape_err(format!(
            "Gemm needs 2-D A and B, got {a_shape:?} and {b_shape:?}"
        )));
    }
    let (m, ka) = if trans_a {
        (a_shape[1], a_shape[0])
    } else {
        (a_shape[0], a_shape[1])
    };
    let (kb, n) = if trans_b {
        (b_shape[1], b_shape[0])
    } else {
        (b_shape[0], b_shape[1])
    };
    if ka != kb {
        return Err(shape_err(format!(
            "Gemm contraction mismatch: A {a_shape:?} vs B {b_shape:?}"
        )));
    }
    Ok((m, ka, n))
}

/// Output shape `[M, N]` of ONNX Gemm.
pub fn gemm_out_shape(
    a_shape: &[usize],
    b_shape: &[usize],
    trans_a: bool,
    trans_b: bool,
) -> KResult<Vec<usize>> {
    let (m, _, n) = gemm_dims(a_shape, b_shape, trans_a, trans_b)?;
    Ok(vec![m, n])
}

/// Row and column strides of C broadcast (unidirectionally) to `[m, n]`.
fn c_strides(c_shape: &[usize], m: usize, n: usize) -> KResult<(usize, usize)> {
    let bad = || {
        shape_err(format!(
            "Gemm C {c_shape:?} does not broadcast to [{m}, {n}]"
        ))
    };
    let (cm, cn) = match c_shape {
        [] => (1, 1),
        [x] => (1, *x),
        [x, y] => (*x, *y),
        _ => return Err(bad()),
    };
    if (cm != 1 && cm != m) || (cn != 1 && cn != n) {
        return Err(bad());
    }
    Ok((if cm == 1 { 0 } else { cn }, if cn == 1 { 0 } else { 1 }))
}

/// ONNX Gemm: `Y = alpha * op(A) * op(B) + beta * C` with `C` broadcast to `[M, N]`.
/// Transposes are strides, not copies. `out` holds `M * N` elements.
pub fn gemm<T: GemmFloat>(
    a: &[T],
    a_shape: &[usize],
    b: &[T],
    b_shape: &[usize],
    c: Option<(&[T], &[usize])>,
    attrs: GemmAttrs<T>,
    out: &mut [T],
) -> KResult<()> {
    let (m, _, n) = gemm_dims(a_shape, b_shape, attrs.trans_a, attrs.trans_b)?;
    if out.len() != m * n {
        return Err(shape_err("Gemm output length mismatch"));
    }
    gemm_rows_checked(a, a_shape, b, b_shape, c, attrs, 0..m, out)
}

/// Rows `rows` of ONNX Gemm's output (`out` holds `rows.len() * N`), bit-identical to [`gemm`].
pub fn gemm_rows<T: GemmFloat>(
    a: &[T],
    a_shape: &[usize],
    b: &[T],
    b_shape: &[usize],
    c: Option<(&[T], &[usize])>,
    attrs: GemmAttrs<T>,
    rows: Range<usize>,
    out: &mut [T],
) -> KResult<()> {
    let (m, _, n) = gemm_dims(a_shape, b_shape, attrs.trans_a, attrs.trans_b)?;
    if rows.start > rows.end || rows.end > m || out.len() != rows.len() * n {
        return Err(shape_err(format!(
            "Gemm row range {rows:?} / output length mismatch"
        )));
    }
    gemm_rows_checked(a, a_shape, b, b_shape, c, attrs, rows, out)
}

fn gemm_rows_checked<T: GemmFloat>(
    a: &[T],
    a_shape: &[usize],
    b: &[T],
    b_shape: &[usize],
    c: Option<(&[T], &[usize])>,
    attrs: GemmAttrs<T>,
    rows: Range<usize>,
    out: &mut [T],
) -> KResult<()> {
    let (m, k, n) = gemm_dims(a_shape, b_shape, attrs.trans_a, attrs.trans_b)?;
    check_len("Gemm A", a.len(), a_shape)?;
    check_len("Gemm B", b.len(), b_shape)?;
    let c = match c {
        Some((cd, cs)) => {
            check_len("Gemm C", cd.len(), cs)?;
            let (rs, cstr) = c_strides(cs, m, n)?;
            Some((cd, rs, cstr))
        }
        None => None,
    };
    let (rsa, csa) = if attrs.trans_a { (1, m) } else { (k, 1) };
    let (rsb, csb) = if attrs.trans_b { (1, k) } else { (n, 1) };
    let base = rows.start;
    par_rows(rows.len(), n, k, out, |r, chunk| {
        let i0 = base + r.start;
        gemm_block(
            r.len(),
            k,
            n,
            MatRef {
                data: a,
                off: i0 * rsa,
                rs: rsa,
                cs: csa,
            },
            MatRef {
                data: b,
                off: 0,
                rs: rsb,
                cs: csb,
            },
            chunk,
            n,
        )?;
        for (ri, orow) in chunk.chunks_exact_mut(n).enumerate() {
            if attrs.alpha != T::ONE {
                for v in orow.iter_mut() {
                    *v = attrs.alpha * *v;
                }
            }
            if let Some((cd, crs, ccs)) = c {
                if attrs.beta != T::ZERO {
                    let coff = (i0 + ri) * crs;
                    for (j, v) in orow.iter_mut().enumerate() {
                        *v = *v + attrs.beta * cd[coff + j * ccs];
                    }
                }
            }
        }
        Ok(())
    })
}

/// Test helpers shared by the kernel test modules of this family.
#[cfg(test)]
pub(crate) mod testutil {
    /// Copies `x[.., start..end, ..]` (slicing `axis`) out of a row-major tensor.
    pub fn slice_axis<T: Copy>(
        x: &[T],
        shape: &[usize],
        axis: usize,
        start: usize,
        end: usize,
    ) -> Vec<T> {
        let outer: usize = shape[..axis].iter().product();
        let inner: usize = shape[axis + 1..].iter().product();
        let d = shape[axis];
        let mut v = Vec::with_capacity(outer * (end - start) * inner);
        for o in 0..outer {
            v.extend_from_slice(&x[(o * d + start) * inner..(o * d + end) * inner]);
        }
        v
    }

    /// `shape` with `shape[axis]` replaced.
    pub fn with_dim(shape: &[usize], axis: usize, d: usize) -> Vec<usize> {
        let mut s = shape.to_vec();
        s[axis] = d;
        s
    }

    /// Deterministic pseudo-random floats in [-1, 1) (a small LCG; no extra dependency).
    pub fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Bitwise equality of float slices (NaN-safe, distinguishes -0).
    pub fn same_bits(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;
    use proptest::prelude::*;

    fn naive(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                for p in 0..k {
                    c[i * n + j] += a[i * k + p] * b[p * n + j];
                }
            }
        }
        c
    }

    #[test]
    fn hand_computed_2x2() {
        let a = [1.0f32, 2.0, 3.0, 4.0];
        let b = [5.0f32, 6.0, 7.0, 8.0];
        let mut out = [0.0f32; 4];
        matmul_f32(&a, &[2, 2], &b, &[2, 2], &mut out).unwrap();
        assert_eq!(out, [19.0, 22.0, 43.0, 50.0]);
        let mut v = [0.0f32; 2];
        matmul_f32(&a, &[2, 2], &[1.0, 1.0], &[2], &mut v).unwrap();
        assert_eq!(v, [3.0, 7.0]);
        let mut s = [0.0f32; 1];
        matmul_f32(&[1.0, 2.0], &[2], &[3.0, 4.0], &[2], &mut s).unwrap();
        assert_eq!(s, [11.0]);
        let mut r = [0.0f32; 2];
        matmul_f32(&[1.0, 1.0], &[2], &b, &[2, 2], &mut r).unwrap();
        assert_eq!(r, [12.0, 14.0]);
    }

    #[test]
    fn out_shapes_and_errors() {
        assert_eq!(
            matmul_out_shape(&[2, 1, 3, 4], &[5, 4, 6]).unwrap(),
            vec![2, 5, 3, 6]
        );
        assert_eq!(matmul_out_shape(&[4], &[3, 4, 6]).unwrap(), vec![3, 6]);
        assert_eq!(matmul_out_shape(&[3, 2, 4], &[4]).unwrap(), vec![3, 2]);
        assert_eq!(matmul_out_shape(&[4], &[4]).unwrap(), Vec::<usize>::new());
        assert!(matmul_out_shape(&[2, 3], &[4, 5]).is_err());
        assert!(matmul_out_shape(&[2, 2, 3], &[3, 3, 5]).is_err());
        assert!(matmul_out_shape(&[], &[3]).is_err());
        let mut out = [0.0f32; 3];
        assert!(matmul_f32(&[1.0; 6], &[2, 3], &[1.0; 3], &[3], &mut out).is_err());
        assert!(matmul_f32(&[1.0; 5], &[2, 3], &[1.0; 3], &[3], &mut out[..2]).is_err());
    }

    #[test]
    fn broadcast_batches_match_naive() {
        let (m, k, n) = (3, 5, 4);
        let a = rand_vec(2 * m * k, 1);
        let b = rand_vec(3 * k * n, 2);
        let mut out = vec![0.0f32; 2 * 3 * m * n];
        matmul_f32(&a, &[2, 1, m, k], &b, &[3, k, n], &mut out).unwrap();
        for i in 0..2 {
            for j in 0..3 {
                let a64: Vec<f64> = a[i * m * k..(i + 1) * m * k]
                    .iter()
                    .map(|&x| x as f64)
                    .collect();
                let b64: Vec<f64> = b[j * k * n..(j + 1) * k * n]
                    .iter()
                    .map(|&x| x as f64)
                    .collect();
                let r = naive(&a64, &b64, m, k, n);
                let o = &out[(i * 3 + j) * m * n..(i * 3 + j + 1) * m * n];
                for (x, y) in o.iter().zip(&r) {
                    assert!((*x as f64 - y).abs() < 1e-5, "{x} vs {y}");
                }
            }
        }
        // f64 and integer versions agree with exact results on integer data.
        let ai: Vec<i64> = (0..2 * m * k).map(|x| x as i64 % 7 - 3).collect();
        let bi: Vec<i64> = (0..3 * k * n).map(|x| x as i64 % 5 - 2).collect();
        let mut oi = vec![0i64; 2 * 3 * m * n];
        matmul_int(&ai, &[2, 1, m, k], &bi, &[3, k, n], &mut oi).unwrap();
        let af: Vec<f64> = ai.iter().map(|&x| x as f64).collect();
        let bf: Vec<f64> = bi.iter().map(|&x| x as f64).collect();
        let mut of = vec![0f64; 2 * 3 * m * n];
        matmul_f64(&af, &[2, 1, m, k], &bf, &[3, k, n], &mut of).unwrap();
        assert!(oi.iter().zip(&of).all(|(&x, &y)| x as f64 == y));
        assert!(oi.iter().any(|&x| x != 0));
    }

    #[test]
    fn k_zero_gives_zeros() {
        let mut out = vec![1.0f32; 6];
        matmul_f32(&[], &[2, 0], &[], &[0, 3], &mut out).unwrap();
        assert!(out.iter().all(|&x| x == 0.0));
    }

    #[test]
    fn gemm_trans_alpha_beta_broadcast() {
        let (m, k, n) = (3, 4, 5);
        let a = rand_vec(m * k, 3);
        let b = rand_vec(k * n, 4);
        let c = rand_vec(n, 5);
        let at: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
        let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
        let attrs = GemmAttrs {
            alpha: 0.5f32,
            beta: 2.0,
            trans_a: false,
            trans_b: false,
        };
        let mut y = vec![0.0f32; m * n];
        gemm(&a, &[m, k], &b, &[k, n], Some((&c, &[n])), attrs, &mut y).unwrap();
        let mut yt = vec![0.0f32; m * n];
        let attrs_t = GemmAttrs {
            trans_a: true,
            trans_b: true,
            ..attrs
        };
        gemm(
            &at,
            &[k, m],
            &bt,
            &[n, k],
            Some((&c, &[1, n])),
            attrs_t,
            &mut yt,
        )
        .unwrap();
        assert!(same_bits(&y, &yt));
        let a64: Vec<f64> = a.iter().map(|&x| x as f64).collect();
        let b64: Vec<f64> = b.iter().map(|&x| x as f64).collect();
        let r = naive(&a64, &b64, m, k, n);
        for i in 0..m * n {
            let want = 0.5 * r[i] + 2.0 * c[i % n] as f64;
            assert!((y[i] as f64 - want).abs() < 1e-5);
        }
        let bad = [0.0f32; 2];
        assert!(gemm(&a, &[m, k], &b, &[k, n], Some((&bad, &[2])), attrs, &mut y).is_err());
        assert!(gemm(&a, &[m, k], &b, &[n, k], None, attrs, &mut y).is_err());
    }

    /// Calls the raw kernel on sub-blocks of A/B/C (pointer offsets into the full matrices) and
    /// checks every element against the full product.
    fn check_block_identity(
        m: usize,
        k: usize,
        n: usize,
        rows: &[usize],
        cols: &[usize],
        seed: u64,
    ) {
        let a = rand_vec(m * k, seed);
        let b = rand_vec(k * n, seed + 1);
        let mut full = vec![0.0f32; m * n];
        let am = MatRef {
            data: &a[..],
            off: 0,
            rs: k,
            cs: 1,
        };
        let bm = MatRef {
            data: &b[..],
            off: 0,
            rs: n,
            cs: 1,
        };
        gemm_block(m, k, n, am, bm, &mut full, n).unwrap();
        let mut pieced = vec![f32::NAN; m * n];
        let cuts = |v: &[usize], len: usize| {
            let mut c: Vec<usize> = v.iter().map(|x| x % (len + 1)).collect();
            c.push(0);
            c.push(len);
            c.sort_unstable();
            c.dedup();
            c
        };
        let rc = cuts(rows, m);
        let cc = cuts(cols, n);
        for rw in rc.windows(2) {
            for cw in cc.windows(2) {
                let (r0, r1, c0, c1) = (rw[0], rw[1], cw[0], cw[1]);
                gemm_block(
                    r1 - r0,
                    k,
                    c1 - c0,
                    MatRef { off: r0 * k, ..am },
                    MatRef { off: c0, ..bm },
                    &mut pieced[r0 * n + c0..],
                    n,
                )
                .unwrap();
            }
        }
        assert!(
            same_bits(&full, &pieced),
            "m={m} k={k} n={n} rows={rc:?} cols={cc:?}"
        );
    }

    /// A few rows times a large right operand go to one task per thread at most (each task packs
    /// the whole operand); many rows still get more tasks than threads, of at least 64 rows.
    #[test]
    fn few_rows_are_not_cut_into_more_tasks_than_threads() {
        let tasks = |rows: usize, n: usize, k: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap();
            let sizes = std::sync::Mutex::new(Vec::new());
            let mut out = vec![0f32; rows * n];
            pool.install(|| {
                par_rows(rows, n, k, &mut out, |r, chunk| {
                    assert_eq!(chunk.len(), r.len() * n);
                    sizes.lock().unwrap().push(r.len());
                    Ok(())
                })
            })
            .unwrap();
            let mut sizes = sizes.into_inner().unwrap();
            sizes.sort();
            assert_eq!(sizes.iter().sum::<usize>(), rows);
            sizes
        };
        assert_eq!(tasks(16, 256, 1024), vec![8, 8]);
        assert_eq!(tasks(16, 256, 256), vec![8, 8]);
        let many = tasks(1024, 256, 1024);
        assert!(many.len() > 2 && many[0] >= 64, "{many:?}");
    }

    #[test]
    fn sgemm_block_identity_large_k() {
        // k > kc (256) exercises the accumulation across k blocks.
        check_block_identity(37, 600, 45, &[1, 17, 30], &[3, 16, 33], 9);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn sgemm_block_identity(m in 1usize..70, k in 0usize..300, n in 1usize..70,
                                rows in proptest::collection::vec(0usize..70, 0..4),
                                cols in proptest::collection::vec(0usize..70, 0..4), seed in 0u64..1000) {
            check_block_identity(m, k, n, &rows, &cols, seed);
        }

        #[test]
        fn matmul_chunk_identity(batch in 1usize..4, m in 1usize..40, k in 1usize..80, n in 1usize..40,
                                 cut in 0usize..1000, seed in 0u64..1000, b_batched in any::<bool>()) {
            let a_shape = [batch, m, k];
            let b_shape: Vec<usize> = if b_batched { vec![batch, k, n] } else { vec![k, n] };
            let a = rand_vec(batch * m * k, seed);
            let b = rand_vec(b_shape.iter().product(), seed + 7);
            let mut full = vec![0.0f32; batch * m * n];
            matmul_f32(&a, &a_shape, &b, &b_shape, &mut full).unwrap();
            // Any flat row range.
            let rows = batch * m;
            let r0 = cut % rows;
            let r1 = r0 + (cut / 7) % (rows - r0) + 1;
            let mut part = vec![0.0f32; (r1 - r0) * n];
            matmul_rows(&a, &a_shape, &b, &b_shape, r0..r1, &mut part).unwrap();
            prop_assert!(same_bits(&part, &full[r0 * n..r1 * n]));
            // Slicing A's rows (axis 1) and calling the kernel on the slice.
            let i0 = cut % m;
            let i1 = i0 + (cut / 3) % (m - i0) + 1;
            let a_s = slice_axis(&a, &a_shape, 1, i0, i1);
            let mut o_s = vec![0.0f32; batch * (i1 - i0) * n];
            matmul_f32(&a_s, &[batch, i1 - i0, k], &b, &b_shape, &mut o_s).unwrap();
            prop_assert!(same_bits(&o_s, &slice_axis(&full, &[batch, m, n], 1, i0, i1)));
            // Slicing B's columns.
            let j0 = cut % n;
            let j1 = j0 + (cut / 5) % (n - j0) + 1;
            let b_s = slice_axis(&b, &b_shape, b_shape.len() - 1, j0, j1);
            let b_s_shape = with_dim(&b_shape, b_shape.len() - 1, j1 - j0);
            let mut o_c = vec![0.0f32; batch * m * (j1 - j0)];
            matmul_f32(&a, &a_shape, &b_s, &b_s_shape, &mut o_c).unwrap();
            prop_assert!(same_bits(&o_c, &slice_axis(&full, &[batch, m, n], 2, j0, j1)));
        }

        #[test]
        fn gemm_chunk_identity(m in 1usize..30, k in 1usize..40, n in 1usize..30, ta in any::<bool>(),
                               tb in any::<bool>(), cut in 0usize..1000, seed in 0u64..100) {
            let a_shape = if ta { [k, m] } else { [m, k] };
            let b_shape = if tb { [n, k] } else { [k, n] };
            let a = rand_vec(m * k, seed);
            let b = rand_vec(k * n, seed + 1);
            let c = rand_vec(m, seed + 2);
            let attrs = GemmAttrs { alpha: 1.5f32, beta: -0.5, trans_a: ta, trans_b: tb };
            let mut full = vec![0.0f32; m * n];
            gemm(&a, &a_shape, &b, &b_shape, Some((&c, &[m, 1])), attrs, &mut full).unwrap();
            let r0 = cut % m;
            let r1 = r0 + (cut / 7) % (m - r0) + 1;
            let mut part = vec![0.0f32; (r1 - r0) * n];
            gemm_rows(&a, &a_shape, &b, &b_shape, Some((&c, &[m, 1])), attrs, r0..r1, &mut part).unwrap();
            prop_assert!(same_bits(&part, &full[r0 * n..r1 * n]));
        }
    }

    #[test]
    fn thread_count_identity() {
        let (m, k, n) = (200, 300, 180);
        let a = rand_vec(m * k, 11);
        let b = rand_vec(k * n, 12);
        let run = |threads: usize,
                   a: &[f32],
                   a_shape: &[usize],
                   b: &[f32],
                   b_shape: &[usize],
                   outn: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut out = vec![0.0f32; outn];
            pool.install(|| matmul_f32(a, a_shape, b, b_shape, &mut out))
                .unwrap();
            out
        };
        let one = run(1, &a, &[m, k], &b, &[k, n], m * n);
        for t in [2, 3, 7] {
            assert!(same_bits(&one, &run(t, &a, &[m, k], &b, &[k, n], m * n)));
        }
        // Few rows, many columns: the column-split path.
        let bw = rand_vec(k * 4096, 13);
        let a3 = &a[..3 * k];
        let one = run(1, a3, &[3, k], &bw, &[k, 4096], 3 * 4096);
        assert!(same_bits(
            &one,
            &run(2, a3, &[3, k], &bw, &[k, 4096], 3 * 4096)
        ));
        assert!(same_bits(
            &one,
            &run(5, a3, &[3, k], &bw, &[k, 4096], 3 * 4096)
        ));
        let mut rows_only = vec![0.0f32; 3 * 4096];
        matmul_rows(a3, &[3, k], &bw, &[k, 4096], 0..3, &mut rows_only).unwrap();
        assert!(same_bits(&one, &rows_only));
    }

    /// Prints GFLOP/s of a 1024^3 f32 matmul with 1 and 2 rayon threads (no timing assertions).
    #[test]
    fn perf_report_1024() {
        let s = 1024;
        let a = rand_vec(s * s, 21);
        let b = rand_vec(s * s, 22);
        let mut out = vec![0.0f32; s * s];
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut best = f64::MAX;
            for _ in 0..3 {
                let t = std::time::Instant::now();
                pool.install(|| matmul_f32(&a, &[s, s], &b, &[s, s], &mut out))
                    .unwrap();
                best = best.min(t.elapsed().as_secs_f64());
            }
            let gflops = 2.0 * (s * s * s) as f64 / best / 1e9;
            println!(
                "matmul 1024^3 f32, {threads} thread(s): {gflops:.1} GFLOP/s ({:.2} ms)",
                best * 1e3
            );
        }
        assert!(out.iter().all(|x| x.is_finite()));
    }
}
