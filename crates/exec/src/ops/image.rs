//! Image resampling ops: `Resize` (nearest with its four rounding modes, linear, cubic, antialias,
//! `exclude_outside`, `axes`, `keep_aspect_ratio_policy`, every coordinate transformation mode) and
//! `Upsample` (asymmetric coordinates; nearest rounds down), and `GridSample` (nearest, linear,
//! cubic over 2-D or volumetric inputs, with zeros, border or reflection padding).
//!
//! Interpolation is separable: along each resized axis an output index has a few taps (input
//! index, weight), computed as the ONNX reference does in f64. Each output element is the sum, in
//! a fixed order, of the input elements at the product of its axes' taps times the product of their
//! weights; nearest takes the one chosen element unchanged. So every element is computed the same
//! way whatever part of the output is asked for. Scratch: none (taps live on the stack).

use half::{bf16, f16};
use memplan_ir::ops::image::{aspect_scale, operand_slots};
use memplan_ir::DataType;

use super::{fail, opt, req, unsupported, OpCtx, OpFail, OpFn};
use crate::tensor::{Element, Tensor};

pub const OPS: &[(&str, OpFn)] = &[
    ("Resize", resize),
    ("Upsample", resize),
    ("GridSample", grid_sample),
];

/// Most taps along one axis (antialiased downscaling widens the kernel with the factor).
const MAX_TAPS: usize = 64;
/// Highest rank resized.
const MAX_RANK: usize = 8;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Coord {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfCropAndResize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Round {
    PreferFloor,
    PreferCeil,
    Floor,
    Ceil,
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Nearest(Round),
    Linear,
    Cubic(f64),
}

/// One axis of the resize.
#[derive(Clone, Copy)]
struct Axis {
    input: usize,
    output: usize,
    scale: f64,
    roi: (f64, f64),
    /// Output index `i` is input index `i` (the reference skips such axes).
    identity: bool,
}

struct Params {
    mode: Mode,
    coord: Coord,
    antialias: bool,
    exclude_outside: bool,
    extrapolation: f64,
}

/// The taps of output index `o` along `ax` into `idx`/`w`; their count, or `None` when the source
/// coordinate is outside the crop box (`tf_crop_and_resize`: the extrapolation value).
fn taps(
    p: &Params,
    ax: &Axis,
    o: usize,
    idx: &mut [usize; MAX_TAPS],
    w: &mut [f64; MAX_TAPS],
) -> Result<Option<usize>, OpFail> {
    if ax.identity {
        idx[0] = o;
        w[0] = 1.0;
        return Ok(Some(1));
    }
    let (inw, y) = (ax.input as f64, o as f64);
    let out_w = ax.scale * inw;
    let x = match p.coord {
        Coord::AlignCorners if out_w == 1.0 => 0.0,
        Coord::AlignCorners => y * (inw - 1.0) / (out_w - 1.0),
        Coord::Asymmetric => y / ax.scale,
        Coord::TfCropAndResize => {
            let (r0, r1) = ax.roi;
            let x = if out_w == 1.0 {
                (r1 - r0) * (inw - 1.0) / 2.0
            } else {
                y * (r1 - r0) * (inw - 1.0) / (out_w - 1.0)
            } + r0 * (inw - 1.0);
            if x < 0.0 || x > inw - 1.0 {
                return Ok(None);
            }
            x
        }
        Coord::PytorchHalfPixel if out_w == 1.0 => -0.5,
        Coord::PytorchHalfPixel | Coord::HalfPixel => (y + 0.5) / ax.scale - 0.5,
        Coord::HalfPixelSymmetric => {
            let adjustment = ax.output as f64 / out_w;
            let offset = inw / 2.0 * (1.0 - adjustment);
            offset + (y + 0.5) / ax.scale - 0.5
        }
    };
    let fl = x.floor();
    let integral = x == fl;
    let ratio = if integral { 1.0 } else { x - fl };
    let last = ax.input as i64 - 1;
    let clamp = |i: i64| i.clamp(0, last) as usize;
    if let Mode::Nearest(round) = p.mode {
        // The reference's two taps (floor, floor + 1) with 0/1 weights: keep the chosen one.
        let up = !integral
            && match round {
                Round::PreferFloor => ratio > 0.5,
                Round::PreferCeil => ratio >= 0.5,
                Round::Floor => false,
                Round::Ceil => true,
            };
        idx[0] = clamp(fl as i64 + i64::from(up));
        w[0] = 1.0;
        return Ok(Some(1));
    }
    let n = coeffs(p, ax.scale, ratio, w)?;
    // Even kernels: the window of the n nearest indices, ties to the left.
    let start = if integral {
        fl as i64 - (n / 2) as i64
    } else {
        fl as i64 - (n / 2) as i64 + 1
    };
    let mut sum = 0.0;
    for k in 0..n {
        let i = start + k as i64;
        if p.exclude_outside && (i < 0 || i > last) {
            w[k] = 0.0;
        }
        sum += w[k];
        idx[k] = clamp(i);
    }
    if p.exclude_outside {
        let sum = if sum == 0.0 { 1.0 } else { sum };
        w[..n].iter_mut().for_each(|v| *v /= sum);
    }
    Ok(Some(n))
}

/// Interpolation weights for a source position `ratio` past the tap left of it (in (0, 1]).
fn coeffs(p: &Params, scale: f64, ratio: f64, w: &mut [f64; MAX_TAPS]) -> Result<usize, OpFail> {
    let too_wide = |n: i64| -> Result<usize, OpFail> {
        if n < 2 || n as usize > MAX_TAPS {
            return unsupported(format!(
                "antialiased resize by {scale} needs {n} taps per axis (at most {MAX_TAPS})"
            ));
        }
        Ok(n as usize)
    };
    match (p.mode, p.antialias) {
        (Mode::Linear, false) => {
            w[0] = 1.0 - ratio;
            w[1] = ratio;
            Ok(2)
        }
        (Mode::Cubic(a), false) => {
            let (r, s) = (ratio, 1.0 - ratio);
            w[0] = ((a * (r + 1.0) - 5.0 * a) * (r + 1.0) + 8.0 * a) * (r + 1.0) - 4.0 * a;
            w[1] = ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0;
            w[2] = ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0;
            w[3] = ((a * (s + 1.0) - 5.0 * a) * (s + 1.0) + 8.0 * a) * (s + 1.0) - 4.0 * a;
            Ok(4)
        }
        (Mode::Linear, true) => {
            let s = scale.min(1.0);
            let start = (-1.0 / s).floor() as i64 + 1;
            let n = too_wide(2 - 2 * start)?;
            let mut sum = 0.0;
            for (k, v) in w[..n].iter_mut().enumerate() {
                let arg = ((start + k as i64) as f64 - ratio) * s;
                *v = (1.0 - arg.abs()).clamp(0.0, 1.0);
                sum += *v;
            }
            w[..n].iter_mut().for_each(|v| *v /= sum);
            Ok(n)
        }
        (Mode::Cubic(a), true) => {
            let s = scale.min(1.0);
            let start = (-2.0 / s).floor() as i64 + 1;
            let n = too_wide(2 - 2 * start)?;
            let cubic = |x: f64| {
                let x = x.abs();
                let (x2, x3) = (x * x, x * x * x);
                if x <= 1.0 {
                    (a + 2.0) * x3 - (a + 3.0) * x2 + 1.0
                } else if x < 2.0 {
                    a * x3 - 5.0 * a * x2 + 8.0 * a * x - 4.0 * a
                } else {
                    0.0
                }
            };
            let mut sum = 0.0;
            for (k, v) in w[..n].iter_mut().enumerate() {
                *v = cubic(s * ((start + k as i64) as f64 - ratio));
                sum += *v;
            }
            w[..n].iter_mut().for_each(|v| *v /= sum);
            Ok(n)
        }
        (Mode::Nearest(_), _) => fail("nearest has no interpolation weights"),
    }
}

/// Element conversions to and from the f64 the interpolation computes in.
trait Sample: Element + Copy {
    fn get(self) -> f64;
    fn put(v: f64) -> Self;
}

macro_rules! float_sample {
    ($t:ty, $from:expr, $to:expr) => {
        impl Sample for $t {
            fn get(self) -> f64 {
                $from(self)
            }
            fn put(v: f64) -> Self {
                $to(v)
            }
        }
    };
}
float_sample!(f32, f64::from, |v: f64| v as f32);
float_sample!(f64, |v| v, |v| v);
float_sample!(f16, |v: f16| v.to_f64(), f16::from_f64);
float_sample!(bf16, |v: bf16| v.to_f64(), bf16::from_f64);

/// Integer results are rounded half to even and saturated, as the reference does.
macro_rules! int_sample {
    ($t:ty) => {
        impl Sample for $t {
            fn get(self) -> f64 {
                self as f64
            }
            fn put(v: f64) -> Self {
                v.round_ties_even() as $t
            }
        }
    };
}
int_sample!(u8);
int_sample!(i8);
int_sample!(i32);
int_sample!(i64);

fn run<T: Sample>(p: &Params, axes: &[Axis], x: &Tensor, out: &mut Tensor) -> Result<(), OpFail> {
    let src = x.data::<T>()?;
    let dst = out.data_mut::<T>()?;
    let r = axes.len();
    if dst.is_empty() {
        return Ok(());
    }
    let mut stride = [0usize; MAX_RANK];
    let mut s = 1;
    for a in (0..r).rev() {
        stride[a] = s;
        s *= axes[a].input;
    }
    let mut oi = [0usize; MAX_RANK];
    let mut idx = [[0usize; MAX_TAPS]; MAX_RANK];
    let mut w = [[0f64; MAX_TAPS]; MAX_RANK];
    let mut n = [Some(0usize); MAX_RANK];
    let nearest = matches!(p.mode, Mode::Nearest(_));
    // Taps of axes `changed..` are recomputed when their output index moves.
    let mut changed = 0;
    for d in dst.iter_mut() {
        for a in changed..r {
            n[a] = taps(p, &axes[a], oi[a], &mut idx[a], &mut w[a])?;
        }
        if n[..r].iter().any(Option::is_none) {
            *d = T::put(p.extrapolation);
        } else if nearest {
            let off: usize = (0..r).map(|a| idx[a][0] * stride[a]).sum();
            *d = src[off];
        } else {
            // Sum over the product of the axes' taps, last axis fastest.
            let mut c = [0usize; MAX_RANK];
            let mut acc = 0.0;
            'taps: loop {
                let mut wt = 1.0;
                let mut off = 0;
                for a in 0..r {
                    wt *= w[a][c[a]];
                    off += idx[a][c[a]] * stride[a];
                }
                acc += wt * src[off].get();
                let mut a = r;
                loop {
                    if a == 0 {
                        break 'taps;
                    }
                    a -= 1;
                    c[a] += 1;
                    if c[a] < n[a].unwrap_or(0) {
                        break;
                    }
                    c[a] = 0;
                }
            }
            *d = T::put(acc);
        }
        // Next output index.
        changed = r;
        while changed > 0 {
            changed -= 1;
            oi[changed] += 1;
            if oi[changed] < axes[changed].output {
                break;
            }
            oi[changed] = 0;
        }
    }
    Ok(())
}

fn resize(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let r = x.rank();
    if r > MAX_RANK {
        return unsupported(format!("resize of rank {r} (at most {MAX_RANK})"));
    }
    let modern = ctx.node.op == "Resize" && ctx.opset >= 11;
    let mode = match ctx.string("mode")?.as_deref().unwrap_or("nearest") {
        "nearest" => {
            let round = if !modern {
                Round::Floor
            } else {
                match ctx
                    .string("nearest_mode")?
                    .as_deref()
                    .unwrap_or("round_prefer_floor")
                {
                    "round_prefer_floor" => Round::PreferFloor,
                    "round_prefer_ceil" => Round::PreferCeil,
                    "floor" => Round::Floor,
                    "ceil" => Round::Ceil,
                    m => return fail(format!("unknown nearest_mode '{m}'")),
                }
            };
            Mode::Nearest(round)
        }
        "linear" | "bilinear" => Mode::Linear,
        "cubic" => Mode::Cubic(f64::from(ctx.float("cubic_coeff_a", -0.75)?)),
        m => return fail(format!("unknown mode '{m}'")),
    };
    let coord = if !modern {
        Coord::Asymmetric
    } else {
        match ctx
            .string("coordinate_transformation_mode")?
            .as_deref()
            .unwrap_or("half_pixel")
        {
            "half_pixel" => Coord::HalfPixel,
            "half_pixel_symmetric" => Coord::HalfPixelSymmetric,
            "pytorch_half_pixel" => Coord::PytorchHalfPixel,
            "align_corners" => Coord::AlignCorners,
            "asymmetric" => Coord::Asymmetric,
            "tf_crop_and_resize" => Coord::TfCropAndResize,
            m => return fail(format!("unknown coordinate_transformation_mode '{m}'")),
        }
    };
    let p = Params {
        mode,
        coord,
        antialias: ctx.int("antialias", 0)? != 0,
        exclude_outside: ctx.int("exclude_outside", 0)? != 0,
        extrapolation: f64::from(ctx.float("extrapolation_value", 0.0)?),
    };
    if p.antialias && matches!(mode, Mode::Nearest(_)) {
        return fail("antialias is not defined for mode 'nearest'");
    }
    let axes_attr: Vec<usize> = match ctx.ints("axes")? {
        None => (0..r).collect(),
        Some(v) => {
            let mut out = Vec::new();
            for a in v {
                let ax = super::axis(a, r)?;
                if out.contains(&ax) {
                    return fail(format!("axis {a} appears twice in 'axes'"));
                }
                out.push(ax);
            }
            out
        }
    };
    let mut axes: Vec<Axis> = x
        .shape
        .iter()
        .map(|&d| Axis {
            input: d,
            output: d,
            scale: 1.0,
            roi: (0.0, 1.0),
            identity: true,
        })
        .collect();
    let given = |i: Option<usize>| i.and_then(|i| opt(inputs, i)).filter(|t| t.numel() > 0);
    let (scales_at, sizes_at) = operand_slots(&ctx.node.op, ctx.opset);
    if let Some(sizes) = given(sizes_at) {
        if given(scales_at).is_some() {
            return fail("only one of 'scales' and 'sizes' may be given");
        }
        let sizes = sizes.to_i64_vec()?;
        if sizes.len() != axes_attr.len() || sizes.iter().any(|&s| s < 0) {
            return fail(format!(
                "sizes {sizes:?} must hold one non-negative extent per resized axis ({})",
                axes_attr.len()
            ));
        }
        let policy = ctx
            .string("keep_aspect_ratio_policy")?
            .unwrap_or_else(|| "stretch".into());
        let have: Vec<i64> = axes_attr.iter().map(|&a| x.shape[a] as i64).collect();
        match policy.as_str() {
            "stretch" => {
                for (k, &a) in axes_attr.iter().enumerate() {
                    axes[a].output = sizes[k] as usize;
                    axes[a].scale = sizes[k] as f64 / have[k] as f64;
                }
            }
            "not_larger" | "not_smaller" => {
                let s = aspect_scale(&policy, &sizes, &have);
                for (k, &a) in axes_attr.iter().enumerate() {
                    axes[a].output = (s * have[k] as f64 + 0.5) as usize;
                    axes[a].scale = s;
                }
            }
            pol => return fail(format!("unknown keep_aspect_ratio_policy '{pol}'")),
        }
    } else {
        let scales: Vec<f64> = match scales_at {
            Some(i) => match given(Some(i)) {
                Some(t) => t.to_f32_vec()?.into_iter().map(f64::from).collect(),
                None => return fail("one of 'scales' and 'sizes' must be given"),
            },
            None => match ctx.floats("scales")? {
                Some(v) => v.into_iter().map(f64::from).collect(),
                None => return fail("attribute 'scales' is required"),
            },
        };
        if scales.len() != axes_attr.len() || scales.iter().any(|&s| !(s > 0.0 && s.is_finite())) {
            return fail(format!(
                "scales {scales:?} must hold one positive factor per resized axis ({})",
                axes_attr.len()
            ));
        }
        for (k, &a) in axes_attr.iter().enumerate() {
            axes[a].scale = scales[k];
            axes[a].output = (x.shape[a] as f64 * scales[k]).floor() as usize;
        }
    }
    if coord == Coord::TfCropAndResize {
        let roi = match opt(inputs, 1).filter(|_| modern) {
            Some(t) => t.to_f32_vec()?,
            None => return fail("coordinate_transformation_mode 'tf_crop_and_resize' needs roi"),
        };
        let k = axes_attr.len();
        if roi.len() != 2 * k {
            return fail(format!(
                "roi has {} entries, needs {} (starts and ends of {k} axes)",
                roi.len(),
                2 * k
            ));
        }
        for (j, &a) in axes_attr.iter().enumerate() {
            axes[a].roi = (f64::from(roi[j]), f64::from(roi[k + j]));
        }
    }
    for a in &axes_attr {
        let ax = &mut axes[*a];
        let close = |u: f64, v: f64| (u - v).abs() <= 1e-9 * u.abs().max(v.abs());
        ax.identity = close(ax.scale, 1.0)
            && ax.output == ax.input
            && (coord != Coord::TfCropAndResize || (ax.roi.0.abs() <= 0.0 && close(ax.roi.1, 1.0)));
        if ax.input == 0 && ax.output > 0 {
            return fail(format!("cannot resize an empty axis {a} to {}", ax.output));
        }
    }
    let shape: Vec<usize> = axes.iter().map(|a| a.output).collect();
    let mut out = ctx.alloc_for_overwrite(x.dtype, &shape)?;
    match x.dtype {
        DataType::F32 => run::<f32>(&p, &axes, x, &mut out)?,
        DataType::F64 => run::<f64>(&p, &axes, x, &mut out)?,
        DataType::F16 => run::<f16>(&p, &axes, x, &mut out)?,
        DataType::BF16 => run::<bf16>(&p, &axes, x, &mut out)?,
        DataType::U8 => run::<u8>(&p, &axes, x, &mut out)?,
        DataType::I8 => run::<i8>(&p, &axes, x, &mut out)?,
        DataType::I32 => run::<i32>(&p, &axes, x, &mut out)?,
        DataType::I64 => run::<i64>(&p, &axes, x, &mut out)?,
        d => return unsupported(format!("{} of {d}", ctx.node.op)),
    }
    Ok(vec![out])
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// Reflects `x` by the nearer border until it lies in `[lo, hi]` (the reference's `_gs_reflect`).
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let rng = hi - lo;
    if x < lo {
        let dx = lo - x;
        let n = (dx / rng) as i64;
        let r = dx - n as f64 * rng;
        if n % 2 == 0 {
            lo + r
        } else {
            hi - r
        }
    } else if x > hi {
        let dx = x - hi;
        let n = (dx / rng) as i64;
        let r = dx - n as f64 * rng;
        if n % 2 == 0 {
            hi - r
        } else {
            lo + r
        }
    } else {
        x
    }
}

struct GridParams {
    mode: Mode,
    padding: Padding,
    align: bool,
}

/// One output element of `GridSample` for one image `src` of spatial extents `dims` at the
/// normalized grid point `g` (x first, as the grid stores it).
fn grid_point<T: Sample>(p: &GridParams, src: &[T], dims: &[usize], g: &[f64]) -> T {
    let k = dims.len();
    let mut xs = [0f64; MAX_RANK];
    let mut lo = [0f64; MAX_RANK];
    let mut hi = [0f64; MAX_RANK];
    for i in 0..k {
        let (n, len) = (g[k - 1 - i], dims[i] as f64);
        // The reference holds denormalized coordinates in f32.
        let mut x = if p.align {
            (n + 1.0) / 2.0 * (len - 1.0)
        } else {
            ((n + 1.0) * len - 1.0) / 2.0
        } as f32 as f64;
        (lo[i], hi[i]) = if p.align {
            (0.0, len - 1.0)
        } else {
            (-0.5, len - 0.5)
        };
        if matches!(p.mode, Mode::Nearest(_)) {
            x = x.round_ties_even();
        }
        if x < lo[i] || x > hi[i] {
            match p.padding {
                Padding::Border => x = x.clamp(0.0, len - 1.0),
                Padding::Reflection => x = reflect(x, lo[i], hi[i]),
                Padding::Zeros => {}
            }
        }
        xs[i] = (x as f32) as f64;
    }
    // The input element at integer position `at` under the padding mode (`None`: a zero).
    let pixel = |at: &[i64; MAX_RANK]| -> Option<f64> {
        let mut off = 0;
        for i in 0..k {
            let d = dims[i] as i64;
            let j = match p.padding {
                Padding::Zeros if at[i] < 0 || at[i] >= d => return None,
                Padding::Zeros => at[i],
                Padding::Border => at[i].clamp(0, d - 1),
                Padding::Reflection => reflect(at[i] as f64, lo[i], hi[i]) as i64,
            };
            off = off * dims[i] + j.clamp(0, d - 1) as usize;
        }
        Some(src[off].get())
    };
    if matches!(p.mode, Mode::Nearest(_)) {
        let mut at = [0i64; MAX_RANK];
        for i in 0..k {
            at[i] = xs[i] as i32 as i64;
        }
        return pixel(&at).map_or(T::put(0.0), T::put);
    }
    let n = if matches!(p.mode, Mode::Linear) { 2 } else { 4 };
    let mut w = [[0f64; 4]; MAX_RANK];
    let mut first = [0i64; MAX_RANK];
    for i in 0..k {
        let x0 = xs[i].floor();
        let t = xs[i] - x0;
        if n == 2 {
            first[i] = x0 as i64;
            w[i] = [1.0 - t, t, 0.0, 0.0];
        } else {
            first[i] = x0 as i64 - 1;
            let a = -0.75;
            let (r, s) = (t, 1.0 - t);
            w[i] = [
                ((a * (r + 1.0) - 5.0 * a) * (r + 1.0) + 8.0 * a) * (r + 1.0) - 4.0 * a,
                ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0,
                ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0,
                ((a * (s + 1.0) - 5.0 * a) * (s + 1.0) + 8.0 * a) * (s + 1.0) - 4.0 * a,
            ];
        }
    }
    let mut c = [0usize; MAX_RANK];
    let mut acc = 0.0;
    'taps: loop {
        let mut at = [0i64; MAX_RANK];
        let mut wt = 1.0;
        for i in 0..k {
            at[i] = first[i] + c[i] as i64;
            wt *= w[i][c[i]];
        }
        if let Some(v) = pixel(&at) {
            acc += wt * v;
        }
        let mut i = k;
        loop {
            if i == 0 {
                break 'taps;
            }
            i -= 1;
            c[i] += 1;
            if c[i] < n {
                break;
            }
            c[i] = 0;
        }
    }
    T::put(acc)
}

fn grid_run<T: Sample, G: Sample>(
    p: &GridParams,
    x: &Tensor,
    grid: &Tensor,
    out: &mut Tensor,
) -> Result<(), OpFail> {
    let (src, g, dst) = (x.data::<T>()?, grid.data::<G>()?, out.data_mut::<T>()?);
    let (nb, ch) = (x.shape[0], x.shape[1]);
    let dims = &x.shape[2..];
    let k = dims.len();
    let img: usize = dims.iter().product();
    let pts: usize = grid.shape[1..=k].iter().product();
    let mut gp = [0f64; MAX_RANK];
    for b in 0..nb {
        for c in 0..ch {
            let image = &src[(b * ch + c) * img..][..img];
            for q in 0..pts {
                let at = &g[(b * pts + q) * k..][..k];
                for (d, v) in gp.iter_mut().zip(at) {
                    *d = v.get();
                }
                dst[(b * ch + c) * pts + q] = grid_point(p, image, dims, &gp[..k]);
            }
        }
    }
    Ok(())
}

fn grid_sample(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let (x, grid) = (req(inputs, 0)?, req(inputs, 1)?);
    let r = x.rank();
    if r < 3 || r - 2 > MAX_RANK || grid.rank() != r || grid.shape[r - 1] != r - 2 {
        return fail(format!(
            "X {:?} and grid {:?}: need (N, C, D1..Dk) and (N, O1..Ok, k)",
            x.shape, grid.shape
        ));
    }
    if grid.shape[0] != x.shape[0] {
        return fail(format!(
            "grid batch {} differs from X batch {}",
            grid.shape[0], x.shape[0]
        ));
    }
    let mode = match ctx.string("mode")?.as_deref().unwrap_or("linear") {
        "nearest" => Mode::Nearest(Round::PreferFloor),
        "linear" | "bilinear" => Mode::Linear,
        "cubic" | "bicubic" => Mode::Cubic(-0.75),
        m => return fail(format!("unknown mode '{m}'")),
    };
    let padding = match ctx.string("padding_mode")?.as_deref().unwrap_or("zeros") {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        m => return fail(format!("unknown padding_mode '{m}'")),
    };
    let p = GridParams {
        mode,
        padding,
        align: ctx.int("align_corners", 0)? != 0,
    };
    if x.shape[2..].contains(&0) && grid.numel() > 0 && x.shape[1] > 0 {
        return fail("cannot sample an empty image");
    }
    let mut shape = vec![x.shape[0], x.shape[1]];
    shape.extend_from_slice(&grid.shape[1..r - 1]);
    let mut out = ctx.alloc_for_overwrite(x.dtype, &shape)?;
    macro_rules! by_grid {
        ($t:ty) => {
            match grid.dtype {
                DataType::F32 => grid_run::<$t, f32>(&p, x, grid, &mut out)?,
                DataType::F64 => grid_run::<$t, f64>(&p, x, grid, &mut out)?,
                DataType::F16 => grid_run::<$t, f16>(&p, x, grid, &mut out)?,
                DataType::BF16 => grid_run::<$t, bf16>(&p, x, grid, &mut out)?,
                d => return unsupported(format!("GridSample grid of {d}")),
            }
        };
    }
    match x.dtype {
        DataType::F32 => by_grid!(f32),
        DataType::F64 => by_grid!(f64),
        DataType::F16 => by_grid!(f16),
        DataType::BF16 => by_grid!(bf16),
        d => return unsupported(format!("GridSample of {d}")),
    }
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::{run_op_at, t_f32};
    use memplan_ir::graph::AttrValue;

    fn s(v: &str) -> AttrValue {
        AttrValue::String(v.as_bytes().to_vec())
    }

    fn run(op: &str, attrs: &[(&str, AttrValue)], inputs: &[Option<&Tensor>]) -> Tensor {
        run_op_at(op, attrs, inputs, 1, 19, false)
            .unwrap()
            .remove(0)
    }

    #[test]
    fn nearest_upsample_repeats_and_linear_half_pixel_interpolates() {
        let x = t_f32(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let scales = t_f32(&[4], &[1.0, 1.0, 2.0, 2.0]);
        let y = run("Resize", &[], &[Some(&x), None, Some(&scales)]);
        assert_eq!(y.shape, vec![1, 1, 4, 4]);
        let want = [
            1., 1., 2., 2., 1., 1., 2., 2., 3., 3., 4., 4., 3., 3., 4., 4.,
        ];
        assert_eq!(y.data::<f32>().unwrap(), &want);
        // Linear, half_pixel: output 1 of 4 maps to 0.25 -> 1 * 0.75 + 2 * 0.25 along a row.
        let x = t_f32(&[1, 2], &[1.0, 2.0]);
        let scales = t_f32(&[2], &[1.0, 2.0]);
        let y = run(
            "Resize",
            &[("mode", s("linear"))],
            &[Some(&x), None, Some(&scales)],
        );
        assert_eq!(y.data::<f32>().unwrap(), &[1.0, 1.25, 1.75, 2.0]);
    }

    #[test]
    fn sizes_with_aspect_policy_keep_one_scale() {
        let x = t_f32(&[1, 1, 2, 4], &[0.0; 8]);
        let sizes = crate::ops::testutil::t_i64(&[2], &[4, 4]);
        let y = run(
            "Resize",
            &[
                ("axes", AttrValue::Ints(vec![2, 3])),
                ("keep_aspect_ratio_policy", s("not_larger")),
            ],
            &[Some(&x), None, None, Some(&sizes)],
        );
        assert_eq!(y.shape, vec![1, 1, 2, 4]);
    }

    #[test]
    fn grid_sample_corners_and_zero_padding() {
        let x = t_f32(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
        // align_corners: (-1, -1) is the top-left element, (1, 1) the bottom-right; (3, 0) is
        // outside and reads zeros.
        let grid = t_f32(&[1, 1, 3, 2], &[-1.0, -1.0, 1.0, 1.0, 3.0, 0.0]);
        let y = run(
            "GridSample",
            &[("align_corners", AttrValue::Int(1))],
            &[Some(&x), Some(&grid)],
        );
        assert_eq!(y.shape, vec![1, 1, 1, 3]);
        assert_eq!(y.data::<f32>().unwrap(), &[1.0, 4.0, 0.0]);
    }

    #[test]
    fn bad_operands_are_errors() {
        let x = t_f32(&[1, 2], &[1.0, 2.0]);
        let scales = t_f32(&[1], &[2.0]);
        let e = run_op_at(
            "Resize",
            &[],
            &[Some(&x), None, Some(&scales)],
            1,
            19,
            false,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("one positive factor per resized axis"),
            "{e}"
        );
        let attrs = [("mode", s("nearest")), ("antialias", AttrValue::Int(1))];
        let scales = t_f32(&[2], &[1.0, 2.0]);
        assert!(run_op_at(
            "Resize",
            &attrs,
            &[Some(&x), None, Some(&scales)],
            1,
            19,
            false
        )
        .is_err());
    }

    /// A Resize sized by `sizes` that keep the batch and channels passes them through (a chunk
    /// reads its own shape as sizes); the resized axes are mixed. Scales of 1 pass too.
    #[test]
    fn resize_flows_keep_the_axes_it_does_not_resize() {
        use crate::ops::testutil::{check_flow, rand_f32, t_i64};
        let x = t_f32(&[3, 2, 4, 5], &rand_f32(120, 7));
        let none = t_f32(&[0], &[]);
        let sizes = t_i64(&[4], &[3, 2, 8, 10]);
        for mode in ["linear", "nearest", "cubic"] {
            let attrs = [("mode", AttrValue::String(mode.as_bytes().to_vec()))];
            check_flow(
                "Resize",
                &attrs,
                &[&x, &none, &none, &sizes],
                1,
                &[0, 1],
                &[1, 2],
            )
            .unwrap();
        }
        let scales = t_f32(&[4], &[1.0, 1.0, 2.0, 1.0]);
        check_flow("Resize", &[], &[&x, &none, &scales], 1, &[0, 1, 3], &[1, 3]).unwrap();
    }
}
