//! Boxes and sampling grids: NonMaxSuppression, AffineGrid, CenterCropPad.
//!
//! Scratch: NonMaxSuppression holds one class's selected box indices, `8 * N` bytes (N boxes),
//! for the whole run; the others none.

use memplan_ir::DataType;

use super::{fail, opt, raw, raw_mut, req, unsupported, OpCtx, OpFail, OpFn};
use crate::kernels::real::Real;
use crate::tensor::{elem_size, Tensor};

pub const OPS: &[(&str, OpFn)] = &[
    ("NonMaxSuppression", nms),
    ("AffineGrid", affine_grid),
    ("CenterCropPad", center_crop_pad),
    ("RoiAlign", roi_align),
];

/// The most bilinear samples one roi may take (its bins times the samples per bin), so that an
/// absurd `sampling_ratio`, `spatial_scale` or roi is an error rather than a run that never ends.
const MAX_ROI_SAMPLES: u128 = 1 << 32;

/// RoiAlign over X `[N, C, H, W]`, rois `[R, 4]` (`x1, y1, x2, y2`), batch_indices `[R]`: each
/// output bin averages (or takes the max of) `sampling_ratio^2` bilinear samples (adaptive,
/// `ceil(roi / bins)`, when 0); onnxruntime's sampling rules, computed per output in f64.
fn roi_align(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, rois, bi) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    if x.rank() != 4 || rois.rank() != 2 || rois.shape[1] != 4 || bi.shape != [rois.shape[0]] {
        return fail(format!(
            "RoiAlign needs X [N,C,H,W], rois [R,4], batch_indices [R]; got {:?}, {:?}, {:?}",
            x.shape, rois.shape, bi.shape
        ));
    }
    if rois.dtype != x.dtype {
        return fail("rois must have X's type");
    }
    let (nb, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let r = rois.shape[0];
    let pos = |name: &str| -> Result<usize, OpFail> {
        usize::try_from(ctx.int(name, 1)?)
            .ok()
            .filter(|&v| v >= 1)
            .ok_or_else(|| OpFail::Invalid(format!("{name} must be >= 1")))
    };
    let (oh, ow) = (pos("output_height")?, pos("output_width")?);
    let ratio = usize::try_from(ctx.int("sampling_ratio", 0)?)
        .map_err(|_| OpFail::Invalid("sampling_ratio must be >= 0".into()))?;
    let scale = f64::from(ctx.float("spatial_scale", 1.0)?);
    let max = match ctx.string("mode")?.as_deref() {
        None | Some("avg") => false,
        Some("max") => true,
        Some(m) => return fail(format!("mode '{m}' is not avg or max")),
    };
    let half = match ctx.string("coordinate_transformation_mode")?.as_deref() {
        None => ctx.opset >= 16,
        Some("half_pixel") => true,
        Some("output_half_pixel") => false,
        Some(m) => return fail(format!("coordinate_transformation_mode '{m}' is unknown")),
    };
    let batch = bi.to_i64_vec()?;
    let mut out = ctx.alloc_for_overwrite(x.dtype, &[r, c, oh, ow])?;
    crate::real_dispatch!(
        x.dtype,
        T => {
            let (xs, rs, o) = (x.data::<T>()?, rois.data::<T>()?, out.data_mut::<T>()?);
            for n in 0..r {
                let b = usize::try_from(batch[n]).ok().filter(|&b| b < nb).ok_or_else(|| {
                    OpFail::Invalid(format!("batch index {} is outside [0, {nb})", batch[n]))
                })?;
                let off = if half { 0.5 } else { 0.0 };
                let v = |k: usize| rs[n * 4 + k].get() * scale - off;
                let (x0, y0) = (v(0), v(1));
                let (mut rw, mut rh) = (v(2) - x0, v(3) - y0);
                if !half {
                    rw = rw.max(1.0);
                    rh = rh.max(1.0);
                }
                let (bh, bw) = (rh / oh as f64, rw / ow as f64);
                let gh = if ratio > 0 { ratio } else { (rh / oh as f64).ceil() as usize };
                let gw = if ratio > 0 { ratio } else { (rw / ow as f64).ceil() as usize };
                let samples = (gh as u128) * (gw as u128) * (oh * ow * c) as u128;
                if samples > MAX_ROI_SAMPLES {
                    return fail(format!(
                        "roi {n} takes {gh} x {gw} samples per bin ({samples} in all; \
                         sampling_ratio, spatial_scale or the roi's size): at most \
                         {MAX_ROI_SAMPLES} per roi are computed"
                    ));
                }
                let count = (gh * gw).max(1) as f64;
                for ch in 0..c {
                    let plane = &xs[(b * c + ch) * h * w..(b * c + ch + 1) * h * w];
                    for ph in 0..oh {
                        for pw in 0..ow {
                            let mut acc: Option<f64> = None;
                            for iy in 0..gh {
                                let yy = y0 + ph as f64 * bh + (iy as f64 + 0.5) * bh / gh as f64;
                                for ix in 0..gw {
                                    let xx = x0 + pw as f64 * bw + (ix as f64 + 0.5) * bw / gw as f64;
                                    let taps = bilinear(yy, xx, h, w);
                                    let val = if max {
                                        taps.iter()
                                            .map(|&(p, wt)| wt * plane[p].get())
                                            .fold(f64::NEG_INFINITY, f64::max)
                                    } else {
                                        taps.iter().map(|&(p, wt)| wt * plane[p].get()).sum()
                                    };
                                    acc = Some(match acc {
                                        None => val,
                                        Some(a) if max => a.max(val),
                                        Some(a) => a + val,
                                    });
                                }
                            }
                            let a = acc.unwrap_or(0.0);
                            o[((n * c + ch) * oh + ph) * ow + pw] =
                                T::put(if max { a } else { a / count });
                        }
                    }
                }
            }
        },
        return unsupported(format!("RoiAlign on {}", x.dtype))
    );
    Ok(vec![out])
}

/// The four `(offset, weight)` taps of a bilinear sample at `(y, x)` in an `h x w` plane (all
/// weights 0 outside `[-1, h] x [-1, w]`), clamped at the border as onnxruntime does.
fn bilinear(y: f64, x: f64, h: usize, w: usize) -> [(usize, f64); 4] {
    if y < -1.0 || y > h as f64 || x < -1.0 || x > w as f64 {
        return [(0, 0.0); 4];
    }
    let (mut y, mut x) = (y.max(0.0), x.max(0.0));
    let (mut yl, mut xl) = (y as usize, x as usize);
    let yh = if yl >= h - 1 {
        yl = h - 1;
        y = yl as f64;
        yl
    } else {
        yl + 1
    };
    let xh = if xl >= w - 1 {
        xl = w - 1;
        x = xl as f64;
        xl
    } else {
        xl + 1
    };
    let (ly, lx) = (y - yl as f64, x - xl as f64);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    [
        (yl * w + xl, hy * hx),
        (yl * w + xh, hy * lx),
        (yh * w + xl, ly * hx),
        (yh * w + xh, ly * lx),
    ]
}

/// A float scalar operand (first element), as f64.
fn scalar_f64(t: &Tensor, what: &str) -> Result<f64, OpFail> {
    if t.numel() == 0 {
        return fail(format!("{what} is empty"));
    }
    crate::real_dispatch!(
        t.dtype,
        T => Ok(t.data::<T>()?[0].get()),
        fail(format!("{what} must be a float tensor, got {}", t.dtype))
    )
}

/// `(x_min, y_min, x_max, y_max)` of box `b`: corners `[y1, x1, y2, x2]` in either order, or
/// `[x_center, y_center, width, height]`.
fn corners(b: [f64; 4], center: bool) -> (f64, f64, f64, f64) {
    if center {
        let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
        (b[0] - hw, b[1] - hh, b[0] + hw, b[1] + hh)
    } else {
        (
            b[1].min(b[3]),
            b[0].min(b[2]),
            b[1].max(b[3]),
            b[0].max(b[2]),
        )
    }
}

/// Whether the IoU of two boxes exceeds `thr` (onnxruntime's rule: boxes without a positive
/// intersection or area never suppress).
fn suppresses(a: (f64, f64, f64, f64), b: (f64, f64, f64, f64), thr: f64) -> bool {
    let (ix0, ix1) = (a.0.max(b.0), a.2.min(b.2));
    let (iy0, iy1) = (a.1.max(b.1), a.3.min(b.3));
    if ix1 <= ix0 || iy1 <= iy0 {
        return false;
    }
    let inter = (ix1 - ix0) * (iy1 - iy0);
    let area_a = (a.2 - a.0) * (a.3 - a.1);
    let area_b = (b.2 - b.0) * (b.3 - b.1);
    let union = area_a + area_b - inter;
    if inter <= 0.0 || area_a <= 0.0 || area_b <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > thr
}

/// NonMaxSuppression: per (batch, class), boxes in order of decreasing score (ties: lower index
/// first), scores above `score_threshold` when given, each kept unless its IoU with a kept box of
/// that class exceeds `iou_threshold`, at most `max_output_boxes_per_class`. The next candidate is
/// found by a scan (no sorted copy); the kept indices of the current class are in scratch. One pass
/// counts the selections, a second writes them.
fn nms(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (boxes, scores) = (req(inputs, 0)?, req(inputs, 1)?);
    if boxes.rank() != 3 || boxes.shape[2] != 4 || scores.rank() != 3 {
        return fail(format!(
            "boxes {:?} must be [B, N, 4] and scores {:?} [B, C, N]",
            boxes.shape, scores.shape
        ));
    }
    let (nb, n) = (boxes.shape[0], boxes.shape[1]);
    let nc = scores.shape[1];
    if scores.shape[0] != nb || scores.shape[2] != n {
        return fail("boxes and scores disagree on B or N");
    }
    let max_out = match opt(inputs, 2) {
        Some(t) if t.numel() > 0 => t.to_i64_vec()?[0].max(0) as usize,
        _ => 0,
    };
    let iou = match opt(inputs, 3) {
        Some(t) if t.numel() > 0 => scalar_f64(t, "iou_threshold")?,
        _ => 0.0,
    };
    let score_thr = match opt(inputs, 4) {
        Some(t) if t.numel() > 0 => Some(scalar_f64(t, "score_threshold")?),
        _ => None,
    };
    let center = match ctx.int("center_point_box", 0)? {
        0 => false,
        1 => true,
        v => return fail(format!("center_point_box {v} must be 0 or 1")),
    };
    if scores.dtype != boxes.dtype {
        return fail("boxes and scores must share one type");
    }
    let mut kept = ctx.scratch::<u64>(n)?;
    let kept = kept.as_mut_slice();
    // Runs the selection of every (batch, class), handing each one's kept indices to `emit`.
    let mut run = |emit: &mut dyn FnMut(usize, usize, &[u64])| -> Result<(), OpFail> {
        for b in 0..nb {
            for c in 0..nc {
                let count = crate::real_dispatch!(
                    boxes.dtype,
                    T => {
                        let bx = boxes.data::<T>()?;
                        let sc = &scores.data::<T>()?[(b * nc + c) * n..(b * nc + c + 1) * n];
                        let get_box = |i: usize| {
                            let o = (b * n + i) * 4;
                            let v = [bx[o].get(), bx[o + 1].get(), bx[o + 2].get(), bx[o + 3].get()];
                            corners(v, center)
                        };
                        select(
                            |i| sc[i].get(),
                            n,
                            max_out,
                            score_thr,
                            |i, j| suppresses(get_box(i), get_box(j), iou),
                            kept,
                        )
                    },
                    return unsupported(format!("NonMaxSuppression on {}", boxes.dtype))
                );
                emit(b, c, &kept[..count]);
            }
        }
        Ok(())
    };
    let mut total = 0usize;
    run(&mut |_, _, k| total += k.len())?;
    let mut out = ctx.alloc_for_overwrite(DataType::I64, &[total, 3])?;
    let rows = out.data_mut::<i64>()?;
    let mut row = 0;
    run(&mut |b, c, k| {
        for &i in k {
            rows[3 * row..3 * row + 3].copy_from_slice(&[b as i64, c as i64, i as i64]);
            row += 1;
        }
    })?;
    Ok(vec![out])
}

/// Greedy selection over `n` candidates into `kept` (their indices, in selection order); returns
/// the count.
fn select(
    score: impl Fn(usize) -> f64,
    n: usize,
    max_out: usize,
    thr: Option<f64>,
    suppress: impl Fn(usize, usize) -> bool,
    kept: &mut [u64],
) -> usize {
    let eligible = |i: usize| thr.is_none_or(|t| score(i) > t);
    // `a` comes before `b`: higher score, then lower index.
    let before = |a: usize, b: usize| {
        let (sa, sb) = (score(a), score(b));
        sa > sb || (sa == sb && a < b)
    };
    let mut count = 0;
    let mut prev: Option<usize> = None;
    while count < max_out {
        let mut next: Option<usize> = None;
        for i in 0..n {
            if !eligible(i) || prev.is_some_and(|p| !before(p, i)) {
                continue;
            }
            if next.is_none_or(|j| before(i, j)) {
                next = Some(i);
            }
        }
        let Some(i) = next else { break };
        if !kept[..count].iter().any(|&k| suppress(i, k as usize)) {
            kept[count] = i as u64;
            count += 1;
        }
        prev = Some(i);
    }
    count
}

/// AffineGrid: `grid[n, .., r] = sum_j theta[n, r, j] * base_j` with `base = (x, y[, z], 1)`, the
/// normalized coordinates of each output position (x along the last axis): `-1 + 2i/(d-1)` with
/// `align_corners` (-1 when `d == 1`), else `-1 + (2i+1)/d`.
fn affine_grid(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let theta = req(inputs, 0)?;
    let size = super::dims_of(req(inputs, 1)?, "size")?;
    let nd = match size.len() {
        4 => 2,
        5 => 3,
        k => return fail(format!("size has {k} entries, needs 4 or 5")),
    };
    let n = size[0];
    if theta.shape != [n, nd, nd + 1] {
        return fail(format!(
            "theta {:?} must be [{n}, {nd}, {}]",
            theta.shape,
            nd + 1
        ));
    }
    let align = ctx.int("align_corners", 0)? != 0;
    let sp = &size[2..];
    let mut oshape = vec![n];
    oshape.extend_from_slice(sp);
    oshape.push(nd);
    let mut out = ctx.alloc_for_overwrite(theta.dtype, &oshape)?;
    let coord = |i: usize, d: usize| -> f64 {
        if align {
            if d <= 1 {
                -1.0
            } else {
                -1.0 + 2.0 * i as f64 / (d - 1) as f64
            }
        } else {
            -1.0 + (2 * i + 1) as f64 / d as f64
        }
    };
    let plane: usize = sp.iter().product();
    crate::real_dispatch!(
        theta.dtype,
        T => {
            let th = theta.data::<T>()?;
            let o = out.data_mut::<T>()?;
            let mut base = [0.0f64; 4];
            for b in 0..n {
                for p in 0..plane {
                    // base = (x, y[, z], 1): x from the last spatial axis.
                    let mut t = p;
                    for a in (0..nd).rev() {
                        base[nd - 1 - a] = coord(t % sp[a], sp[a]);
                        t /= sp[a];
                    }
                    base[nd] = 1.0;
                    for r in 0..nd {
                        let row = &th[(b * nd + r) * (nd + 1)..(b * nd + r + 1) * (nd + 1)];
                        let v: f64 = row.iter().zip(&base).map(|(w, x)| w.get() * x).sum();
                        o[(b * plane + p) * nd + r] = T::put(v);
                    }
                }
            }
        },
        return unsupported(format!("AffineGrid on {}", theta.dtype))
    );
    Ok(vec![out])
}

/// CenterCropPad: per axis in `axes` (default all) to the extent in `shape`, cropping
/// `(d - s) / 2` elements at the start or padding `(s - d) / 2` zeros there; moves element bits.
fn center_crop_pad(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let shape = super::dims_of(req(inputs, 1)?, "shape")?;
    let r = x.rank();
    let axes: Vec<usize> = match ctx.ints("axes")? {
        Some(a) => a
            .iter()
            .map(|&a| super::axis(a, r))
            .collect::<Result<_, _>>()?,
        None => (0..r).collect(),
    };
    if axes.len() != shape.len() {
        return fail(format!(
            "shape has {} entries for {} axes",
            shape.len(),
            axes.len()
        ));
    }
    let mut oshape = x.shape.clone();
    for (&a, &s) in axes.iter().zip(&shape) {
        oshape[a] = s;
    }
    // Source index = output index + shift (per axis).
    let shift: Vec<isize> = (0..r)
        .map(|a| {
            let (d, s) = (x.shape[a] as isize, oshape[a] as isize);
            if s <= d {
                (d - s) / 2
            } else {
                -((s - d) / 2)
            }
        })
        .collect();
    let mut out = ctx.alloc(x.dtype, &oshape)?;
    let istr = crate::kernels::movement::istrides(&x.shape);
    by_size!(elem_size(x.dtype)?, T => {
        let (src, dst) = (raw::<T>(x)?, raw_mut::<T>(&mut out)?);
        let mut idx = vec![0usize; r];
        for (o, slot) in dst.iter_mut().enumerate() {
            let mut t = o;
            for a in (0..r).rev() {
                idx[a] = t % oshape[a];
                t /= oshape[a];
            }
            let mut off = 0isize;
            let mut inside = true;
            for a in 0..r {
                let i = idx[a] as isize + shift[a];
                if i < 0 || i >= x.shape[a] as isize {
                    inside = false;
                    break;
                }
                off += i * istr[a];
            }
            if inside {
                *slot = src[off as usize];
            }
        }
    });
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use crate::ops::testutil::*;
    use memplan_ir::graph::AttrValue;

    #[test]
    fn nms_and_center_crop_pad_by_hand() {
        // Boxes 0 and 1 overlap (IoU 0.81), box 2 is apart: 1 is suppressed.
        let boxes = t_f32(
            &[1, 3, 4],
            &[0., 0., 1., 1., 0., 0.1, 1., 1.1, 0., 5., 1., 6.],
        );
        let scores = t_f32(&[1, 1, 3], &[0.9, 0.8, 0.7]);
        let max = t_i64(&[1], &[3]);
        let iou = t_f32(&[1], &[0.5]);
        let o = run_op(
            "NonMaxSuppression",
            &[],
            &[Some(&boxes), Some(&scores), Some(&max), Some(&iou)],
            1,
        )
        .unwrap();
        assert_eq!(o[0].shape, [2, 3]);
        assert_eq!(o[0].data::<i64>().unwrap(), &[0, 0, 0, 0, 0, 2]);
        // Crop 4 -> 2 keeps the middle; pad 1 -> 3 centers with zeros.
        let x = t_f32(&[4], &[1., 2., 3., 4.]);
        let s = t_i64(&[1], &[2]);
        let o = run_op("CenterCropPad", &[], &[Some(&x), Some(&s)], 1).unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[2., 3.]);
        let x = t_f32(&[1], &[7.]);
        let s = t_i64(&[1], &[3]);
        let o = run_op("CenterCropPad", &[], &[Some(&x), Some(&s)], 1).unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[0., 7., 0.]);
        let theta = t_f32(&[1, 2, 3], &[1., 0., 0., 0., 1., 0.]);
        let size = t_i64(&[4], &[1, 1, 1, 2]);
        let o = run_op(
            "AffineGrid",
            &[("align_corners", AttrValue::Int(1))],
            &[Some(&theta), Some(&size)],
            1,
        )
        .unwrap();
        assert_eq!(o[0].data::<f32>().unwrap(), &[-1., -1., 1., -1.]);
    }
}
