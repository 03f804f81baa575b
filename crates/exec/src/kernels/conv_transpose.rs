//! Kernels: ConvTranspose and Col2Im, as gathers: every output element sums, in f64 and in a fixed
//! order (input channel, then the taps in row-major kernel order), the products of the input
//! positions that map onto it, `o = i * stride - pad_begin + k * dilation` per spatial axis. No
//! scratch; each output element is computed independently of the others.

use super::matmul::{shape_err, KResult};
use super::real::Real;

/// Per output coordinate of one spatial axis: the `(input index, kernel index)` pairs that reach it,
/// in kernel order. A negative `pad_begin` shifts the output to start before the first position
/// an input reaches (those leading outputs get no pairs).
pub fn axis_taps(
    out_len: usize,
    in_len: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    pad_begin: isize,
) -> Vec<Vec<(usize, usize)>> {
    (0..out_len)
        .map(|o| {
            (0..kernel)
                .filter_map(|k| {
                    let t = usize::try_from(o as isize + pad_begin - (k * dilation) as isize);
                    let t = t.ok()?;
                    (t % stride == 0 && t / stride < in_len).then_some((t / stride, k))
                })
                .collect()
        })
        .collect()
}

/// Geometry shared by ConvTranspose and Col2Im (per spatial axis).
pub struct Geometry {
    pub in_sp: Vec<usize>,
    pub kernel: Vec<usize>,
    pub out_sp: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    /// Negative where the output starts before the first position an input reaches.
    pub pad_begin: Vec<isize>,
}

impl Geometry {
    fn taps(&self) -> Vec<Vec<Vec<(usize, usize)>>> {
        (0..self.in_sp.len())
            .map(|a| {
                axis_taps(
                    self.out_sp[a],
                    self.in_sp[a],
                    self.kernel[a],
                    self.strides[a],
                    self.dilations[a],
                    self.pad_begin[a],
                )
            })
            .collect()
    }

    /// Calls `f(o, pairs)` for every output spatial position `o` (row-major) with the
    /// `(input spatial offset, kernel offset)` pairs reaching it, in row-major kernel order.
    fn each(&self, mut f: impl FnMut(usize, &[(usize, usize)])) {
        let taps = self.taps();
        let nd = self.in_sp.len();
        let n_out: usize = self.out_sp.iter().product();
        let (mut cur, mut next) = (Vec::new(), Vec::new());
        let mut idx = vec![0usize; nd];
        for o in 0..n_out {
            let mut t = o;
            for a in (0..nd).rev() {
                idx[a] = t % self.out_sp[a];
                t /= self.out_sp[a];
            }
            cur.clear();
            cur.push((0usize, 0usize));
            for a in 0..nd {
                next.clear();
                for &(xo, ko) in &cur {
                    for &(i, k) in &taps[a][idx[a]] {
                        next.push((xo * self.in_sp[a] + i, ko * self.kernel[a] + k));
                    }
                }
                std::mem::swap(&mut cur, &mut next);
            }
            f(o, &cur);
        }
    }
}

/// ConvTranspose: X `[N, C, in..]`, W `[C, M/group, kernel..]`, optional B `[M]`; Y `[N, M, out..]`.
#[allow(clippy::too_many_arguments)]
pub fn conv_transpose<T: Real>(
    x: &[T],
    (n, c): (usize, usize),
    w: &[T],
    mg: usize,
    b: Option<&[T]>,
    group: usize,
    geo: &Geometry,
    y: &mut [T],
) -> KResult<()> {
    if group == 0 || c % group != 0 {
        return Err(shape_err(format!("group {group} does not divide C = {c}")));
    }
    let cg = c / group;
    let m = mg * group;
    let in_plane: usize = geo.in_sp.iter().product();
    let k_plane: usize = geo.kernel.iter().product();
    let out_plane: usize = geo.out_sp.iter().product();
    geo.each(|o, pairs| {
        for bn in 0..n {
            for mo in 0..m {
                let (g, ml) = (mo / mg, mo % mg);
                let mut s = b.map_or(0.0, |b| b[mo].get());
                for ci in g * cg..(g + 1) * cg {
                    let xb = (bn * c + ci) * in_plane;
                    let wb = (ci * mg + ml) * k_plane;
                    for &(xo, ko) in pairs {
                        s += x[xb + xo].get() * w[wb + ko].get();
                    }
                }
                y[(bn * m + mo) * out_plane + o] = T::put(s);
            }
        }
    });
    Ok(())
}

/// Col2Im: input `[N, C * prod(block), L]` (L = the sliding positions, row-major) into
/// `[N, C, image..]`, summing overlapping blocks.
pub fn col2im<T: Real>(x: &[T], (n, c): (usize, usize), geo: &Geometry, y: &mut [T]) {
    let l: usize = geo.in_sp.iter().product();
    let k_plane: usize = geo.kernel.iter().product();
    let out_plane: usize = geo.out_sp.iter().product();
    geo.each(|o, pairs| {
        for bn in 0..n {
            for ch in 0..c {
                let mut s = 0.0;
                for &(xo, ko) in pairs {
                    s += x[(bn * c * k_plane + ch * k_plane + ko) * l + xo].get();
                }
                y[(bn * c + ch) * out_plane + o] = T::put(s);
            }
        }
    });
}
