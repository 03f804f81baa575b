//! A branch-free f32 `exp` that the compiler vectorizes.
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
}
