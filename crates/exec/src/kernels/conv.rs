//! Kernels: N-D Conv (NCHW-style layout: `[N, C, D1..Dk]`) with group, pads, strides, dilations and
//! optional bias, as im2col + GEMM per (batch, group), over tiles of whole output lines, or of parts
//! of one line where a line alone is over the tile (the im2col buffer is one tile,
//! [`COL_TILE_ELEMS`]); also the auto_pad resolution shared with pooling.
//!
//! Each output element is one GEMM dot product over `C/group * prod(kernel)` in a fixed order (see
//! `matmul`), plus the bias added afterwards, so splitting the batch, the groups or the output channels
//! (rows of the GEMM) gives bit-identical results. A 1x1/stride-1/unpadded conv feeds the input directly
//! to the GEMM; the values, and so the bits, are the same as through im2col.

use super::matmul::{
    check_len, gemm_block, par_rows, shape_err, GemmFloat, KResult, KernelError, MatRef,
};
use rayon::prelude::*;

/// ONNX `auto_pad`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AutoPad {
    /// Use the explicit `pads`.
    #[default]
    NotSet,
    /// Output `ceil(D / s)`, extra padding at the end.
    SameUpper,
    /// Output `ceil(D / s)`, extra padding at the beginning.
    SameLower,
    /// No padding.
    Valid,
}

/// Resolves `auto_pad` to explicit pads `[b1..bk, e1..ek]` for the given spatial input sizes.
pub fn resolve_pads(
    auto_pad: AutoPad,
    pads: &[usize],
    input: &[usize],
    kernel: &[usize],
    strides: &[usize],
    dilations: &[usize],
) -> KResult<Vec<usize>> {
    let nd = input.len();
    match auto_pad {
        AutoPad::NotSet => {
            if pads.is_empty() {
                Ok(vec![0; 2 * nd])
            } else if pads.len() == 2 * nd {
                Ok(pads.to_vec())
            } else {
                Err(KernelError::Attribute(format!(
                    "pads needs {} values, got {}",
                    2 * nd,
                    pads.len()
                )))
            }
        }
        AutoPad::Valid => Ok(vec![0; 2 * nd]),
        AutoPad::SameUpper | AutoPad::SameLower => {
            let mut p = vec![0; 2 * nd];
            for i in 0..nd {
                let s = strides.get(i).copied().unwrap_or(1).max(1);
                let d = dilations.get(i).copied().unwrap_or(1).max(1);
                let out = input[i].div_ceil(s);
                let eff = (kernel[i].saturating_sub(1)) * d + 1;
                let total = ((out.saturating_sub(1)) * s + eff).saturating_sub(input[i]);
                let small = total / 2;
                let (b, e) = if auto_pad == AutoPad::SameUpper {
                    (small, total - small)
                } else {
                    (total - small, small)
                };
                p[i] = b;
                p[nd + i] = e;
            }
            Ok(p)
        }
    }
}

/// Attributes of Conv with explicit pads (see [`resolve_pads`]). Empty vectors mean the defaults
/// (strides and dilations 1, pads 0).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConvAttrs {
    /// Number of groups (0 is read as 1).
    pub group: usize,
    /// Strides per spatial axis.
    pub strides: Vec<usize>,
    /// Pads `[b1..bk, e1..ek]`.
    pub pads: Vec<usize>,
    /// Dilations per spatial axis.
    pub dilations: Vec<usize>,
}

/// Spatial window geometry shared by Conv and the pooling kernels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// Kernel extent per spatial axis.
    pub kernel: Vec<usize>,
    /// Stride per spatial axis.
    pub strides: Vec<usize>,
    /// Pads at the beginning of each spatial axis.
    pub pad_begin: Vec<usize>,
    /// Pads at the end of each spatial axis.
    pub pad_end: Vec<usize>,
    /// Dilation per spatial axis.
    pub dilations: Vec<usize>,
}

/// The largest kernel extent, stride, dilation or pad a window accepts.
pub const MAX_WINDOW: usize = 1 << 31;

impl Window {
    /// A 1x1 kernel with unit strides and no padding: the input is the GEMM's right operand as it
    /// is, no im2col.
    pub fn is_direct(&self) -> bool {
        self.kernel.iter().all(|&k| k == 1)
            && self.strides.iter().all(|&s| s == 1)
            && self.pad_begin.iter().chain(&self.pad_end).all(|&q| q == 0)
    }

    /// Builds and validates a window; empty `strides`/`pads`/`dilations` take the defaults.
    pub fn new(
        kernel: &[usize],
        strides: &[usize],
        pads: &[usize],
        dilations: &[usize],
    ) -> KResult<Self> {
        let nd = kernel.len();
        let fill = |v: &[usize], def: usize, name: &str| -> KResult<Vec<usize>> {
            if v.is_empty() {
                Ok(vec![def; nd])
            } else if v.len() == nd {
                Ok(v.to_vec())
            } else {
                Err(KernelError::Attribute(format!(
                    "{name} needs {nd} values, got {}",
                    v.len()
                )))
            }
        };
        let strides = fill(strides, 1, "strides")?;
        let dilations = fill(dilations, 1, "dilations")?;
        if strides.contains(&0) || dilations.contains(&0) || kernel.contains(&0) {
            return Err(KernelError::Attribute(
                "kernel, strides and dilations must be >= 1".into(),
            ));
        }
        let pads = if pads.is_empty() {
            vec![0; 2 * nd]
        } else {
            pads.to_vec()
        };
        // Bounded so that window arithmetic (extents, coordinates) cannot overflow.
        if [kernel, &strides, &dilations, &pads]
            .iter()
            .any(|v| v.iter().any(|&x| x > MAX_WINDOW))
        {
            return Err(KernelError::Attribute(format!(
                "kernel, strides, dilations and pads must be at most {MAX_WINDOW}"
            )));
        }
        if pads.len() != 2 * nd {
            return Err(KernelError::Attribute(format!(
                "pads needs {} values, got {}",
                2 * nd,
                pads.len()
            )));
        }
        Ok(Window {
            kernel: kernel.to_vec(),
            strides,
            pad_begin: pads[..nd].to_vec(),
            pad_end: pads[nd..].to_vec(),
            dilations,
        })
    }

    /// Output extent along axis `i` for input extent `d` (floor, or ceil with the ONNX rule that the
    /// last window must start inside the input or the begin padding).
    pub fn out_dim(&self, i: usize, d: usize, ceil_mode: bool) -> KResult<usize> {
        let eff = (self.kernel[i] - 1) * self.dilations[i] + 1;
        let padded = d + self.pad_begin[i] + self.pad_end[i];
        if padded < eff {
            return Err(shape_err(format!(
                "window extent {eff} exceeds padded input {padded} on axis {i}"
            )));
        }
        let s = self.strides[i];
        let span = padded - eff;
        let mut o = if ceil_mode {
            span.div_ceil(s) + 1
        } else {
            span / s + 1
        };
        if ceil_mode && (o - 1) * s >= d + self.pad_begin[i] {
            o -= 1;
        }
        Ok(o)
    }

    /// Input coordinate of tap `k` of output position `o` on axis `i` (may be outside `0..d`).
    #[inline(always)]
    pub fn coord(&self, i: usize, o: usize, k: usize) -> isize {
        (o * self.strides[i] + k * self.dilations[i]) as isize - self.pad_begin[i] as isize
    }
}

/// Shape checks of Conv; returns `(window, group, output shape)`.
pub fn conv_geometry(
    x_shape: &[usize],
    w_shape: &[usize],
    attrs: &ConvAttrs,
) -> KResult<(Window, usize, Vec<usize>)> {
    if x_shape.len() < 3 || w_shape.len() != x_shape.len() {
        return Err(shape_err(format!(
            "Conv needs X [N,C,D..] and W of the same rank, got {x_shape:?} / {w_shape:?}"
        )));
    }
    let group = attrs.group.max(1);
    let (c, m) = (x_shape[1], w_shape[0]);
    if c % group != 0 || m % group != 0 || w_shape[1] * group != c {
        return Err(shape_err(format!(
            "Conv channels do not fit group {group}: X {x_shape:?}, W {w_shape:?}"
        )));
    }
    let win = Window::new(&w_shape[2..], &attrs.strides, &attrs.pads, &attrs.dilations)?;
    let mut out = vec![x_shape[0], m];
    for (i, &d) in x_shape[2..].iter().enumerate() {
        out.push(win.out_dim(i, d, false)?);
    }
    Ok((win, group, out))
}

/// Output shape of Conv.
pub fn conv_out_shape(
    x_shape: &[usize],
    w_shape: &[usize],
    attrs: &ConvAttrs,
) -> KResult<Vec<usize>> {
    Ok(conv_geometry(x_shape, w_shape, attrs)?.2)
}

/// Fills `col` (`[cg * prod(kernel), cols.len()]`) from `xg` (`[cg, in_sp..]`): the columns of the
/// output positions `cols` (row-major over the output spatial axes; a range may start and end
/// inside a line, the `ol` positions along the last axis with the outer axes fixed).
fn im2col<T: GemmFloat>(
    xg: &[T],
    in_sp: &[usize],
    out_sp: &[usize],
    win: &Window,
    cols: std::ops::Range<usize>,
    col: &mut [T],
) {
    let nd = in_sp.len();
    let kn: usize = win.kernel.iter().product();
    let plane: usize = in_sp.iter().product();
    let ol = out_sp[nd - 1];
    let p = cols.len();
    if p == 0 || ol == 0 {
        return;
    }
    let fill_row = |r: usize, row: &mut [T]| {
        let c = r / kn;
        let mut kr = r % kn;
        let mut kslot = vec![0usize; nd];
        for i in (0..nd).rev() {
            kslot[i] = kr % win.kernel[i];
            kr /= win.kernel[i];
        }
        let xp = &xg[c * plane..(c + 1) * plane];
        let mut q = cols.start;
        while q < cols.end {
            // The part of one line: positions `ow0..ow0 + n` of line `q / ol`.
            let ow0 = q % ol;
            let n = (ol - ow0).min(cols.end - q);
            let dst = &mut row[q - cols.start..q - cols.start + n];
            // Decode the outer output position and the input offset of the line.
            let mut t = q / ol;
            q += n;
            let mut base = 0usize;
            let mut stride = in_sp[nd - 1];
            let mut valid = true;
            for i in (0..nd - 1).rev() {
                let o = t % out_sp[i];
                t /= out_sp[i];
                let pos = win.coord(i, o, kslot[i]);
                if pos < 0 || pos as usize >= in_sp[i] {
                    valid = false;
                    break;
                }
                base += pos as usize * stride;
                stride *= in_sp[i];
            }
            if !valid {
                dst.fill(T::ZERO);
                continue;
            }
            let last = nd - 1;
            let dlen = in_sp[last] as isize;
            for (i, v) in dst.iter_mut().enumerate() {
                let iw = win.coord(last, ow0 + i, kslot[last]);
                *v = if iw >= 0 && iw < dlen {
                    xp[base + iw as usize]
                } else {
                    T::ZERO
                };
            }
        }
    };
    if col.len() >= 1 << 16 && rayon::current_num_threads() > 1 {
        col.par_chunks_mut(p)
            .enumerate()
            .for_each(|(r, row)| fill_row(r, row));
    } else {
        for (r, row) in col.chunks_exact_mut(p).enumerate() {
            fill_row(r, row);
        }
    }
}

/// Elements of one im2col tile: the columns of whole output lines, as many lines as keep the tile
/// within this many elements; where one line is over it (a long 1-D signal), as many positions of
/// a line as keep it within (one at least). The GEMM runs tile by tile, so the buffer stays this
/// small whatever the input; each output element is the same dot product either way.
pub const COL_TILE_ELEMS: usize = 1 << 20;

/// Columns (output positions) of one im2col tile for `kdim` rows over the output spatial extents
/// `out_sp`: see [`COL_TILE_ELEMS`]; no more than the output has. The memory rule of `Conv`
/// (`memplan_ir`) states the same formula.
pub fn col_tile(kdim: usize, out_sp: &[usize]) -> usize {
    let ol = out_sp.last().copied().unwrap_or(1).max(1);
    let lines = COL_TILE_ELEMS / kdim.saturating_mul(ol).max(1);
    let cols = if lines >= 1 {
        lines * ol
    } else {
        (COL_TILE_ELEMS / kdim.max(1)).max(1)
    };
    out_sp.iter().product::<usize>().min(cols)
}

/// Elements of the im2col buffer [`conv_with_col`] needs: `C/group * prod(kernel)` rows of one
/// tile's columns ([`col_tile`]), or 0 for a 1x1, stride-1, unpadded kernel (which reads X
/// directly).
pub fn conv_col_len(x_shape: &[usize], w_shape: &[usize], attrs: &ConvAttrs) -> KResult<usize> {
    let (win, group, out_shape) = conv_geometry(x_shape, w_shape, attrs)?;
    if win.is_direct() {
        return Ok(0);
    }
    let kdim = x_shape[1] / group * win.kernel.iter().product::<usize>();
    Ok(kdim * col_tile(kdim, &out_shape[2..]))
}

/// ONNX Conv (explicit pads; see [`resolve_pads`] for auto_pad). `out` holds `conv_out_shape` elements.
/// Allocates its im2col buffer on the heap; the executor uses [`conv_with_col`].
pub fn conv<T: GemmFloat>(
    x: &[T],
    x_shape: &[usize],
    w: &[T],
    w_shape: &[usize],
    bias: Option<&[T]>,
    attrs: &ConvAttrs,
    out: &mut [T],
) -> KResult<()> {
    let mut col = vec![T::ZERO; conv_col_len(x_shape, w_shape, attrs)?];
    conv_with_col(x, x_shape, w, w_shape, bias, attrs, out, &mut col)
}

/// [`conv`] with a caller-provided im2col buffer of [`conv_col_len`] elements. (batch, group) pairs
/// needing im2col run one after another, each tile by tile, through that one buffer; each tile's
/// rows (output channels) may be split over the threads.
pub fn conv_with_col<T: GemmFloat>(
    x: &[T],
    x_shape: &[usize],
    w: &[T],
    w_shape: &[usize],
    bias: Option<&[T]>,
    attrs: &ConvAttrs,
    out: &mut [T],
    col_buf: &mut [T],
) -> KResult<()> {
    let (win, group, out_shape) = conv_geometry(x_shape, w_shape, attrs)?;
    check_len("Conv X", x.len(), x_shape)?;
    check_len("Conv W", w.len(), w_shape)?;
    check_len("Conv output", out.len(), &out_shape)?;
    if let Some(b) = bias {
        if b.len() != w_shape[0] {
            return Err(shape_err(format!(
                "Conv bias has {} elements, expected {}",
                b.len(),
                w_shape[0]
            )));
        }
    }
    let (n, c, m) = (x_shape[0], x_shape[1], w_shape[0]);
    let (cg, mg) = (c / group, m / group);
    let in_sp = &x_shape[2..];
    let out_sp = &out_shape[2..];
    let plane: usize = in_sp.iter().product();
    let p: usize = out_sp.iter().product();
    let kn: usize = win.kernel.iter().product();
    let kdim = cg * kn;
    let direct = win.is_direct();
    if out.is_empty() {
        return Ok(());
    }
    let tile = col_tile(kdim, out_sp);
    if !direct && col_buf.len() != kdim * tile {
        return Err(shape_err(format!(
            "Conv im2col buffer has {} elements, needs {}",
            col_buf.len(),
            kdim * tile
        )));
    }
    // The columns `cols` of one (batch, group) pair's output block `yb` (`[mg, p]`, contiguous in
    // `out`) from the GEMM of its filters with `col` (`[kdim, cols.len()]`), bias added.
    let gemm =
        |g: usize, col: &[T], cols: std::ops::Range<usize>, yb: &mut [T], inner_par: bool| {
            let n = cols.len();
            let rows = |r: std::ops::Range<usize>, yc: &mut [T]| -> KResult<()> {
                let wr = MatRef {
                    data: w,
                    off: (g * mg + r.start) * kdim,
                    rs: kdim,
                    cs: 1,
                };
                let b = MatRef {
                    data: col,
                    off: 0,
                    rs: n,
                    cs: 1,
                };
                gemm_block(r.len(), kdim, n, wr, b, &mut yc[cols.start..], p)?;
                if let Some(b) = bias {
                    for (i, yrow) in yc.chunks_exact_mut(p).enumerate() {
                        let bv = b[g * mg + r.start + i];
                        for v in yrow[cols.clone()].iter_mut() {
                            *v = *v + bv;
                        }
                    }
                }
                Ok(())
            };
            if inner_par {
                par_rows(mg, p, kdim * n / p.max(1), yb, rows)
            } else {
                rows(0..mg, yb)
            }
        };
    let run_pair = |ng: usize, yb: &mut [T], inner_par: bool, col_buf: &mut [T]| -> KResult<()> {
        let (bi, g) = (ng / group, ng % group);
        let xg = &x[(bi * c + g * cg) * plane..(bi * c + (g + 1) * cg) * plane];
        if direct {
            return gemm(g, xg, 0..p, yb, inner_par);
        }
        for first in (0..p).step_by(tile.max(1)) {
            let last = (first + tile).min(p);
            let col = &mut col_buf[..kdim * (last - first)];
            im2col(xg, in_sp, out_sp, &win, first..last, col);
            gemm(g, col, first..last, yb, inner_par)?;
        }
        Ok(())
    };
    let pairs = n * group;
    let block = mg * p;
    let threads = rayon::current_num_threads();
    if direct && pairs >= 2 * threads && threads > 1 && block * kdim >= 1 << 14 {
        out.par_chunks_mut(block)
            .enumerate()
            .try_for_each(|(ng, yb)| run_pair(ng, yb, false, &mut []))
    } else {
        out.chunks_mut(block)
            .enumerate()
            .try_for_each(|(ng, yb)| run_pair(ng, yb, true, col_buf))
    }
}

/// ONNX Conv on f32.
pub fn conv_f32(
    x: &[f32],
    x_shape: &[usize],
    w: &[f32],
    w_shape: &[usize],
    bias: Option<&[f32]>,
    attrs: &ConvAttrs,
    out: &mut [f32],
) -> KResult<()> {
    conv(x, x_shape, w, w_shape, bias, attrs, out)
}

#[cfg(test)]
mod tests {
    use super::super::matmul::testutil::*;
    use super::*;
    use proptest::prelude::*;

    /// Direct-loop reference for 2-D conv in f64.
    fn naive2d(
        x: &[f32],
        xs: &[usize],
        w: &[f32],
        ws: &[usize],
        b: Option<&[f32]>,
        a: &ConvAttrs,
    ) -> Vec<f64> {
        let (win, group, os) = conv_geometry(xs, ws, a).unwrap();
        let (cg, mg) = (xs[1] / group, ws[0] / group);
        let mut y = vec![0.0f64; os.iter().product()];
        for n in 0..os[0] {
            for m in 0..os[1] {
                let g = m / mg;
                for oh in 0..os[2] {
                    for ow in 0..os[3] {
                        let mut s = b.map_or(0.0, |b| b[m] as f64);
                        for c in 0..cg {
                            for kh in 0..ws[2] {
                                for kw in 0..ws[3] {
                                    let ih = win.coord(0, oh, kh);
                                    let iw = win.coord(1, ow, kw);
                                    if ih < 0
                                        || iw < 0
                                        || ih as usize >= xs[2]
                                        || iw as usize >= xs[3]
                                    {
                                        continue;
                                    }
                                    let xv = x[((n * xs[1] + g * cg + c) * xs[2] + ih as usize)
                                        * xs[3]
                                        + iw as usize];
                                    let wv = w[((m * ws[1] + c) * ws[2] + kh) * ws[3] + kw];
                                    s += xv as f64 * wv as f64;
                                }
                            }
                        }
                        y[((n * os[1] + m) * os[2] + oh) * os[3] + ow] = s;
                    }
                }
            }
        }
        y
    }

    #[test]
    fn hand_computed_3x3() {
        // 1x1x3x3 input of 1..9, 2x2 kernel of ones: sums of 2x2 windows.
        let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
        let mut y = [0.0f32; 4];
        conv_f32(
            &x,
            &[1, 1, 3, 3],
            &[1.0; 4],
            &[1, 1, 2, 2],
            Some(&[0.5]),
            &ConvAttrs::default(),
            &mut y,
        )
        .unwrap();
        assert_eq!(y, [12.5, 16.5, 24.5, 28.5]);
        let a = ConvAttrs {
            pads: vec![1, 1, 1, 1],
            strides: vec![2, 2],
            ..Default::default()
        };
        assert_eq!(
            conv_out_shape(&[1, 1, 3, 3], &[1, 1, 2, 2], &a).unwrap(),
            vec![1, 1, 2, 2]
        );
        let mut y2 = [0.0f32; 4];
        conv_f32(
            &x,
            &[1, 1, 3, 3],
            &[1.0; 4],
            &[1, 1, 2, 2],
            None,
            &a,
            &mut y2,
        )
        .unwrap();
        assert_eq!(y2, [1.0, 5.0, 11.0, 28.0]);
        assert!(conv_f32(
            &x,
            &[1, 1, 3, 3],
            &[1.0; 4],
            &[1, 2, 2, 1],
            None,
            &a,
            &mut y2
        )
        .is_err());
        assert!(conv_f32(
            &x,
            &[1, 1, 3, 3],
            &[1.0; 16],
            &[1, 1, 4, 4],
            None,
            &ConvAttrs::default(),
            &mut y2
        )
        .is_err());
        let same = resolve_pads(AutoPad::SameUpper, &[], &[5], &[4], &[2], &[1]).unwrap();
        assert_eq!(same, vec![1, 2]);
    }

    #[test]
    fn conv1d_and_3d_shapes() {
        let x = rand_vec(2 * 3 * 10, 1);
        let w = rand_vec(4 * 3 * 3, 2);
        let a = ConvAttrs {
            dilations: vec![2],
            ..Default::default()
        };
        let os = conv_out_shape(&[2, 3, 10], &[4, 3, 3], &a).unwrap();
        assert_eq!(os, vec![2, 4, 6]);
        let mut y = vec![0.0f32; 48];
        conv_f32(&x, &[2, 3, 10], &w, &[4, 3, 3], None, &a, &mut y).unwrap();
        // 1-D conv equals 2-D conv with a unit height.
        let a2 = ConvAttrs {
            dilations: vec![1, 2],
            ..Default::default()
        };
        let mut y2 = vec![0.0f32; 48];
        conv_f32(&x, &[2, 3, 1, 10], &w, &[4, 3, 1, 3], None, &a2, &mut y2).unwrap();
        assert!(same_bits(&y, &y2));
        let x3 = rand_vec(3 * 4 * 4 * 4, 3);
        let w3 = rand_vec(2 * 3 * 8, 4);
        let mut y3 = vec![0.0f32; 2 * 27];
        conv_f32(
            &x3,
            &[1, 3, 4, 4, 4],
            &w3,
            &[2, 3, 2, 2, 2],
            None,
            &ConvAttrs::default(),
            &mut y3,
        )
        .unwrap();
        let want: f32 = (0..3)
            .flat_map(|c| (0..8).map(move |k| (c, k)))
            .map(|(c, k)| {
                let (kd, kh, kw) = (k / 4, (k / 2) % 2, k % 2);
                x3[c * 64 + kd * 16 + kh * 4 + kw] * w3[c * 8 + k]
            })
            .sum();
        assert!((y3[0] - want).abs() < 1e-5);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]

        #[test]
        fn conv_matches_naive_and_chunks(n in 1usize..3, gsel in 0usize..3, cgi in 1usize..4, mgi in 1usize..4,
                                        h in 1usize..9, wd in 1usize..9, kh in 1usize..4, kw in 1usize..4,
                                        s in 1usize..3, dl in 1usize..3, pd in 0usize..3, bias in any::<bool>(),
                                        cut in 0usize..1000, seed in 0u64..1000) {
            let group = [1usize, 2, 3][gsel];
            let (c, m) = (cgi * group, mgi * group);
            let a = ConvAttrs { group, strides: vec![s, 1], pads: vec![pd, 0, 0, pd], dilations: vec![dl, 1] };
            let xs = [n, c, h, wd];
            let ws = [m, cgi, kh, kw];
            let Ok(os) = conv_out_shape(&xs, &ws, &a) else { return Ok(()); };
            let x = rand_vec(xs.iter().product(), seed);
            let w = rand_vec(ws.iter().product(), seed + 1);
            let b = rand_vec(m, seed + 2);
            let bo = if bias { Some(&b[..]) } else { None };
            let mut y = vec![0.0f32; os.iter().product()];
            conv_f32(&x, &xs, &w, &ws, bo, &a, &mut y).unwrap();
            let r = naive2d(&x, &xs, &w, &ws, bo, &a);
            for (g, want) in y.iter().zip(&r) {
                prop_assert!((*g as f64 - want).abs() < 1e-4);
            }
            // Batch chunk.
            let n0 = cut % n;
            let n1 = n0 + (cut / 7) % (n - n0) + 1;
            let xsl = slice_axis(&x, &xs, 0, n0, n1);
            let mut yp = vec![0.0f32; (n1 - n0) * os[1..].iter().product::<usize>()];
            conv_f32(&xsl, &with_dim(&xs, 0, n1 - n0), &w, &ws, bo, &a, &mut yp).unwrap();
            prop_assert!(same_bits(&yp, &slice_axis(&y, &os, 0, n0, n1)));
            // Output-channel chunk: whole groups [g0, g1), or any rows when group == 1.
            let (m0, m1, c0, c1, gs) = if group == 1 {
                let m0 = cut % m;
                (m0, m0 + (cut / 3) % (m - m0) + 1, 0, c, 1)
            } else {
                let g0 = cut % group;
                let g1 = g0 + (cut / 3) % (group - g0) + 1;
                (g0 * mgi, g1 * mgi, g0 * cgi, g1 * cgi, g1 - g0)
            };
            let xc = slice_axis(&x, &xs, 1, c0, c1);
            let wc = slice_axis(&w, &ws, 0, m0, m1);
            let bc = b[m0..m1].to_vec();
            let ac = ConvAttrs { group: gs, ..a.clone() };
            let mut yc = vec![0.0f32; n * (m1 - m0) * os[2] * os[3]];
            conv_f32(&xc, &with_dim(&xs, 1, c1 - c0), &wc, &with_dim(&ws, 0, m1 - m0),
                     if bias { Some(&bc[..]) } else { None }, &ac, &mut yc).unwrap();
            prop_assert!(same_bits(&yc, &slice_axis(&y, &os, 1, m0, m1)));
        }
    }

    /// An im2col buffer of one tile: the GEMM runs over tiles of whole output lines, each output
    /// element the same dot product as through the whole im2col matrix (built here by hand), bias
    /// after; the buffer is [`conv_col_len`] elements, a tile's, not the whole matrix's.
    #[test]
    fn a_conv_tiled_over_output_lines_matches_the_whole_im2col_product() {
        // kdim 72, output [130, 129] with pads 1: 1.2 Mi im2col elements, tiles of 112 lines.
        let a = ConvAttrs {
            pads: vec![1, 1, 1, 1],
            ..Default::default()
        };
        let (os, tile, col_len) = tiled_is_whole([2, 8, 130, 129], [4, 8, 3, 3], &a, 21);
        assert_eq!((tile, col_len), (112 * os[3], 72 * 112 * os[3]));
        assert!(
            col_len < 72 * os[2] * os[3],
            "one tile, not the whole matrix"
        );
    }

    /// Where one output line alone is over the tile (a long 1-D signal), a tile is part of a line,
    /// and tiles cross from one line into the next; still the bits of one whole im2col product.
    #[test]
    fn a_conv_whose_lines_are_over_the_tile_runs_in_parts_of_lines() {
        // kdim 128, lines of 10000 positions: 1.28 Mi elements a line, tiles of 8192 positions.
        let a = ConvAttrs::default();
        let (os, tile, col_len) = tiled_is_whole([1, 16, 3, 10007], [4, 16, 1, 8], &a, 31);
        assert_eq!(os, vec![1, 4, 3, 10000]);
        assert_eq!((tile, col_len), (COL_TILE_ELEMS / 128, COL_TILE_ELEMS));
    }

    /// Runs a conv of random X, W and bias (seeds from `seed`) through [`conv_with_col`] with a
    /// buffer of [`conv_col_len`] elements and asserts its bits are the whole im2col product's;
    /// returns the output shape, the tile's columns ([`col_tile`]) and the buffer's length.
    fn tiled_is_whole(
        xs: [usize; 4],
        ws: [usize; 4],
        a: &ConvAttrs,
        seed: u64,
    ) -> (Vec<usize>, usize, usize) {
        let x = rand_vec(xs.iter().product(), seed);
        let w = rand_vec(ws.iter().product(), seed + 1);
        let b = rand_vec(ws[0], seed + 2);
        let os = conv_out_shape(&xs, &ws, a).unwrap();
        let kdim: usize = ws[1..].iter().product();
        let col_len = conv_col_len(&xs, &ws, a).unwrap();
        let mut y = vec![0.0f32; os.iter().product()];
        let mut col = vec![0.0f32; col_len];
        conv_with_col(&x, &xs, &w, &ws, Some(&b), a, &mut y, &mut col).unwrap();
        assert!(same_bits(&y, &whole_product(&x, &xs, &w, &ws, &b, a)));
        let tile = col_tile(kdim, &os[2..]);
        (os, tile, col_len)
    }

    /// The conv as one GEMM of the filters with the whole im2col matrix of each batch item, bias
    /// added after.
    fn whole_product(
        x: &[f32],
        xs: &[usize],
        w: &[f32],
        ws: &[usize],
        b: &[f32],
        a: &ConvAttrs,
    ) -> Vec<f32> {
        let os = conv_out_shape(xs, ws, a).unwrap();
        let (win, _, _) = conv_geometry(xs, ws, a).unwrap();
        let kdim: usize = ws[1..].iter().product();
        let p: usize = os[2..].iter().product();
        let plane: usize = xs[2..].iter().product();
        let mut want = vec![0.0f32; os.iter().product()];
        let mut whole = vec![0.0f32; kdim * p];
        for bi in 0..xs[0] {
            let xb = &x[bi * xs[1] * plane..(bi + 1) * xs[1] * plane];
            im2col(xb, &xs[2..], &os[2..], &win, 0..p, &mut whole);
            let yb = &mut want[bi * ws[0] * p..(bi + 1) * ws[0] * p];
            let wm = MatRef {
                data: w,
                off: 0,
                rs: kdim,
                cs: 1,
            };
            let cm = MatRef {
                data: &whole,
                off: 0,
                rs: p,
                cs: 1,
            };
            gemm_block(ws[0], kdim, p, wm, cm, yb, p).unwrap();
            for (m, row) in yb.chunks_exact_mut(p).enumerate() {
                row.iter_mut().for_each(|v| *v += b[m]);
            }
        }
        want
    }

    #[test]
    fn thread_count_identity() {
        let xs = [2, 8, 20, 20];
        let ws = [16, 8, 3, 3];
        let x = rand_vec(xs.iter().product(), 7);
        let w = rand_vec(ws.iter().product(), 8);
        let a = ConvAttrs {
            pads: vec![1, 1, 1, 1],
            ..Default::default()
        };
        let os = conv_out_shape(&xs, &ws, &a).unwrap();
        let run = |t: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(t)
                .build()
                .unwrap();
            let mut y = vec![0.0f32; os.iter().product()];
            pool.install(|| conv_f32(&x, &xs, &w, &ws, None, &a, &mut y))
                .unwrap();
            y
        };
        let one = run(1);
        assert!(same_bits(&one, &run(2)));
        assert!(same_bits(&one, &run(5)));
    }
}
