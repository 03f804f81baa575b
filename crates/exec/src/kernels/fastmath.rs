//! Branch-free f32 `exp`, `ln`, `erf` and `tanh` that the compiler vectorizes.
//!
//! [`exp_f32`] is Cody-Waite range reduction (`x = n ln2 + r`, `|r| <= ln2 / 2`) with the Cephes
//! degree-7 polynomial for `e^r`, scaled by `2^n` in two exponent steps so that results from the
//! smallest subnormal to overflow come out right. Its error is within 2 ulp of the correctly rounded
//! value on normal results. It is a pure function of its argument made of plain IEEE operations (no
//! FMA contraction, no table), so every element gets the same bits whatever slice or thread computes
//! it, and whether its loop is compiled for AVX2 or for the baseline.

/// `e^x` for f32: `+inf` above ~88.72, `0` below ~-103.97, NaN for NaN.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split so that `n * LN2_HI` is exact for |n| < 2^9.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding then subtracting 1.5 * 2^23 rounds to the nearest integer (ties to even).
    const ROUND: f32 = 12_582_912.0;
    // Clamped so that `n` stays in [-150, 129]; comparisons are false for NaN, which passes through.
    let xc = x.clamp(-104.0, 89.0);
    let t = xc * LOG2E + ROUND;
    let nf = t - ROUND;
    let n = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let r = (xc - nf * LN2_HI) - nf * LN2_LO;
    let r2 = r * r;
    let p = ((((((1.987_569_1e-4 * r + 1.398_2e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 0.166_666_65)
        * r
        + 0.5)
        * r2
        + r)
        + 1.0;
    // 2^n as 2^n1 * 2^n2 with both halves normal exponents (n in [-150, 129]).
    let n1 = n >> 1;
    let n2 = n - n1;
    let s1 = f32::from_bits(((n1 + 127) as u32) << 23);
    // Below the clamp the result is +0 (`p * 2^-150 < 2^-150`, half the smallest subnormal): it is
    // selected without the last product, which would underflow, and an underflowing product takes
    // a microcode assist on x86 that costs a hundred cycles (a masked softmax's -1e9 logits).
    let under = x < -104.0;
    let s2 = if under {
        1.0
    } else {
        f32::from_bits(((n2 + 127) as u32) << 23)
    };
    let y = p * s1 * s2;
    if under {
        0.0
    } else {
        y
    }
}

/// The logistic function `1 / (1 + e^-x)`.
#[inline(always)]
pub fn sigmoid_f32(x: f32) -> f32 {
    1.0 / (1.0 + exp_f32(-x))
}

/// `x * p(x^2) / q(x^2)` with `p` of coefficients `num` (from `x^0` up) and `q` of `den`: the odd
/// rational form of [`erf_f32`] and [`tanh_f32`], evaluated by Horner's rule without FMA.
#[inline(always)]
fn odd_rational<const P: usize, const Q: usize>(x: f32, num: [f32; P], den: [f32; Q]) -> f32 {
    let x2 = x * x;
    let mut p = num[P - 1];
    for &c in num[..P - 1].iter().rev() {
        p = p * x2 + c;
    }
    let mut q = den[Q - 1];
    for &c in den[..Q - 1].iter().rev() {
        q = q * x2 + c;
    }
    x * p / q
}

/// The error function for f32: a rational approximation on `[-4, 4]` (Eigen's and XLA's f32 `erf`),
/// `+-1` beyond; within 8 ulp of `erf` and 5e-7 of it absolutely; `erf(-0) = -0`, NaN for NaN.
/// Branch-free, so that a loop of it vectorizes.
#[inline(always)]
pub fn erf_f32(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    odd_rational(
        x,
        [
            -1.6096033e-2,
            -2.9546e-3,
            -7.3499064e-4,
            -5.6925062e-5,
            -2.101024e-6,
            2.7706815e-8,
            -2.7261424e-10,
        ],
        [
            -1.4264739e-2,
            -7.3733293e-3,
            -1.682827e-3,
            -2.1337405e-4,
            -1.45660715e-5,
        ],
    )
}

/// The hyperbolic tangent for f32: a rational approximation on `[-7.905, 7.905]` (Eigen's fast
/// `tanh`), `+-1` beyond, `x` itself below `|x| < 4e-4` (where `tanh x = x` in f32); within 8 ulp
/// of `tanh`; NaN for NaN. Branch-free, so that a loop of it vectorizes.
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    let c = x.clamp(-7.905_311, 7.905_311);
    let y = odd_rational(
        c,
        [
            4.8935246e-3,
            6.3726195e-4,
            1.48572235e-5,
            5.1222973e-8,
            -8.604672e-11,
            2.000188e-13,
            -2.7607684e-16,
        ],
        [4.893525e-3, 2.2684347e-3, 1.1853471e-4, 1.1982584e-6],
    );
    if x.abs() < 4e-4 {
        x
    } else {
        y
    }
}

/// The natural logarithm for f32 (Cephes `logf`): `x = 2^e m` with `m` in `[sqrt(1/2), sqrt(2))`,
/// `ln m` from a degree-8 polynomial in `m - 1`, plus `e ln 2` in two parts. Within 2 ulp of the
/// correctly rounded value for every positive normal and subnormal `x`; `ln(+-0) = -inf`,
/// `ln(+inf) = +inf`, NaN below zero and for NaN. Branch-free (subnormals are scaled by `2^23`
/// first), so that a loop of it vectorizes; plain IEEE operations, so the same bits everywhere.
#[inline(always)]
pub fn ln_f32(x: f32) -> f32 {
    const SQRT_HALF: f32 = std::f32::consts::FRAC_1_SQRT_2;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let sub = x < f32::MIN_POSITIVE;
    let xs = if sub { x * 8_388_608.0 } else { x };
    let bits = xs.to_bits();
    // The exponent of `xs` as that of a mantissa in [0.5, 1).
    let e = ((bits >> 23) & 0xff) as i32 - 126 - if sub { 23 } else { 0 };
    let m = f32::from_bits((bits & 0x007f_ffff) | 0x3f00_0000);
    let low = m < SQRT_HALF;
    let e = e - low as i32;
    let f = if low { m + m - 1.0 } else { m - 1.0 };
    let z = f * f;
    let p = (((((((7.037_683_6e-2 * f - 1.151_461e-1) * f + 1.167_699_9e-1) * f
        - 1.242_014_1e-1)
        * f
        + 1.424_932_3e-1)
        * f
        - 1.666_805_8e-1)
        * f
        + 2.000_071_5e-1)
        * f
        - 2.499_999_4e-1)
        * f
        + 3.333_333e-1;
    let ef = e as f32;
    let y = f * z * p + ef * LN2_LO - 0.5 * z;
    let r = (f + y) + ef * LN2_HI;
    let r = if x == f32::INFINITY { x } else { r };
    let r = if x == 0.0 { f32::NEG_INFINITY } else { r };
    // Below zero and NaN (every comparison with NaN is false).
    if x >= 0.0 {
        r
    } else {
        f32::NAN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_the_clamp_exp_is_the_clamps_value_zero() {
        // What the product gives at the clamp itself, and so gave below it before the select.
        assert_eq!(exp_f32(-104.0).to_bits(), 0.0f32.to_bits());
        for x in [-104.5f32, -1e9, f32::NEG_INFINITY, f32::MIN] {
            assert_eq!(exp_f32(x).to_bits(), 0.0f32.to_bits(), "{x}");
        }
        assert!(exp_f32(f32::NAN).is_nan());
        assert!(exp_f32(-103.9) > 0.0);
    }

    /// Distance in units in the last place between two finite f32 of the same sign.
    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    #[test]
    fn exp_matches_f64_within_2_ulp() {
        let mut worst = 0;
        let mut x = -87.0f32;
        while x < 88.7 {
            let want = (x as f64).exp() as f32;
            let got = exp_f32(x);
            worst = worst.max(ulps(got, want));
            x += 0.000_71;
        }
        assert!(worst <= 2, "worst error {worst} ulp");
    }

    #[test]
    fn exp_edges() {
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(-0.0), 1.0);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(89.0), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(-1000.0), 0.0);
        assert!(exp_f32(f32::NAN).is_nan());
        // Subnormal results stay close to the true value.
        for x in [-88.0f32, -95.0, -100.0, -103.0] {
            let want = (x as f64).exp();
            let got = exp_f32(x) as f64;
            assert!(
                (got - want).abs() <= 2.0 * 1.4e-45 + want * 1e-6,
                "{x}: {got} vs {want}"
            );
        }
        let m = exp_f32(88.72);
        assert!(m.is_finite() && (m as f64 / (88.72f32 as f64).exp() - 1.0).abs() < 1e-6);
    }

    /// Both within 8 ulp of the f64 function rounded to f32 (and 5e-7 absolutely) over a sweep of
    /// magnitudes from 1e-30 to 10 and a dense grid of [-10, 10]; signs of zero and NaN kept.
    #[test]
    fn erf_and_tanh_are_within_8_ulp() {
        fn erf64(x: f64) -> f64 {
            libm::erf(x)
        }
        let mut xs: Vec<f32> = (-100_000..=100_000).map(|i| i as f32 * 1e-4).collect();
        let mut m = 1e-30f32;
        while m < 10.0 {
            xs.push(m);
            xs.push(-m);
            m *= 1.003;
        }
        for (name, f, g) in [
            ("erf", erf_f32 as fn(f32) -> f32, erf64 as fn(f64) -> f64),
            ("tanh", tanh_f32, f64::tanh),
        ] {
            for &x in &xs {
                let (y, r) = (f(x), g(x as f64) as f32);
                assert!(
                    ulps(y, r) <= 8 && (y as f64 - g(x as f64)).abs() <= 5e-7,
                    "{name}({x}) = {y}, want {r}"
                );
            }
            assert_eq!(f(-0.0).to_bits(), (-0.0f32).to_bits(), "{name}");
            assert_eq!(f(0.0).to_bits(), 0.0f32.to_bits(), "{name}");
            assert!(f(f32::NAN).is_nan(), "{name}");
            assert!((f(f32::INFINITY) - 1.0).abs() <= 1e-7, "{name}");
            assert!((f(f32::NEG_INFINITY) + 1.0).abs() <= 1e-7, "{name}");
        }
    }

    #[test]
    fn ln_matches_f64_within_2_ulp_on_normals_and_subnormals() {
        let mut worst = (0, 0.0f32);
        let mut x = f32::from_bits(1);
        while x < f32::MAX {
            for y in [x, f32::from_bits(x.to_bits() + 1), x * 0.7, x * 1.3] {
                if !y.is_finite() {
                    continue;
                }
                let want = (y as f64).ln() as f32;
                let u = ulps(ln_f32(y), want);
                if u > worst.0 {
                    worst = (u, y);
                }
            }
            x *= 1.000_37;
            x = x.max(f32::from_bits(x.to_bits() + 1));
        }
        for i in 1..=200_000 {
            let y = i as f32 * 1e-5;
            assert!(ulps(ln_f32(y), (y as f64).ln() as f32) <= 2, "ln({y})");
        }
        assert!(worst.0 <= 2, "worst error {} ulp at {}", worst.0, worst.1);
    }

    #[test]
    fn ln_edges() {
        assert_eq!(ln_f32(1.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(ln_f32(0.0), f32::NEG_INFINITY);
        assert_eq!(ln_f32(-0.0), f32::NEG_INFINITY);
        assert_eq!(ln_f32(f32::INFINITY), f32::INFINITY);
        assert!(ln_f32(-1.0).is_nan());
        assert!(ln_f32(f32::NEG_INFINITY).is_nan());
        assert!(ln_f32(f32::NAN).is_nan());
        assert_eq!(ln_f32(f32::MAX), (f32::MAX as f64).ln() as f32);
    }
}
