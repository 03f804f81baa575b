//! Index kernels: Gather, GatherElements, GatherND, ScatterND, ScatterElements, NonZero.
//!
//! Indices are validated (negative ones wrap once, anything else outside the axis is an error) before
//! anything is written. Gathers only move bits. Scatters apply updates sequentially in the order the
//! updates are stored, so duplicate indices with a reduction give one deterministic result.

use super::elementwise::{index_err, strides_of};
use super::matmul::{check_len, shape_err, try_vec, KResult};

/// Resolves index `i` for an axis of length `len` (negative counts from the end).
#[inline]
pub fn resolve(i: i64, axis: usize, len: usize) -> KResult<usize> {
    let j = if i < 0 { i + len as i64 } else { i };
    if j < 0 || j >= len as i64 {
        return Err(index_err(i, axis, len));
    }
    Ok(j as usize)
}

/// ONNX Gather along `axis`: output shape `shape[..axis] + ishape + shape[axis+1..]`.
pub fn gather<T: Copy + Send + Sync>(
    x: &[T],
    shape: &[usize],
    axis: usize,
    idx: &[i64],
    dst: &mut [T],
) -> KResult<()> {
    check_len("Gather data", x.len(), shape)?;
    if axis >= shape.len() {
        return Err(shape_err(format!(
            "Gather axis {axis} out of range for rank {}",
            shape.len()
        )));
    }
    let d = shape[axis];
    // Every index is checked before anything is written.
    for &i in idx {
        resolve(i, axis, d)?;
    }
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    if dst.len() != outer * idx.len() * inner {
        return Err(shape_err("Gather output length mismatch"));
    }
    if inner == 0 || dst.is_empty() {
        return Ok(());
    }
    let n = idx.len();
    // Output row `r` (of `inner` elements) is row `(o, idx[j])` of `x`, `(o, j) = (r / n, r % n)`;
    // rows in parallel, about 16 Ki elements a task, so an embedding lookup (one outer block of
    // millions of short rows) spreads over the threads too.
    let rows_per_task = (dst.len() >= 1 << 16).then_some((1usize << 14).div_ceil(inner));
    super::par::row_blocks(dst, inner, rows_per_task, |r0, chunk| {
        // `(o, j)` counted along, not divided out per row (a division per element where rows
        // are single elements: a gather of scalars).
        let (mut o, mut j) = (r0 / n, r0 % n);
        for row in chunk.chunks_exact_mut(inner) {
            let i = idx[j];
            let at = if i < 0 { i + d as i64 } else { i } as usize;
            super::copy_row(row, &x[(o * d + at) * inner..(o * d + at + 1) * inner]);
            j += 1;
            if j == n {
                (o, j) = (o + 1, 0);
            }
        }
    });
    Ok(())
}

/// An index element of a gather: `int32` or `int64`, read in place (no widened copy).
pub trait IndexElem: Copy + Send + Sync {
    fn get(self) -> i64;
}

impl IndexElem for i64 {
    #[inline]
    fn get(self) -> i64 {
        self
    }
}

impl IndexElem for i32 {
    #[inline]
    fn get(self) -> i64 {
        self as i64
    }
}

/// ONNX GatherElements: `out[p] = x[p with p[axis] replaced by idx[p]]`; output has idx's shape.
/// Every index is checked before anything is written; output rows (the last axis) in parallel,
/// each element copied the same way whatever the cut.
pub fn gather_elements<T: Copy + Send + Sync, I: IndexElem>(
    x: &[T],
    shape: &[usize],
    axis: usize,
    idx: &[I],
    ishape: &[usize],
    dst: &mut [T],
) -> KResult<()> {
    check_len("GatherElements data", x.len(), shape)?;
    check_len("GatherElements indices", idx.len(), ishape)?;
    check_len("GatherElements output", dst.len(), ishape)?;
    if ishape.len() != shape.len() || axis >= shape.len() {
        return Err(shape_err(format!(
            "GatherElements indices {ishape:?} vs data {shape:?}"
        )));
    }
    if ishape
        .iter()
        .zip(shape)
        .enumerate()
        .any(|(i, (a, b))| i != axis && a > b)
    {
        return Err(shape_err(format!(
            "GatherElements indices {ishape:?} exceed data {shape:?}"
        )));
    }
    let d = shape[axis];
    for &i in idx {
        resolve(i.get(), axis, d)?;
    }
    let r = ishape.len();
    let row = ishape[r - 1];
    if row == 0 || dst.is_empty() {
        return Ok(());
    }
    let xs = strides_of(shape);
    let (sa, sl) = (xs[axis], xs[r - 1]);
    let rows_per_task = (dst.len() >= 1 << 16).then_some((1usize << 14).div_ceil(row));
    super::par::row_blocks(dst, row, rows_per_task, |r0, chunk| {
        for (q, out) in chunk.chunks_exact_mut(row).enumerate() {
            let n = r0 + q;
            // The offset of the row's leading coordinates, the gathered axis left out.
            let (mut rem, mut base) = (n, 0usize);
            for k in (0..r - 1).rev() {
                let c = rem % ishape[k];
                rem /= ishape[k];
                if k != axis {
                    base += c * xs[k];
                }
            }
            let ix = &idx[n * row..(n + 1) * row];
            let at = |i: I| {
                let i = i.get();
                (if i < 0 { i + d as i64 } else { i }) as usize * sa
            };
            if axis == r - 1 {
                for (y, &i) in out.iter_mut().zip(ix) {
                    *y = x[base + at(i)];
                }
            } else {
                for (j, (y, &i)) in out.iter_mut().zip(ix).enumerate() {
                    *y = x[base + j * sl + at(i)];
                }
            }
        }
    });
    Ok(())
}

/// Element offsets (into the data) and block length of each ONNX GatherND/ScatterND index tuple.
/// `ishape` ends with the tuple length `q`; the first `batch_dims` dims are shared batch dims.
pub fn nd_offsets(
    shape: &[usize],
    idx: &[i64],
    ishape: &[usize],
    batch_dims: usize,
) -> KResult<(Vec<usize>, usize)> {
    let Some(&q) = ishape.last() else {
        return Err(shape_err("GatherND/ScatterND indices need rank >= 1"));
    };
    if batch_dims + q > shape.len() || batch_dims >= ishape.len() {
        return Err(shape_err(format!(
            "index tuples of {q} with {batch_dims} batch dims do not fit data {shape:?}"
        )));
    }
    if shape[..batch_dims] != ishape[..batch_dims] {
        return Err(shape_err(format!(
            "batch dims of indices {ishape:?} and data {shape:?} differ"
        )));
    }
    let xs = strides_of(shape);
    let block: usize = shape[batch_dims + q..].iter().product();
    let tuples = idx.len().checked_div(q).unwrap_or(0);
    let per_batch: usize = ishape[batch_dims..ishape.len() - 1].iter().product();
    let mut offs = try_vec(tuples)?;
    for t in 0..tuples {
        let mut off = 0;
        if batch_dims > 0 {
            // The batch's offset (divisions per tuple only where there are batch dims).
            let mut rem = t.checked_div(per_batch).unwrap_or(0);
            for k in (0..batch_dims).rev() {
                off += (rem % shape[k]) * xs[k];
                rem /= shape[k];
            }
        }
        for j in 0..q {
            let ax = batch_dims + j;
            off += resolve(idx[t * q + j], ax, shape[ax])? * xs[ax];
        }
        offs.push(off);
    }
    if q == 0 {
        let n: usize = ishape[..ishape.len() - 1].iter().product();
        let per_batch_elems: usize = shape[batch_dims..].iter().product();
        offs = (0..n)
            .map(|t| (t / per_batch.max(1)) * per_batch_elems)
            .collect();
    }
    Ok((offs, block))
}

/// Copies `block` elements at each offset into consecutive blocks of `dst`.
pub fn gather_blocks<T: Copy>(x: &[T], offs: &[usize], block: usize, dst: &mut [T]) -> KResult<()> {
    if dst.len() != offs.len() * block {
        return Err(shape_err("GatherND output length mismatch"));
    }
    for (o, d) in offs.iter().zip(dst.chunks_mut(block.max(1))) {
        d.copy_from_slice(&x[*o..*o + block]);
    }
    Ok(())
}

/// ScatterND/ScatterElements reductions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScatterReduce {
    None,
    Add,
    Mul,
    Max,
    Min,
}

/// Writes `upd` blocks at each offset of `dst` (a copy of the data), combining with `f`.
pub fn scatter_blocks<T: Copy>(
    dst: &mut [T],
    offs: &[usize],
    block: usize,
    upd: &[T],
    f: impl Fn(T, T) -> T,
) -> KResult<()> {
    if upd.len() != offs.len() * block {
        return Err(shape_err(format!(
            "ScatterND updates have {} elements, expected {}",
            upd.len(),
            offs.len() * block
        )));
    }
    for (o, u) in offs.iter().zip(upd.chunks(block.max(1))) {
        for (d, &v) in dst[*o..*o + block].iter_mut().zip(u) {
            *d = f(*d, v);
        }
    }
    Ok(())
}

/// Offsets into data of each ScatterElements update (`ishape` = updates' shape).
pub fn elements_offsets(
    shape: &[usize],
    axis: usize,
    idx: &[i64],
    ishape: &[usize],
) -> KResult<Vec<usize>> {
    check_len("ScatterElements indices", idx.len(), ishape)?;
    if ishape.len() != shape.len() || axis >= shape.len() {
        return Err(shape_err(format!(
            "ScatterElements indices {ishape:?} vs data {shape:?}"
        )));
    }
    if ishape
        .iter()
        .zip(shape)
        .enumerate()
        .any(|(i, (a, b))| i != axis && a > b)
    {
        return Err(shape_err(format!(
            "ScatterElements indices {ishape:?} exceed data {shape:?}"
        )));
    }
    let xs = strides_of(shape);
    let mut p = vec![0usize; ishape.len()];
    let mut offs = try_vec(idx.len())?;
    for &i in idx {
        let mut off = 0;
        for k in 0..p.len() {
            let c = if k == axis {
                resolve(i, axis, shape[axis])?
            } else {
                p[k]
            };
            off += c * xs[k];
        }
        offs.push(off);
        for k in (0..p.len()).rev() {
            p[k] += 1;
            if p[k] < ishape[k] {
                break;
            }
            p[k] = 0;
        }
    }
    Ok(offs)
}

/// ONNX NonZero: `[rank, nnz]` coordinates of the non-zero elements in row-major order.
pub fn nonzero<T: Copy + PartialEq + Default>(
    x: &[T],
    shape: &[usize],
) -> KResult<(usize, Vec<i64>)> {
    check_len("NonZero input", x.len(), shape)?;
    let zero = T::default();
    let nnz = x.iter().filter(|&&v| v != zero).count();
    let r = shape.len().max(1);
    let mut out = try_vec(r * nnz)?;
    out.resize(r * nnz, 0i64);
    let mut j = 0;
    let st = strides_of(shape);
    for (i, &v) in x.iter().enumerate() {
        if v != zero {
            for k in 0..shape.len() {
                out[k * nnz + j] = ((i / st[k]) % shape[k]) as i64;
            }
            j += 1;
        }
    }
    Ok((nnz, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_buffers_that_cannot_be_allocated_are_errors() {
        // More than any address space: refused by the allocator, reported, not aborted.
        let e = try_vec::<u64>(usize::MAX / 16).unwrap_err();
        assert!(e.to_string().contains("cannot allocate"), "{e}");
        assert_eq!(try_vec::<u8>(10).unwrap().capacity(), 10);
    }

    /// Gathers split over threads by rows (an embedding lookup: one outer block of many short
    /// rows; several outer blocks; rows of 1, 4, 20 elements), negative indices among them, against
    /// a naive gather; a bad index anywhere is an error and nothing is written.
    #[test]
    fn gathers_split_by_rows_match_a_naive_gather() {
        for &(outer, d, inner, n) in &[(1, 50, 4, 40_000), (3, 7, 20, 3000), (2, 9, 1, 50_000)] {
            let x: Vec<u32> = (0..(outer * d * inner) as u32).collect();
            let idx: Vec<i64> = (0..n as i64)
                .map(|j| (j * 7919) % (2 * d as i64) - d as i64)
                .collect();
            let mut got = vec![0u32; outer * n * inner];
            gather(&x, &[outer, d, inner], 1, &idx, &mut got).unwrap();
            for o in 0..outer {
                for (j, &i) in idx.iter().enumerate() {
                    let r = if i < 0 { i + d as i64 } else { i } as usize;
                    let want = &x[(o * d + r) * inner..(o * d + r + 1) * inner];
                    let at = (o * n + j) * inner;
                    assert_eq!(
                        &got[at..at + inner],
                        want,
                        "{outer} {d} {inner} row {o},{j}"
                    );
                }
            }
            let mut bad = idx.clone();
            bad[n - 1] = d as i64;
            let mut untouched = vec![7u32; got.len()];
            assert!(gather(&x, &[outer, d, inner], 1, &bad, &mut untouched).is_err());
            assert!(untouched.iter().all(|&v| v == 7));
        }
    }

    /// GatherElements by rows over threads, along each axis of a rank-3 tensor (indices smaller
    /// than the data on the other axes, negative ones among them), int32 and int64 indices,
    /// against the definition element by element; a bad index is an error and nothing is written.
    #[test]
    fn gather_elements_by_rows_match_the_definition() {
        let shape = [5usize, 60, 300];
        let x: Vec<u32> = (0..shape.iter().product::<usize>() as u32).collect();
        for axis in 0..3 {
            let mut ishape = [4usize, 59, 290];
            ishape[axis] = 70;
            let n: usize = ishape.iter().product();
            let d = shape[axis] as i64;
            let idx: Vec<i64> = (0..n as i64).map(|j| (j * 7919) % (2 * d) - d).collect();
            let idx32: Vec<i32> = idx.iter().map(|&i| i as i32).collect();
            let mut want = vec![0u32; n];
            for (p, w) in want.iter_mut().enumerate() {
                let o = [
                    p / (ishape[1] * ishape[2]),
                    p / ishape[2] % ishape[1],
                    p % ishape[2],
                ];
                let mut at = o;
                at[axis] = (if idx[p] < 0 { idx[p] + d } else { idx[p] }) as usize;
                *w = x[(at[0] * shape[1] + at[1]) * shape[2] + at[2]];
            }
            let mut got = vec![0u32; n];
            gather_elements(&x, &shape, axis, &idx, &ishape, &mut got).unwrap();
            assert_eq!(got, want, "axis {axis}, int64");
            let mut got = vec![0u32; n];
            gather_elements(&x, &shape, axis, &idx32, &ishape, &mut got).unwrap();
            assert_eq!(got, want, "axis {axis}, int32");
            let mut bad = idx.clone();
            bad[n - 1] = d;
            let mut untouched = vec![7u32; n];
            assert!(gather_elements(&x, &shape, axis, &bad, &ishape, &mut untouched).is_err());
            assert!(untouched.iter().all(|&v| v == 7));
        }
    }

    #[test]
    fn gather_negative_and_out_of_range() {
        let x: Vec<u32> = (0..6).collect();
        let mut y = vec![0u32; 4];
        gather(&x, &[3, 2], 0, &[-1, 0], &mut y).unwrap();
        assert_eq!(y, [4, 5, 0, 1]);
        assert!(gather(&x, &[3, 2], 0, &[3, 0], &mut y).is_err());
        let mut z = vec![0u32; 3];
        gather(&x, &[3, 2], 1, &[1], &mut z).unwrap();
        assert_eq!(z, [1, 3, 5]);
    }

    #[test]
    fn gather_elements_nd_scatter_nonzero() {
        let x: Vec<u32> = vec![1, 2, 3, 4];
        let mut y = vec![0u32; 4];
        gather_elements(&x, &[2, 2], 1, &[0, 0, 1, 0], &[2, 2], &mut y).unwrap();
        assert_eq!(y, [1, 1, 4, 3]);
        let (offs, block) = nd_offsets(&[2, 2], &[0, 1, 1, 0], &[2, 2], 0).unwrap();
        assert_eq!((offs.clone(), block), (vec![1, 2], 1));
        let (offs2, block2) = nd_offsets(&[2, 2], &[1, 0], &[2, 1], 0).unwrap();
        assert_eq!((offs2, block2), (vec![2, 0], 2));
        let (offs3, _) = nd_offsets(&[2, 2], &[1, 0], &[2, 1], 1).unwrap();
        assert_eq!(offs3, vec![1, 2]);
        let mut d = x.clone();
        scatter_blocks(&mut d, &offs, 1, &[10, 20], |a, b| a + b).unwrap();
        assert_eq!(d, [1, 12, 23, 4]);
        let (n, c) = nonzero(&[0i64, 5, 0, 7], &[2, 2]).unwrap();
        assert_eq!((n, c), (2, vec![0, 1, 1, 1]));
    }
}
