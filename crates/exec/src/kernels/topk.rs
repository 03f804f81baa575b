//! TopK along one axis. The order is total and independent of the algorithm: by value (largest or
//! smallest first; NaN counts as larger than every number), ties broken by the lower index first. So
//! `sorted = 0` also returns this order, and the result is the same however rows are grouped.

use super::matmul::{check_len, shape_err, KResult};
use std::cmp::Ordering;

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
pub fn topk<T: Copy + PartialOrd>(
    x: &[T],
    shape: &[usize],
    axis: usize,
    k: usize,
    largest: bool,
    is_nan: impl Fn(&T) -> bool + Copy,
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
