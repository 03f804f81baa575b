//! Kernels: MaxPool, AveragePool (N-D, kernel/strides/pads/dilations, ceil_mode, count_include_pad),
//! GlobalAveragePool and GlobalMaxPool over `[N, C, D1..Dk]`.
//!
//! Every output element folds its window's in-bounds taps in row-major kernel order (sequentially; the
//! order depends only on the window geometry of that output position), and each (n, c) plane is
//! independent, so splitting the batch or the channels is bit-identical. Global pools use the canonical
//! fold of [`super::reduce`] over the contiguous plane. Pads are explicit; use
//! [`super::conv::resolve_pads`] for auto_pad.

use super::conv::Window;
use super::matmul::{check_len, shape_err, KResult};
use super::norm::Float;
use super::reduce::{max_nan, reduce_seq, ReduceElem, ReduceOp};
use rayon::prelude::*;

/// Attributes of MaxPool/AveragePool. Empty `strides`/`pads`/`dilations` take the defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolAttrs {
    /// `kernel_shape`.
    pub kernel: Vec<usize>,
    /// Strides per spatial axis.
    pub strides: Vec<usize>,
    /// Pads `[b1..bk, e1..ek]`.
    pub pads: Vec<usize>,
    /// Dilations per spatial axis.
    pub dilations: Vec<usize>,
    /// Use ceil instead of floor for the output size.
    pub ceil_mode: bool,
    /// AveragePool: divide by the taps inside the padded input instead of the in-bounds taps.
    pub count_include_pad: bool,
}

/// Output shape of MaxPool/AveragePool.
pub fn pool_out_shape(x_shape: &[usize], attrs: &PoolAttrs) -> KResult<Vec<usize>> {
    Ok(geometry(x_shape, attrs)?.1)
}

fn geometry(x_shape: &[usize], attrs: &PoolAttrs) -> KResult<(Window, Vec<usize>)> {
    if x_shape.len() < 3 || attrs.kernel.len() != x_shape.len() - 2 {
        return Err(shape_err(format!(
            "pool needs X [N,C,D..] with one kernel extent per spatial axis, got {x_shape:?} / {:?}",
            attrs.kernel
        )));
    }
    let win = Window::new(&attrs.kernel, &attrs.strides, &attrs.pads, &attrs.dilations)?;
    let mut out = x_shape[..2].to_vec();
    for (i, &d) in x_shape[2..].iter().enumerate() {
        out.push(win.out_dim(i, d, attrs.ceil_mode)?);
    }
    Ok((win, out))
}

/// Per spatial axis and output index: in-bounds input coordinates of the taps (kernel order) and the
/// number of taps inside the padded extent.
type AxisTaps = (Vec<Vec<usize>>, Vec<usize>);

fn axis_taps(win: &Window, i: usize, d: usize, o: usize) -> AxisTaps {
    let lo = -(win.pad_begin[i] as isize);
    let hi = (d + win.pad_end[i]) as isize;
    (0..o)
        .map(|oi| {
            let mut v = Vec::with_capacity(win.kernel[i].min(d));
            let mut padded = 0;
            for k in 0..win.kernel[i] {
                let c = win.coord(i, oi, k);
                if c >= lo && c < hi {
                    padded += 1;
                }
                if c >= 0 && (c as usize) < d {
                    v.push(c as usize);
                }
            }
            (v, padded)
        })
        .unzip()
}

/// Runs `f(window_offsets, padded_count)` for every output of every plane.
fn pool_planes<T: ReduceElem, U: Copy + Send>(
    x: &[T],
    x_shape: &[usize],
    attrs: &PoolAttrs,
    out: &mut [U],
    f: impl Fn(&[T], &[usize], usize) -> U + Sync,
) -> KResult<()> {
    let (win, out_shape) = geometry(x_shape, attrs)?;
    check_len("pool X", x.len(), x_shape)?;
    check_len("pool output", out.len(), &out_shape)?;
    let in_sp = &x_shape[2..];
    let out_sp = &out_shape[2..];
    let nd = in_sp.len();
    let taps: Vec<AxisTaps> = (0..nd)
        .map(|i| axis_taps(&win, i, in_sp[i], out_sp[i]))
        .collect();
    let in_plane: usize = in_sp.iter().product();
    let out_plane: usize = out_sp.iter().product();
    if out_plane == 0 || out.is_empty() {
        return Ok(());
    }
    let plane = |pi: usize, yo: &mut [U]| {
        let xp = &x[pi * in_plane..(pi + 1) * in_plane];
        let (mut offs, mut next) = (Vec::new(), Vec::new());
        let mut oidx = vec![0usize; nd];
        for (o, y) in yo.iter_mut().enumerate() {
            let mut t = o;
            for i in (0..nd).rev() {
                oidx[i] = t % out_sp[i];
                t /= out_sp[i];
            }
            offs.clear();
            offs.push(0usize);
            let mut padded = 1;
            for i in 0..nd {
                next.clear();
                let (lists, counts) = &taps[i];
                padded *= counts[oidx[i]];
                for &b in &offs {
                    next.extend(lists[oidx[i]].iter().map(|&c| b * in_sp[i] + c));
                }
                std::mem::swap(&mut offs, &mut next);
            }
            *y = f(xp, &offs, padded);
        }
    };
    if out.len() * win.kernel.iter().product::<usize>() >= 1 << 15
        && rayon::current_num_threads() > 1
    {
        out.par_chunks_mut(out_plane)
            .enumerate()
            .for_each(|(pi, yo)| plane(pi, yo));
    } else {
        out.chunks_mut(out_plane)
            .enumerate()
            .for_each(|(pi, yo)| plane(pi, yo));
    }
    Ok(())
}

/// ONNX MaxPool (values only). A window with no in-bounds tap yields the type's lowest value.
pub fn max_pool<T: ReduceElem>(
    x: &[T],
    x_shape: &[usize],
    attrs: &PoolAttrs,
    out: &mut [T],
) -> KResult<()> {
    pool_planes(x, x_shape, attrs, out, |xp, offs, _| {
        offs.iter().fold(T::LOWEST, |m, &o| max_nan(m, xp[o]))
    })
}

/// ONNX AveragePool. Sums in kernel order and divides by the in-bounds tap count, or with
/// `count_include_pad` by the count of taps inside the padded input (onnxruntime's rule).
pub fn average_pool<T: Float>(
    x: &[T],
    x_shape: &[usize],
    attrs: &PoolAttrs,
    out: &mut [T],
) -> KResult<()> {
    let include = attrs.count_include_pad;
    pool_planes(x, x_shape, attrs, out, |xp, offs, padded| {
        let s = offs.iter().fold(T::ZERO, |s, &o| s + xp[o]);
        s.div_count(if include { padded } else { offs.len() })
    })
}

/// MaxPool's Indices output: the flat index into X of each window's first maximum (in kernel
/// order), `plane * prod(spatial) + offset` with the offset row-major, or column-major with
/// `column_major` (`storage_order = 1`). A window with no in-bounds tap gives -1.
pub fn max_pool_indices<T: ReduceElem>(
    x: &[T],
    x_shape: &[usize],
    attrs: &PoolAttrs,
    column_major: bool,
    out: &mut [i64],
) -> KResult<()> {
    let sp = &x_shape[2..];
    let in_plane: usize = sp.iter().product();
    pool_planes(x, x_shape, attrs, out, |xp, offs, _| {
        let mut best: Option<usize> = None;
        for &o in offs {
            if best.is_none_or(|b| xp[o] > xp[b]) {
                best = Some(o);
            }
        }
        let Some(b) = best else { return -1 };
        if !column_major {
            return b as i64;
        }
        // Row-major offset to column-major.
        let (mut t, mut cm, mut stride) = (b, 0usize, 1usize);
        let mut idx = [0usize; 8];
        for a in (0..sp.len()).rev() {
            idx[a] = t % sp[a];
            t /= sp[a];
        }
        for a in 0..sp.len() {
            cm += idx[a] * stride;
            stride *= sp[a];
        }
        cm as i64
    })?;
    let out_plane = out.len() / (x_shape[0] * x_shape[1]).max(1);
    if out_plane > 0 {
        for (pi, chunk) in out.chunks_mut(out_plane).enumerate() {
            for v in chunk.iter_mut().filter(|v| **v >= 0) {
                *v += (pi * in_plane) as i64;
            }
        }
    }
    Ok(())
}

/// ONNX LpPool: `(sum |x|^p)^(1/p)` over the window's in-bounds taps, in kernel order, in f64.
pub fn lp_pool<T: ReduceElem + super::real::Real>(
    x: &[T],
    x_shape: &[usize],
    attrs: &PoolAttrs,
    p: i32,
    out: &mut [T],
) -> KResult<()> {
    pool_planes(x, x_shape, attrs, out, |xp, offs, _| {
        T::put(lp_norm(offs.iter().map(|&o| xp[o].get()), p))
    })
}

/// `(sum |v|^p)^(1/p)`, summed in order.
pub fn lp_norm(v: impl Iterator<Item = f64>, p: i32) -> f64 {
    let s: f64 = v.map(|a| a.abs().powi(p)).sum();
    match p {
        1 => s,
        2 => s.sqrt(),
        _ => s.powf(1.0 / f64::from(p)),
    }
}

/// ONNX GlobalLpPool: [`lp_norm`] over each contiguous spatial plane.
pub fn global_lp_pool<T: super::real::Real>(
    x: &[T],
    x_shape: &[usize],
    p: i32,
    out: &mut [T],
) -> KResult<()> {
    let os = global_pool_out_shape(x_shape)?;
    check_len("global pool X", x.len(), x_shape)?;
    check_len("global pool output", out.len(), &os)?;
    let plane: usize = x_shape[2..].iter().product();
    for (i, y) in out.iter_mut().enumerate() {
        *y = T::put(lp_norm(
            x[i * plane..(i + 1) * plane].iter().map(|v| v.get()),
            p,
        ));
    }
    Ok(())
}

/// Output shape of the global pools: `[N, C, 1, ..]`.
pub fn global_pool_out_shape(x_shape: &[usize]) -> KResult<Vec<usize>> {
    if x_shape.len() < 2 {
        return Err(shape_err(format!(
            "global pool needs rank >= 2, got {x_shape:?}"
        )));
    }
    let mut s = x_shape[..2].to_vec();
    s.extend(std::iter::repeat_n(1, x_shape.len() - 2));
    Ok(s)
}

fn global<T: ReduceElem>(op: ReduceOp, x: &[T], x_shape: &[usize], out: &mut [T]) -> KResult<()> {
    let os = global_pool_out_shape(x_shape)?;
    check_len("global pool X", x.len(), x_shape)?;
    check_len("global pool output", out.len(), &os)?;
    let plane: usize = x_shape[2..].iter().product();
    if out.is_empty() {
        return Ok(());
    }
    if plane == 0 {
        out.iter_mut().for_each(|y| *y = reduce_seq(op, &[]));
        return Ok(());
    }
    if x.len() >= 1 << 16 && rayon::current_num_threads() > 1 {
        out.par_iter_mut()
            .zip(x.par_chunks(plane))
            .for_each(|(y, xp)| *y = reduce_seq(op, xp));
    } else {
        out.iter_mut()
            .zip(x.chunks(plane))
            .for_each(|(y, xp)| *y = reduce_seq(op, xp));
    }
    Ok(())
}

/// ONNX GlobalAveragePool (mean over the spatial axes, canonical fold order).
pub fn global_average_pool<T: Float>(x: &[T], x_shape: &[usize], out: &mut [T]) -> KResult<()> {
    global(ReduceOp::Mean, x, x_shape, out)
}

/// ONNX GlobalMaxPool.
pub fn global_max_pool<T: ReduceElem>(x: &[T], x_shape: &[usize], out: &mut [T]) -> KResult<()> {
    global(ReduceOp::Max, x, x_shape, out)
}

#[cfg(test)]
mod tests {
    use super::super::matmul::testutil::*;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hand_computed_2d() {
        let x: Vec<f32> = (1..=16).map(|v| v as f32).collect();
        let a = PoolAttrs {
            kernel: vec![2, 2],
            strides: vec![2, 2],
            ..Default::default()
        };
        let mut y = [0.0f32; 4];
        max_pool(&x, &[1, 1, 4, 4], &a, &mut y).unwrap();
        assert_eq!(y, [6.0, 8.0, 14.0, 16.0]);
        average_pool(&x, &[1, 1, 4, 4], &a, &mut y).unwrap();
        assert_eq!(y, [3.5, 5.5, 11.5, 13.5]);
        // Padding: count_include_pad changes the divisor of border windows.
        let p = PoolAttrs {
            kernel: vec![3, 3],
            pads: vec![1, 1, 1, 1],
            ..Default::default()
        };
        let mut y16 = [0.0f32; 16];
        average_pool(&x, &[1, 1, 4, 4], &p, &mut y16).unwrap();
        assert_eq!(y16[0], (1.0 + 2.0 + 5.0 + 6.0) / 4.0);
        let pi = PoolAttrs {
            count_include_pad: true,
            ..p.clone()
        };
        average_pool(&x, &[1, 1, 4, 4], &pi, &mut y16).unwrap();
        assert_eq!(y16[0], (1.0 + 2.0 + 5.0 + 6.0) / 9.0);
        // ceil_mode: 5 wide, kernel 2, stride 2 -> 3 outputs, the last covering one element.
        let c = PoolAttrs {
            kernel: vec![2],
            strides: vec![2],
            ceil_mode: true,
            ..Default::default()
        };
        assert_eq!(pool_out_shape(&[1, 1, 5], &c).unwrap(), vec![1, 1, 3]);
        let mut y3 = [0.0f32; 3];
        max_pool(&[1.0, 5.0, 2.0, 0.0, 9.0], &[1, 1, 5], &c, &mut y3).unwrap();
        assert_eq!(y3, [5.0, 2.0, 9.0]);
        let fl = PoolAttrs {
            ceil_mode: false,
            ..c
        };
        assert_eq!(pool_out_shape(&[1, 1, 5], &fl).unwrap(), vec![1, 1, 2]);
        // Dilation 2 over 1-D: taps 0 and 2.
        let d = PoolAttrs {
            kernel: vec![2],
            dilations: vec![2],
            ..Default::default()
        };
        max_pool(&[1.0, 5.0, 2.0, 0.0, 9.0], &[1, 1, 5], &d, &mut y3).unwrap();
        assert_eq!(y3, [2.0, 5.0, 9.0]);
        let mut g = [0.0f32; 1];
        global_average_pool(&x, &[1, 1, 4, 4], &mut g).unwrap();
        assert_eq!(g[0], 8.5);
        global_max_pool(&x, &[1, 1, 4, 4], &mut g).unwrap();
        assert_eq!(g[0], 16.0);
        assert!(max_pool(
            &x,
            &[1, 1, 4, 4],
            &PoolAttrs {
                kernel: vec![2],
                ..Default::default()
            },
            &mut y
        )
        .is_err());
        assert!(max_pool(
            &x,
            &[1, 1, 4, 4],
            &PoolAttrs {
                kernel: vec![5, 5],
                ..Default::default()
            },
            &mut y
        )
        .is_err());
        assert!(global_average_pool(&x, &[1, 1, 4, 4], &mut y).is_err());
    }

    /// Brute-force 2-D reference in f64.
    fn naive(x: &[f32], xs: &[usize], a: &PoolAttrs, max: bool) -> Vec<f64> {
        let os = pool_out_shape(xs, a).unwrap();
        let win = Window::new(&a.kernel, &a.strides, &a.pads, &a.dilations).unwrap();
        let mut y = vec![];
        for pl in 0..xs[0] * xs[1] {
            for oh in 0..os[2] {
                for ow in 0..os[3] {
                    let (mut s, mut m, mut cnt, mut pc) =
                        (0.0f64, f64::NEG_INFINITY, 0usize, 0usize);
                    for kh in 0..a.kernel[0] {
                        for kw in 0..a.kernel[1] {
                            let (ih, iw) = (win.coord(0, oh, kh), win.coord(1, ow, kw));
                            let inpad = |c: isize, i: usize, d: usize| {
                                c >= -(win.pad_begin[i] as isize)
                                    && c < (d + win.pad_end[i]) as isize
                            };
                            if inpad(ih, 0, xs[2]) && inpad(iw, 1, xs[3]) {
                                pc += 1;
                            }
                            if ih >= 0 && iw >= 0 && (ih as usize) < xs[2] && (iw as usize) < xs[3]
                            {
                                let v = x[(pl * xs[2] + ih as usize) * xs[3] + iw as usize] as f64;
                                s += v;
                                m = m.max(v);
                                cnt += 1;
                            }
                        }
                    }
                    y.push(if max {
                        m
                    } else {
                        s / if a.count_include_pad { pc } else { cnt } as f64
                    });
                }
            }
        }
        y
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn pool_matches_naive_and_chunks(n in 1usize..3, c in 1usize..4, h in 1usize..9, w in 1usize..9,
                                         kh in 1usize..4, kw in 1usize..4, s in 1usize..3, pd in 0usize..2,
                                         dl in 1usize..3, ceil in any::<bool>(), incl in any::<bool>(),
                                         cut in 0usize..1000, seed in 0u64..1000) {
            let a = PoolAttrs { kernel: vec![kh, kw], strides: vec![s, s], pads: vec![pd, 0, pd, pd],
                                dilations: vec![dl, 1], ceil_mode: ceil, count_include_pad: incl };
            let xs = [n, c, h, w];
            let Ok(os) = pool_out_shape(&xs, &a) else { return Ok(()); };
            if pd >= kh || pd >= kw { return Ok(()); }
            let x = rand_vec(xs.iter().product(), seed);
            let len: usize = os.iter().product();
            let (mut ym, mut ya) = (vec![0.0f32; len], vec![0.0f32; len]);
            max_pool(&x, &xs, &a, &mut ym).unwrap();
            average_pool(&x, &xs, &a, &mut ya).unwrap();
            for (g, r) in ym.iter().zip(naive(&x, &xs, &a, true)) {
                prop_assert!(*g as f64 == r || (r.is_infinite() && g.is_infinite()));
            }
            for (g, r) in ya.iter().zip(naive(&x, &xs, &a, false)) {
                prop_assert!((*g as f64 - r).abs() < 1e-5 || (r.is_nan() && g.is_nan()));
            }
            let gs = global_pool_out_shape(&xs).unwrap();
            let mut gfull = vec![0.0f32; n * c];
            global_average_pool(&x, &xs, &mut gfull).unwrap();
            for ax in 0..2usize {
                let d = xs[ax];
                let s0 = cut % d;
                let s1 = s0 + (cut / 7) % (d - s0) + 1;
                let xsl = slice_axis(&x, &xs, ax, s0, s1);
                let ss = with_dim(&xs, ax, s1 - s0);
                let plen = len / d * (s1 - s0);
                let (mut pm, mut pa) = (vec![0.0f32; plen], vec![0.0f32; plen]);
                max_pool(&xsl, &ss, &a, &mut pm).unwrap();
                average_pool(&xsl, &ss, &a, &mut pa).unwrap();
                prop_assert!(same_bits(&pm, &slice_axis(&ym, &os, ax, s0, s1)));
                prop_assert!(same_bits(&pa, &slice_axis(&ya, &os, ax, s0, s1)));
                let mut gp = vec![0.0f32; gfull.len() / d * (s1 - s0)];
                global_average_pool(&xsl, &ss, &mut gp).unwrap();
                prop_assert!(same_bits(&gp, &slice_axis(&gfull, &gs, ax, s0, s1)));
            }
        }
    }
}
