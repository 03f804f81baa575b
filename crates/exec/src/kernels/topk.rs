//! TopK along one axis. The order is total and independent of the algorithm: by value (largest or
//! smallest first; NaN counts as larger than every number), ties broken by the lower index first. So
//! `sorted = 0` also returns this order, and the result is the same however rows are grouped.

use super::matmul::{check_len, shape_err, KResult};
use rayon::prelude::*;
use std::cmp::Ordering;

/// Up to this `k`, TopK selects by insertion (no use of the scratch index buffer).
const SMALL_K: usize = 16;
/// Inputs at least this large are split over rayon tasks by row (small-k path).
const PAR_MIN: usize = 1 << 15;

/// Orders `(value, index)` pairs for TopK: better first.
#[inline]
fn better<T: PartialOrd>(
    a: (T, usize),
    b: (T, usize),
    largest: bool,
    is_nan: impl Fn(&T) -> bool,
) -> Ordering {
    let by_value = match (is_nan(&a.0), is_nan(&b.0)) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.0.partial_cmp(&b.0).unwrap_or(Ordering::Equal),
    };
    let by_value = if largest {
        by_value.reverse()
    } else {
        by_value
    };
    by_value.then(a.1.cmp(&b.1))
}

/// TopK of `x` (`shape`) along `axis`: writes `k` values and i64 indices per row. `scratch` holds at
/// least `shape[axis]` entries (the caller allocates and counts it).
pub fn topk<T: Copy + PartialOrd + Send + Sync>(
    x: &[T],
    shape: &[usize],
    axis: usize,
    k: usize,
    largest: bool,
    is_nan: impl Fn(&T) -> bool + Copy + Sync,
    values: &mut [T],
    indices: &mut [i64],
    scratch: &mut [usize],
) -> KResult<()> {
    check_len("TopK input", x.len(), shape)?;
    if axis >= shape.len() {
        return Err(shape_err(format!(
            "TopK axis {axis} out of range for rank {}",
            shape.len()
        )));
    }
    let n = shape[axis];
    if k > n {
        return Err(shape_err(format!(
            "TopK k = {k} exceeds the axis length {n}"
        )));
    }
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    if values.len() != outer * k * inner || indices.len() != values.len() || scratch.len() < n {
        return Err(shape_err("TopK output or scratch length mismatch"));
    }
    if k == 0 {
        return Ok(());
    }
    if k <= SMALL_K {
        // Selection by insertion into the k best so far: one comparison per element for most of
        // them. Rows are independent, so contiguous rows (inner == 1) run in parallel.
        let row = |o: usize, i: usize, vals: &mut [T], inds: &mut [i64], step: usize| {
            let at = |j: usize| x[(o * n + j) * inner + i];
            let mut best: Vec<(T, usize)> = Vec::with_capacity(k + 1);
            for j in 0..n {
                let c = (at(j), j);
                if best.len() == k {
                    match best.last() {
                        Some(&w) if better(c, w, largest, is_nan) == Ordering::Less => {}
                        _ => continue,
                    }
                    best.pop();
                }
                let pos =
                    best.partition_point(|&b| better(b, c, largest, is_nan) == Ordering::Less);
                best.insert(pos, c);
            }
            for (r, &(v, j)) in best.iter().enumerate() {
                vals[r * step] = v;
                inds[r * step] = j as i64;
            }
        };
        if inner == 1 && outer > 1 && outer * n >= PAR_MIN && rayon::current_num_threads() > 1 {
            values
                .par_chunks_mut(k)
                .zip(indices.par_chunks_mut(k))
                .enumerate()
                .for_each(|(o, (v, ix))| row(o, 0, v, ix, 1));
        } else {
            for o in 0..outer {
                for i in 0..inner {
                    let at = o * k * inner + i;
                    row(o, i, &mut values[at..], &mut indices[at..], inner);
                }
            }
        }
        return Ok(());
    }
    let idx = &mut scratch[..n];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| x[(o * n + j) * inner + i];
            for (j, v) in idx.iter_mut().enumerate() {
                *v = j;
            }
            let cmp = |a: &usize, b: &usize| better((at(*a), *a), (at(*b), *b), largest, is_nan);
            if k < n {
                idx.select_nth_unstable_by(k - 1, cmp);
            }
            idx[..k].sort_unstable_by(cmp);
            for (r, &j) in idx[..k].iter().enumerate() {
                let dst = (o * k + r) * inner + i;
                values[dst] = at(j);
                indices[dst] = j as i64;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both selection paths (insertion for small k, select-and-sort above) against a full sort, on
    /// rows with many ties and NaNs, along the last and a middle axis.
    #[test]
    fn all_k_match_a_full_sort() {
        let vals = [0.5f32, -1.0, 2.0, f32::NAN, 0.5, -0.0, 0.0];
        let (outer, n, inner) = (3usize, 40usize, 2usize);
        let x: Vec<f32> = (0..outer * n * inner)
            .map(|i| vals[(i * 7 + i / 5) % vals.len()])
            .collect();
        let nan = |v: &f32| v.is_nan();
        for largest in [true, false] {
            for k in [1, 2, 3, 16, 17, 40] {
                let mut v = vec![0f32; outer * k * inner];
                let mut ix = vec![0i64; v.len()];
                let mut s = vec![0usize; n];
                topk(
                    &x,
                    &[outer, n, inner],
                    1,
                    k,
                    largest,
                    nan,
                    &mut v,
                    &mut ix,
                    &mut s,
                )
                .unwrap();
                for o in 0..outer {
                    for i in 0..inner {
                        let at = |j: usize| x[(o * n + j) * inner + i];
                        let mut all: Vec<usize> = (0..n).collect();
                        all.sort_by(|&a, &b| better((at(a), a), (at(b), b), largest, nan));
                        for r in 0..k {
                            assert_eq!(ix[(o * k + r) * inner + i], all[r] as i64, "k={k}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn ties_take_the_lower_index_and_nan_is_largest() {
        let x = [1.0f32, 3.0, 3.0, f32::NAN, 2.0];
        let (mut v, mut i, mut s) = ([0f32; 3], [0i64; 3], [0usize; 5]);
        topk(
            &x,
            &[5],
            0,
            3,
            true,
            |v: &f32| v.is_nan(),
            &mut v,
            &mut i,
            &mut s,
        )
        .unwrap();
        assert_eq!(i, [3, 1, 2]);
        topk(
            &x,
            &[5],
            0,
            3,
            false,
            |v: &f32| v.is_nan(),
            &mut v,
            &mut i,
            &mut s,
        )
        .unwrap();
        assert_eq!(i, [0, 4, 1]);
        assert_eq!(v, [1.0, 2.0, 3.0]);
        let y = [5i64, 1, 5, 1];
        let (mut v2, mut i2) = ([0i64; 2], [0i64; 2]);
        topk(&y, &[2, 2], 0, 1, true, |_| false, &mut v2, &mut i2, &mut s).unwrap();
        assert_eq!((v2, i2), ([5, 1], [0, 0]));
        assert!(topk(
            &y,
            &[4],
            0,
            5,
            true,
            |_| false,
            &mut [0; 5],
            &mut [0; 5],
            &mut [0; 5]
        )
        .is_err());
    }
}
