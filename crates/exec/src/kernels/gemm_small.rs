//! An f32 GEMM for products whose B is small (`k * n` up to [`B_MAX`] elements), where
//! `matrixmultiply` spends most of its time packing A: this kernel reads A in place and packs only B.
//!
//! It computes every output element exactly as `matrixmultiply`'s FMA kernels do with alpha = 1 and
//! beta = 0: within each block of [`KC`] consecutive `p` (its `S_KC`), one FMA chain
//! `acc = fma(a[i,p], b[p,j], acc)` in order from `acc = +0`; the first block's chain is the
//! element, and each later block's chain is added to it (`c = c + acc`). So the two are
//! interchangeable bit for bit, whichever is chosen for a given shape or slice, and
//! [`super::matmul`] picks freely. It runs only where `matrixmultiply` itself uses FMA (AVX2 + FMA
//! present: its FMA or AVX-512 kernel), which `tests::matches_matrixmultiply_bitwise` checks.

/// `matrixmultiply`'s f32 `kc` (its default `S_KC`; the crate is built without the override).
pub const KC: usize = 256;
/// Largest packed B (elements, columns rounded up to 8) this kernel takes; it lives on the stack.
pub const B_MAX: usize = 8192;

/// Whether [`gemm`] takes an `m x k` by `k x n` product on this CPU.
#[inline]
pub fn usable(k: usize, n: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        k >= 1
            && n >= 1
            && n.next_multiple_of(8).saturating_mul(k) <= B_MAX
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (k, n);
        false
    }
}

/// `C = A * B` (alpha 1, beta 0) for an `m x k` by `k x n` product, C row-major with row stride
/// `rsc` and unit column stride.
///
/// # Safety
/// [`usable`]`(k, n)` must hold; every element addressed through the pointers and strides must be
/// in bounds, and `c` must not alias `a` or `b`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn gemm(
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
) {
    let np = n.next_multiple_of(8);
    // B packed row by row (`k` rows of `np`), zero padded. Only those `k * np` elements are
    // written and read: a chunk of a few rows multiplies in less time than zeroing all of it.
    let mut buf = std::mem::MaybeUninit::<[f32; B_MAX]>::uninit();
    let bp = buf.as_mut_ptr().cast::<f32>();
    // SAFETY: `k * np <= B_MAX` (`usable`), and B's elements are in bounds by the caller's
    // contract.
    unsafe { pack(k, n, np, b, rsb, csb, bp) };
    let bp = bp.cast_const();
    // Four rows at a time, then the rest one by one.
    type Rows =
        unsafe fn(usize, usize, usize, *const f32, isize, isize, *const f32, *mut f32, isize);
    let mut i = 0;
    for (step, f) in [(4, rows::<4> as Rows), (1, rows::<1> as Rows)] {
        while i + step <= m {
            // SAFETY: rows `i..i + step` are in bounds (caller's contract).
            unsafe {
                f(
                    k,
                    n,
                    np,
                    a.offset(i as isize * rsa),
                    rsa,
                    csa,
                    bp,
                    c.offset(i as isize * rsc),
                    rsc,
                )
            };
            i += step;
        }
    }
}

/// Writes `bp[p * np + j]` = B's element `(p, j)` for `p < k`, `j < n`, and zeros for
/// `n <= j < np`, reading B along whichever of its axes is contiguous.
///
/// # Safety
/// `bp` must be valid for `k * np` writes; B's `k x n` elements must be in bounds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn pack(k: usize, n: usize, np: usize, b: *const f32, rsb: isize, csb: isize, bp: *mut f32) {
    // SAFETY (every block): rows `p < k` of `np` elements are inside `bp`'s `k * np`, and B's
    // elements `(p, j)`, `p < k`, `j < n`, are in bounds (the caller's contract).
    unsafe {
        if csb == 1 {
            for p in 0..k {
                std::ptr::copy_nonoverlapping(b.offset(p as isize * rsb), bp.add(p * np), n);
            }
        } else if rsb == 1 {
            // Column-major B (a product with a transposed operand): read each column in order.
            for j in 0..n {
                let col = b.offset(j as isize * csb);
                for p in 0..k {
                    *bp.add(p * np + j) = *col.add(p);
                }
            }
        } else {
            for p in 0..k {
                for j in 0..n {
                    *bp.add(p * np + j) = *b.offset(p as isize * rsb + j as isize * csb);
                }
            }
        }
        for p in 0..k {
            std::ptr::write_bytes(bp.add(p * np + n), 0, np - n);
        }
    }
}

/// `R` rows of C from `R` rows of A and the packed B (`np` columns, of which `n` are real).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn rows<const R: usize>(
    k: usize,
    n: usize,
    np: usize,
    a: *const f32,
    rsa: isize,
    csa: isize,
    bp: *const f32,
    c: *mut f32,
    rsc: isize,
) {
    use std::arch::x86_64::*;
    let mut j0 = 0;
    while j0 < np {
        let two = j0 + 16 <= np;
        let mut tot = [[_mm256_setzero_ps(); 2]; R];
        let mut p0 = 0;
        while p0 < k {
            let p1 = (p0 + KC).min(k);
            let mut acc = [[_mm256_setzero_ps(); 2]; R];
            for p in p0..p1 {
                // SAFETY: `p < k` and `j0 + 16 <= np` (or only the first 8 are read), inside the
                // packed B; A's element `(r, p)` is in bounds by the caller's contract.
                unsafe {
                    let brow = bp.add(p * np + j0);
                    let b0 = _mm256_loadu_ps(brow);
                    if two {
                        let b1 = _mm256_loadu_ps(brow.add(8));
                        for r in 0..R {
                            let av = _mm256_set1_ps(*a.offset(r as isize * rsa + p as isize * csa));
                            acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
                            acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
                        }
                    } else {
                        for r in 0..R {
                            let av = _mm256_set1_ps(*a.offset(r as isize * rsa + p as isize * csa));
                            acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
                        }
                    }
                }
            }
            for r in 0..R {
                for t in 0..2 {
                    tot[r][t] = if p0 == 0 {
                        acc[r][t]
                    } else {
                        _mm256_add_ps(tot[r][t], acc[r][t])
                    };
                }
            }
            p0 = p1;
        }
        for r in 0..R {
            // SAFETY: row `r` of C is in bounds; `store` writes only columns below `n`.
            unsafe {
                let crow = c.offset(r as isize * rsc);
                store(crow, j0, n, tot[r][0]);
                if two {
                    store(crow, j0 + 8, n, tot[r][1]);
                }
            }
        }
        j0 += if two { 16 } else { 8 };
    }
}

/// Stores the lanes of `v` that fall below column `n` at columns `j..j + 8` of `row`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn store(row: *mut f32, j: usize, n: usize, v: std::arch::x86_64::__m256) {
    use std::arch::x86_64::*;
    if j + 8 <= n {
        // SAFETY: columns `j..j + 8` are below `n` (caller's contract for the row).
        unsafe { _mm256_storeu_ps(row.add(j), v) };
    } else if j < n {
        let mut tmp = [0f32; 8];
        // SAFETY: `tmp` holds 8 floats; columns `j..n` of the row are in bounds.
        unsafe {
            _mm256_storeu_ps(tmp.as_mut_ptr(), v);
            std::ptr::copy_nonoverlapping(tmp.as_ptr(), row.add(j), n - j);
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    fn data(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
            })
            .collect()
    }

    /// Bit-identical to `matrixmultiply::sgemm` (alpha 1, beta 0) over shapes around the tile
    /// edges and the `kc` block, with A and B both plain and transposed.
    #[test]
    fn matches_matrixmultiply_bitwise() {
        let shapes = [
            (1, 1, 1),
            (3, 5, 7),
            (4, 16, 16),
            (9, 32, 128),
            (17, 16, 256),
            (33, 256, 16),
            (5, 257, 24),
            (6, 700, 8),
            (7, 1024, 8),
            (2, 3, 1000),
        ];
        for (m, k, n) in shapes {
            if !usable(k, n) {
                continue;
            }
            let a = data(m * k, (m * 31 + k) as u64);
            // Twice B's elements: B strided by 2 along both axes reads every other one.
            let b = data(2 * k * n, (k * 17 + n) as u64);
            for (ta, tb) in [(false, 0), (true, 0), (false, 1), (true, 1), (false, 2)] {
                let (rsa, csa) = if ta { (1, m as isize) } else { (k as isize, 1) };
                let (rsb, csb) = match tb {
                    0 => (n as isize, 1),
                    1 => (1, k as isize),
                    _ => (2 * n as isize, 2),
                };
                let mut want = vec![0f32; m * n];
                let mut got = vec![f32::NAN; m * n];
                // SAFETY: the strides address the `m*k` elements of `a` and `k*n` of `b`'s.
                unsafe {
                    matrixmultiply::sgemm(
                        m,
                        k,
                        n,
                        1.0,
                        a.as_ptr(),
                        rsa,
                        csa,
                        b.as_ptr(),
                        rsb,
                        csb,
                        0.0,
                        want.as_mut_ptr(),
                        n as isize,
                        1,
                    );
                    gemm(
                        m,
                        k,
                        n,
                        a.as_ptr(),
                        rsa,
                        csa,
                        b.as_ptr(),
                        rsb,
                        csb,
                        got.as_mut_ptr(),
                        n as isize,
                    );
                }
                let same = want
                    .iter()
                    .zip(&got)
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "m={m} k={k} n={n} ta={ta} tb={tb}");
            }
        }
    }
}
