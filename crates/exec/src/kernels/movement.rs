//! Data-movement kernels: strided gather (Transpose, Slice, Expand, Tile, Split are all one
//! [`strided_copy`]), Concat and Trilu.
//!
//! These kernels only move bits (they are generic over any `Copy` element and callers pass the
//! unsigned integer of the element's size), so every output element is the input element it names and
//! any split of the output is bit-identical by construction.

use super::elementwise::strides_of;
use super::matmul::{check_len, shape_err, KResult};
use rayon::prelude::*;

/// Outputs at least this long are filled by several rayon tasks.
const PAR_MIN: usize = 1 << 16;

/// Rows and columns of a tile of a tiled gather (see [`tiled_gather`]).
const BLOCK: usize = 32;
/// The shortest rows tiled across an outer axis that is not the last. `[N, N, C] -> [C, N, N]` with
/// its last two axes swapped at N = 256 (rows of 256) took 2 ms tiled against 6 ms element by element;
/// on 16-row chunks of it (rows of 16) tiling took 2-3x longer, its tiles' source lines 32 KiB apart.
const WIDE: usize = 64;

/// `shape`/`strides` with size-1 dims dropped and mergeable neighbours merged; never empty.
fn coalesce(shape: &[usize], strides: &[isize]) -> (Vec<usize>, Vec<isize>) {
    let (mut d, mut s): (Vec<usize>, Vec<isize>) = (Vec::new(), Vec::new());
    for (&n, &st) in shape.iter().zip(strides) {
        if n == 1 {
            continue;
        }
        if let (Some(ld), Some(ls)) = (d.last_mut(), s.last_mut()) {
            if *ls == st * n as isize {
                *ld *= n;
                *ls = st;
                continue;
            }
        }
        d.push(n);
        s.push(st);
    }
    if d.is_empty() {
        d.push(1);
        s.push(0);
    }
    (d, s)
}

/// `dst[i] = src[base + sum_k idx_k * strides[k]]` for every multi-index `idx` of `shape` in row-major
/// order. Strides may be negative (reversed slices) or zero (broadcast). Errors when any addressed
/// element lies outside `src`.
pub fn strided_copy<T: Copy + Send + Sync>(
    src: &[T],
    base: usize,
    shape: &[usize],
    strides: &[isize],
    dst: &mut [T],
) -> KResult<()> {
    if shape.len() != strides.len() {
        return Err(shape_err("strided copy: shape and strides differ in rank"));
    }
    check_len("strided copy output", dst.len(), shape)?;
    if dst.is_empty() {
        return Ok(());
    }
    let (mut lo, mut hi) = (base as i128, base as i128);
    for (&n, &s) in shape.iter().zip(strides) {
        let reach = (n as i128 - 1) * s as i128;
        if reach < 0 {
            lo += reach;
        } else {
            hi += reach;
        }
    }
    if lo < 0 || hi >= src.len() as i128 {
        return Err(shape_err(format!(
            "strided copy reads elements {lo}..={hi} of a {}-element input",
            src.len()
        )));
    }
    let (dims, st) = coalesce(shape, strides);
    let inner = dims[dims.len() - 1];
    let is = st[st.len() - 1];
    let outer = &dims[..dims.len() - 1];
    let ost = &st[..st.len() - 1];
    // A gather along the rows (a transpose's moved axis) reads one element per cache line; when the
    // source is contiguous along an outer axis, it is copied in tiles (`tiled_gather`): along the
    // last outer axis always, along an earlier one for rows of at least `WIDE` elements.
    if is != 1 && inner >= BLOCK && !outer.is_empty() {
        let last = outer.len() - 1;
        let tiled = |a: usize| outer[a] > 1 && (a == last || inner >= WIDE);
        if let Some(a) = ost.iter().position(|&s| s == 1).filter(|&a| tiled(a)) {
            tiled_gather(src, base as isize, outer, ost, a, inner, is, dst);
            return Ok(());
        }
    }
    let rows = |first_row: usize, chunk: &mut [T]| {
        let mut off = row_offset(base as isize, outer, ost, first_row);
        let mut idx = multi_index(outer, first_row);
        for row in chunk.chunks_exact_mut(inner) {
            if is == 1 {
                let o = off as usize;
                row.copy_from_slice(&src[o..o + inner]);
            } else {
                let mut p = off;
                for v in row.iter_mut() {
                    *v = src[p as usize];
                    p += is;
                }
            }
            for d in (0..outer.len()).rev() {
                idx[d] += 1;
                off += ost[d];
                if idx[d] < outer[d] {
                    break;
                }
                off -= ost[d] * outer[d] as isize;
                idx[d] = 0;
            }
        }
    };
    let rpt = (dst.len() >= PAR_MIN).then(|| (PAR_MIN / 4).div_ceil(inner));
    super::par::row_blocks(dst, inner, rpt, rows);
    Ok(())
}

/// The multi-index of row `row` over the outer dims `outer`.
fn multi_index(outer: &[usize], mut row: usize) -> Vec<usize> {
    let mut idx = vec![0usize; outer.len()];
    for d in (0..outer.len()).rev() {
        idx[d] = row % outer[d];
        row /= outer[d];
    }
    idx
}

/// The source offset of the first element of row `row` (outer dims `outer`, strides `ost`).
fn row_offset(base: isize, outer: &[usize], ost: &[isize], mut row: usize) -> isize {
    let mut off = base;
    for d in (0..outer.len()).rev() {
        off += (row % outer[d]) as isize * ost[d];
        row /= outer[d];
    }
    off
}

/// [`strided_copy`] of rows gathered at stride `is` from a source contiguous along outer axis `a`
/// (`ost[a] == 1`): tiles of `BLOCK` values of axis `a` by `BLOCK` columns, so that each cache line
/// read serves a tile's rows. The output is cut by the axes before `a`, into bands of at most `BLOCK`
/// values of `a`, by the axes after `a`, and into column ranges. Pieces (a few rows' column ranges,
/// numbered, so no list of them is kept) are grouped into rayon tasks, so an output of few long rows
/// (`[N, N, C] -> [C, N, N]`) still spreads over threads and still reads in tiles.
#[allow(clippy::too_many_arguments)]
fn tiled_gather<T: Copy + Send + Sync>(
    src: &[T],
    base: isize,
    outer: &[usize],
    ost: &[isize],
    a: usize,
    inner: usize,
    is: isize,
    dst: &mut [T],
) {
    let (pre, rows, post) = (&outer[..a], outer[a], &outer[a + 1..]);
    // Output elements from one value of axis `a` to the next.
    let da = inner * post.iter().product::<usize>();
    let par = dst.len() >= PAR_MIN && rayon::current_num_threads() > 1;
    // Columns per piece: about PAR_MIN / 4 elements, whole tiles.
    let cols = if par {
        ((PAR_MIN / 4) / BLOCK).next_multiple_of(BLOCK).min(inner)
    } else {
        inner
    };
    // Pieces, numbered: (value of the axes before `a`, band, value of the axes after `a`, columns).
    let (bands, runs, ranges) = (rows.div_ceil(BLOCK), da / inner, inner.div_ceil(cols));
    let count = dst.len() / (rows * da) * bands * runs * ranges;
    let out = Disjoint::new(dst);
    let piece = |n: usize| {
        let (rest, t) = (n / ranges, n % ranges);
        let (rest, q) = (rest / runs, rest % runs);
        let (p, b) = (rest / bands, rest % bands);
        let (r0, c0) = (b * BLOCK, t * cols);
        let (g, width) = (BLOCK.min(rows - r0), cols.min(inner - c0));
        // Rows of a piece are consecutive in the source: row `k` starts `k` elements after the first.
        let off = row_offset(base, pre, &ost[..a], p)
            + row_offset(0, post, &ost[a + 1..], q)
            + r0 as isize
            + c0 as isize * is;
        let first = p * rows * da + r0 * da + q * inner + c0;
        for t0 in (0..width).step_by(BLOCK) {
            let t1 = (t0 + BLOCK).min(width);
            for k in 0..g {
                // SAFETY: pieces are disjoint: each output element `(p, r0 + k, q, c0 + t0 + i)`
                // belongs to one piece, and each piece's tiles to one loop iteration.
                let row = unsafe { out.slice(first + k * da + t0, t1 - t0) };
                let mut at = off + t0 as isize * is + k as isize;
                for v in row {
                    *v = src[at as usize];
                    at += is;
                }
            }
        }
    };
    if par {
        let per_task = ((PAR_MIN / 4) / (BLOCK * cols)).max(1);
        (0..count)
            .into_par_iter()
            .with_min_len(per_task)
            .for_each(piece);
    } else {
        (0..count).for_each(piece);
    }
}

/// An output that tasks write in disjoint parts, each through [`Disjoint::slice`]: the parallel
/// tasks of a tiled gather write pieces of many rows each, which `chunks_mut` cannot hand out without
/// a list of every row's pieces (heap that grows with the output).
struct Disjoint<'a, T> {
    ptr: *mut T,
    len: usize,
    _out: std::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: a `Disjoint` is a `&mut [T]` shared between tasks that write disjoint elements (see
// `slice`); sending or sharing it is sending `T`s.
unsafe impl<T: Send> Send for Disjoint<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Disjoint<'_, T> {}

impl<'a, T> Disjoint<'a, T> {
    fn new(out: &'a mut [T]) -> Self {
        Disjoint {
            ptr: out.as_mut_ptr(),
            len: out.len(),
            _out: std::marker::PhantomData,
        }
    }

    /// Elements `start..start + len` of the output.
    ///
    /// # Safety
    /// No other slice of these elements may be alive while this one is.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        assert!(start + len <= self.len, "a piece outside the output");
        // SAFETY: in bounds (asserted); unaliased by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}

/// Row-major element strides of `shape` as `isize`.
pub fn istrides(shape: &[usize]) -> Vec<isize> {
    strides_of(shape).into_iter().map(|s| s as isize).collect()
}

/// ONNX Transpose: `dst` has shape `shape[perm[i]]`.
pub fn transpose<T: Copy + Send + Sync>(
    src: &[T],
    shape: &[usize],
    perm: &[usize],
    dst: &mut [T],
) -> KResult<()> {
    check_len("Transpose input", src.len(), shape)?;
    let mut seen = vec![false; shape.len()];
    if perm.len() != shape.len()
        || perm
            .iter()
            .any(|&p| p >= shape.len() || std::mem::replace(&mut seen[p], true))
    {
        return Err(shape_err(format!(
            "perm {perm:?} is not a permutation of rank {}",
            shape.len()
        )));
    }
    let st = istrides(shape);
    let oshape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let ost: Vec<isize> = perm.iter().map(|&p| st[p]).collect();
    strided_copy(src, 0, &oshape, &ost, dst)
}

/// Broadcasts `src` of `shape` to `oshape` (numpy rules, `oshape` already the broadcast).
pub fn expand<T: Copy + Send + Sync>(
    src: &[T],
    shape: &[usize],
    oshape: &[usize],
    dst: &mut [T],
) -> KResult<()> {
    check_len("Expand input", src.len(), shape)?;
    if shape.len() > oshape.len() {
        return Err(shape_err(format!(
            "{shape:?} does not broadcast to {oshape:?}"
        )));
    }
    let pad = oshape.len() - shape.len();
    let st = istrides(shape);
    let mut ost = vec![0isize; oshape.len()];
    for (i, &d) in shape.iter().enumerate() {
        if d == oshape[pad + i] {
            ost[pad + i] = if d == 1 { 0 } else { st[i] };
        } else if d != 1 {
            return Err(shape_err(format!(
                "{shape:?} does not broadcast to {oshape:?}"
            )));
        }
    }
    strided_copy(src, 0, oshape, &ost, dst)
}

/// ONNX Tile: `dst` has shape `shape[i] * repeats[i]`.
pub fn tile<T: Copy + Send + Sync>(
    src: &[T],
    shape: &[usize],
    repeats: &[usize],
    dst: &mut [T],
) -> KResult<()> {
    check_len("Tile input", src.len(), shape)?;
    if repeats.len() != shape.len() {
        return Err(shape_err(format!(
            "Tile repeats {repeats:?} do not match rank {}",
            shape.len()
        )));
    }
    // Output index r * d + j along an axis reads j: the interleaved shape [r0, d0, r1, d1, ..] with
    // stride 0 on each repeat axis is exactly the tiled tensor in row-major order.
    let st = istrides(shape);
    let mut ishape = Vec::with_capacity(2 * shape.len());
    let mut ist = Vec::with_capacity(2 * shape.len());
    for i in 0..shape.len() {
        ishape.extend([repeats[i], shape[i]]);
        ist.extend([0, st[i]]);
    }
    strided_copy(src, 0, &ishape, &ist, dst)
}

/// ONNX Concat along `axis` of inputs that agree on every other dim; `dst` holds the result.
pub fn concat<T: Copy + Send + Sync>(
    inputs: &[(&[T], &[usize])],
    axis: usize,
    dst: &mut [T],
) -> KResult<()> {
    let Some((_, first)) = inputs.first() else {
        return Err(shape_err("Concat needs at least one input"));
    };
    if axis >= first.len() {
        return Err(shape_err(format!(
            "Concat axis {axis} out of range for rank {}",
            first.len()
        )));
    }
    let mut total = 0usize;
    for (data, s) in inputs {
        check_len("Concat input", data.len(), s)?;
        let same = s.len() == first.len() && (0..s.len()).all(|i| i == axis || s[i] == first[i]);
        if !same {
            return Err(shape_err(format!(
                "Concat inputs {first:?} and {s:?} differ off axis {axis}"
            )));
        }
        total += s[axis];
    }
    let outer: usize = first[..axis].iter().product();
    let inner: usize = first[axis + 1..].iter().product();
    if dst.len() != outer * total * inner {
        return Err(shape_err("Concat output length mismatch"));
    }
    let row = total * inner;
    if row == 0 {
        return Ok(());
    }
    // Blocks of whole output rows, about PAR_MIN / 4 elements a task, each filled input by input
    // (rows of `[.., 1]` pieces are a few elements: a task per row, or a `memcpy` per piece,
    // cost more than the copy).
    let fill = |o0: usize, block: &mut [T]| {
        let rows = block.len() / row;
        let mut at = 0;
        for (data, s) in inputs {
            let w = s[axis] * inner;
            if w == 0 {
                continue;
            }
            let src = &data[o0 * w..(o0 + rows) * w];
            for (out_row, piece) in block.chunks_exact_mut(row).zip(src.chunks_exact(w)) {
                super::copy_row(&mut out_row[at..at + w], piece);
            }
            at += w;
        }
    };
    let rpt = (dst.len() >= PAR_MIN).then(|| (PAR_MIN / 4).div_ceil(row));
    super::par::row_blocks(dst, row, rpt, fill);
    Ok(())
}

/// ONNX Trilu on the last two axes: keeps `j - i >= k` (`upper`) or `j - i <= k` (lower), zeroes the
/// rest with `zero`.
pub fn trilu<T: Copy + Send + Sync>(
    src: &[T],
    shape: &[usize],
    upper: bool,
    k: i64,
    zero: T,
    dst: &mut [T],
) -> KResult<()> {
    check_len("Trilu input", src.len(), shape)?;
    check_len("Trilu output", dst.len(), shape)?;
    let r = shape.len();
    if r < 2 {
        return Err(shape_err(format!("Trilu needs rank >= 2, got {shape:?}")));
    }
    let (m, n) = (shape[r - 2], shape[r - 1]);
    if n == 0 {
        return Ok(());
    }
    for (row_i, (o, x)) in dst.chunks_mut(n).zip(src.chunks(n)).enumerate() {
        let i = (row_i % m.max(1)) as i64;
        for (j, (o, &v)) in o.iter_mut().zip(x).enumerate() {
            let d = j as i64 - i;
            let keep = if upper { d >= k } else { d <= k };
            *o = if keep { v } else { zero };
        }
    }
    Ok(())
}

pub use memplan_ir::ops::movement::PadMode;

/// For one axis of extent `n` padded by `before` (negative: cropped) to `out` elements, the input
/// index each output index reads, `None` where it takes the constant (the op's rule,
/// [`memplan_ir::ops::movement::pad_map`]).
pub fn pad_map(n: usize, before: i64, out: usize, mode: PadMode) -> KResult<Vec<Option<usize>>> {
    memplan_ir::ops::movement::pad_map(n, before, out, mode)
        .ok_or_else(|| shape_err(format!("{mode:?} padding of an empty axis")))
}

/// `Pad`: `dst` (of the per-axis map lengths) takes `src[maps]`, or `value` where any axis maps to
/// the constant. Rows of the last axis are filled in parallel for large outputs.
pub fn pad<T: Copy + Send + Sync>(
    src: &[T],
    shape: &[usize],
    maps: &[Vec<Option<usize>>],
    value: T,
    dst: &mut [T],
) -> KResult<()> {
    check_len("Pad input", src.len(), shape)?;
    let oshape: Vec<usize> = maps.iter().map(Vec::len).collect();
    check_len("Pad output", dst.len(), &oshape)?;
    if dst.is_empty() {
        return Ok(());
    }
    let r = shape.len();
    if r == 0 {
        dst[0] = src[0];
        return Ok(());
    }
    let st = istrides(shape);
    let row = oshape[r - 1];
    let last = &maps[r - 1];
    let fill_row = |ri: usize, out: &mut [T]| {
        // Decode the outer index of row `ri` and its input base offset.
        let mut rem = ri;
        let mut base: Option<isize> = Some(0);
        for k in (0..r - 1).rev() {
            let i = rem % oshape[k];
            rem /= oshape[k];
            base = match (base, maps[k][i]) {
                (Some(b), Some(j)) => Some(b + j as isize * st[k]),
                _ => None,
            };
        }
        match base {
            None => out.fill(value),
            Some(b) => {
                for (o, m) in out.iter_mut().zip(last) {
                    *o = match m {
                        Some(j) => src[(b + *j as isize * st[r - 1]) as usize],
                        None => value,
                    };
                }
            }
        }
    };
    if row == 0 {
        return Ok(());
    }
    if dst.len() >= PAR_MIN {
        dst.par_chunks_mut(row)
            .enumerate()
            .for_each(|(ri, out)| fill_row(ri, out));
    } else {
        for (ri, out) in dst.chunks_mut(row).enumerate() {
            fill_row(ri, out);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn transpose_hand() {
        let x: Vec<u32> = (0..6).collect();
        let mut y = vec![0u32; 6];
        transpose(&x, &[2, 3], &[1, 0], &mut y).unwrap();
        assert_eq!(y, [0, 3, 1, 4, 2, 5]);
        assert!(transpose(&x, &[2, 3], &[0, 0], &mut y).is_err());
        let x: Vec<u32> = (0..24).collect();
        let mut y = vec![0u32; 24];
        transpose(&x, &[2, 3, 4], &[2, 0, 1], &mut y).unwrap();
        // y[k, i, j] = x[i, j, k]
        assert_eq!(y[..6], [0, 4, 8, 12, 16, 20]);
        assert_eq!(y[6], 1);
    }

    #[test]
    fn expand_tile_concat_trilu_hand() {
        let mut y = vec![0u8; 6];
        expand(&[1u8, 2], &[2, 1], &[2, 3], &mut y).unwrap();
        assert_eq!(y, [1, 1, 1, 2, 2, 2]);
        assert!(expand(&[1u8, 2], &[2], &[3], &mut y[..3]).is_err());
        let mut t = vec![0u16; 8];
        tile(&[1u16, 2, 3, 4], &[2, 2], &[1, 2], &mut t).unwrap();
        assert_eq!(t, [1, 2, 1, 2, 3, 4, 3, 4]);
        let mut c = vec![0u32; 6];
        concat(
            &[(&[1u32, 2], &[2, 1]), (&[3u32, 4, 5, 6], &[2, 2])],
            1,
            &mut c,
        )
        .unwrap();
        assert_eq!(c, [1, 3, 4, 2, 5, 6]);
        assert!(concat(
            &[(&[1u32, 2], &[2, 1]), (&[3u32, 4, 5], &[3, 1])],
            1,
            &mut c
        )
        .is_err());
        let x: Vec<u32> = (1..=9).collect();
        let mut u = vec![0u32; 9];
        trilu(&x, &[3, 3], true, 0, 0, &mut u).unwrap();
        assert_eq!(u, [1, 2, 3, 0, 5, 6, 0, 0, 9]);
        trilu(&x, &[3, 3], false, -1, 0, &mut u).unwrap();
        assert_eq!(u, [0, 0, 0, 4, 0, 0, 7, 8, 0]);
    }

    #[test]
    fn strided_copy_reversed_and_bounds() {
        let x: Vec<u32> = (0..10).collect();
        let mut y = vec![0u32; 4];
        strided_copy(&x, 9, &[4], &[-2], &mut y).unwrap();
        assert_eq!(y, [9, 7, 5, 3]);
        assert!(strided_copy(&x, 2, &[4], &[-1], &mut y).is_err());
        assert!(strided_copy(&x, 8, &[4], &[1], &mut y).is_err());
        // One axis, longer than a tile, with a stride other than 1: no outer axis to tile along
        // (a scalar expanded; a strided slice).
        let mut z = vec![0u32; 40];
        strided_copy(&x, 3, &[40], &[0], &mut z).unwrap();
        assert!(z.iter().all(|&v| v == 3));
        let long: Vec<u32> = (0..100).collect();
        strided_copy(&long, 1, &[40], &[2], &mut z).unwrap();
        assert!(z.iter().enumerate().all(|(i, &v)| v == 1 + 2 * i as u32));
    }

    /// Concat of pieces as short as one element (`[.., 1]` index columns), an empty one and a
    /// long one, over enough rows to be cut into tasks, along the last axis and a middle one,
    /// against the definition.
    #[test]
    fn concats_of_short_pieces_over_tasks_match_the_definition() {
        for (outer, widths, inner) in [
            (70_000, vec![1, 1, 0, 1, 1], 1),
            (3_000, vec![1, 40, 3], 1),
            (9_000, vec![2, 1], 5),
            (4, vec![3, 2], 1),
        ] {
            let mut next = 0u32;
            let data: Vec<Vec<u32>> = widths
                .iter()
                .map(|&w| {
                    (0..outer * w * inner)
                        .map(|_| {
                            next += 1;
                            next
                        })
                        .collect()
                })
                .collect();
            let shapes: Vec<[usize; 3]> = widths.iter().map(|&w| [outer, w, inner]).collect();
            let parts: Vec<(&[u32], &[usize])> = data
                .iter()
                .zip(&shapes)
                .map(|(d, s)| (d.as_slice(), s.as_slice()))
                .collect();
            let total: usize = widths.iter().sum();
            let mut got = vec![0u32; outer * total * inner];
            concat(&parts, 1, &mut got).unwrap();
            let mut want = Vec::with_capacity(got.len());
            for o in 0..outer {
                for (d, &w) in data.iter().zip(&widths) {
                    want.extend_from_slice(&d[o * w * inner..(o + 1) * w * inner]);
                }
            }
            assert_eq!(got, want, "{outer} {widths:?} {inner}");
        }
    }

    #[test]
    fn blocked_transposes_match_naive_across_tiles_wraps_and_tasks() {
        // Inner extents above and below a tile, row groups cut by the last outer axis wrapping
        // (70 rows of 3-row blocks), and outputs long enough to be split over tasks.
        for (shape, perm) in [
            (vec![70, 3, 50], vec![2, 0, 1]),
            (vec![33, 65], vec![1, 0]),
            (vec![300, 301], vec![1, 0]),
            (vec![2, 97, 5, 40], vec![0, 3, 1, 2]),
            (vec![64, 64, 17], vec![2, 1, 0]),
            // Few long rows: the bands are cut into column ranges over tasks.
            (vec![1, 64, 64, 32], vec![0, 3, 1, 2]),
            (vec![4099, 24], vec![1, 0]),
            // The source's contiguous axis is not the last outer one: [C, N, N] <- [N, N, C].
            (vec![1, 64, 48, 32], vec![0, 3, 2, 1]),
            (vec![3, 20, 5, 17], vec![2, 3, 0, 1]),
            (vec![40, 3, 33], vec![2, 1, 0]),
            (vec![70, 5, 100], vec![2, 1, 0]),
        ] {
            let n: usize = shape.iter().product();
            let x: Vec<u32> = (0..n as u32).collect();
            let mut y = vec![0u32; n];
            transpose(&x, &shape, &perm, &mut y).unwrap();
            assert_eq!(y, naive_transpose(&x, &shape, &perm), "{shape:?} {perm:?}");
        }
    }

    fn naive_transpose(x: &[u32], shape: &[usize], perm: &[usize]) -> Vec<u32> {
        let oshape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        let st = strides_of(shape);
        let n: usize = shape.iter().product();
        (0..n)
            .map(|mut i| {
                let mut off = 0;
                for d in (0..oshape.len()).rev() {
                    off += (i % oshape[d]) * st[perm[d]];
                    i /= oshape[d];
                }
                x[off]
            })
            .collect()
    }

    proptest! {
        #[test]
        fn transpose_matches_naive_and_is_large_safe(
            shape in prop::collection::vec(1usize..=40, 1..=4),
            seed in any::<u64>(),
        ) {
            let n: usize = shape.iter().product();
            let x: Vec<u32> = (0..n as u32).collect();
            let mut perm: Vec<usize> = (0..shape.len()).collect();
            let mut s = seed;
            for i in (1..perm.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
                perm.swap(i, (s >> 33) as usize % (i + 1));
            }
            let mut y = vec![0u32; n];
            transpose(&x, &shape, &perm, &mut y).unwrap();
            prop_assert_eq!(y, naive_transpose(&x, &shape, &perm));
        }
    }
}
