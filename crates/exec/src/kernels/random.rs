//! Counter-based random numbers (Philox4x32-10): every draw is a pure function of a 64-bit seed and
//! the drawing element's flat index in its output, so values do not depend on the thread count, on
//! which slice of the output is computed, or on the schedule.
//!
//! Random ops (`RandomUniform*`, `RandomNormal*`, `Bernoulli`, `Multinomial`, `Dropout` in training
//! mode) take a [`Stream`] from [`seed_for`] and fill element `i` from [`Stream::block`]`(i)`.

/// Philox4x32 round multipliers and key increments (Salmon et al., "Parallel random numbers: as
/// easy as 1, 2, 3", SC 2011).
const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Philox4x32 with 10 rounds on one 128-bit counter under a 64-bit key.
pub fn philox4x32_10(mut ctr: [u32; 4], mut key: [u32; 2]) -> [u32; 4] {
    for _ in 0..10 {
        let p0 = u64::from(M0) * u64::from(ctr[0]);
        let p1 = u64::from(M1) * u64::from(ctr[2]);
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        ctr = [hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0];
        key = [key[0].wrapping_add(W0), key[1].wrapping_add(W1)];
    }
    ctr
}

/// Seed used by a random node without a `seed` attribute, mixed with the node's name (so that
/// differently named unseeded nodes draw different values and every run draws the same ones).
pub const DEFAULT_SEED: u64 = 0x6d65_6d70_6c61_6e00;

/// The stream of a random node: its `seed` attribute when given (the bits of the float `seed` of
/// the Random* ops, the integer `seed` of `Dropout`), else [`DEFAULT_SEED`] mixed with an FNV-1a hash
/// of `name` (the node's name; a label, kept by every rewrite of the graph).
pub fn seed_for(seed_attr: Option<u64>, name: &str) -> Stream {
    match seed_attr {
        Some(s) => Stream::new(s),
        None => {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in name.bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
            Stream::new(DEFAULT_SEED ^ h)
        }
    }
}

/// The draws of one seed: element `i` of an output reads `block(i)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stream {
    key: [u32; 2],
}

impl Stream {
    pub fn new(seed: u64) -> Stream {
        Stream {
            key: [seed as u32, (seed >> 32) as u32],
        }
    }

    /// Four independent 32-bit words for element `index`.
    pub fn block(&self, index: u64) -> [u32; 4] {
        philox4x32_10([index as u32, (index >> 32) as u32, 0, 0], self.key)
    }

    /// A uniform draw in `[0, 1)` on the grid `k * 2^-bits` (`bits` <= 53): exact in every float type
    /// with at least `bits` significand bits, so that rounding to it never reaches 1.
    pub fn uniform(&self, index: u64, bits: u32) -> f64 {
        let w = self.block(index);
        unit(w[0], w[1], bits)
    }

    /// A standard normal draw (Box-Muller on two 53-bit uniforms of the element's block).
    pub fn normal(&self, index: u64) -> f64 {
        let w = self.block(index);
        // u1 in (0, 1] so that its logarithm is finite.
        let u1 = 1.0 - unit(w[0], w[1], 53);
        let u2 = unit(w[2], w[3], 53);
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// `bits` high bits of the 64-bit word `(a, b)` as a fraction in `[0, 1)`.
fn unit(a: u32, b: u32, bits: u32) -> f64 {
    let x = (u64::from(a) << 32) | u64::from(b);
    (x >> (64 - bits)) as f64 * (-(bits as f64)).exp2()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn philox_known_answers() {
        // Random123's kat_vectors for philox4x32 with 10 rounds.
        assert_eq!(
            philox4x32_10([0; 4], [0; 2]),
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
        );
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0]
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn uniform_moments_and_ks_bound() {
        let s = Stream::new(42);
        let n = 100_000u64;
        let mut v: Vec<f64> = (0..n).map(|i| s.uniform(i, 24)).collect();
        assert!(v.iter().all(|&x| (0.0..1.0).contains(&x)));
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        // Standard error of the mean is sqrt(1/12/n) ~ 0.0009; of the variance ~ 0.0003.
        assert!((mean - 0.5).abs() < 0.005, "mean {mean}");
        assert!((var - 1.0 / 12.0).abs() < 0.002, "variance {var}");
        // Kolmogorov-Smirnov: D < 1.63 / sqrt(n) at the 1% level.
        v.sort_by(f64::total_cmp);
        let d = v
            .iter()
            .enumerate()
            .map(|(i, &x)| ((i + 1) as f64 / n as f64 - x).max(x - i as f64 / n as f64))
            .fold(0.0, f64::max);
        assert!(d < 1.63 / (n as f64).sqrt(), "KS distance {d}");
    }

    #[test]
    fn normal_moments_and_ks_bound() {
        let s = Stream::new(7);
        let n = 100_000u64;
        let mut v: Vec<f64> = (0..n).map(|i| s.normal(i)).collect();
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.015, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "variance {var}");
        v.sort_by(f64::total_cmp);
        // Normal CDF via erf.
        let cdf = |x: f64| 0.5 * (1.0 + libm::erf(x / std::f64::consts::SQRT_2));
        let d = v
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                let c = cdf(x);
                ((i + 1) as f64 / n as f64 - c).max(c - i as f64 / n as f64)
            })
            .fold(0.0, f64::max);
        assert!(d < 1.63 / (n as f64).sqrt(), "KS distance {d}");
    }

    #[test]
    fn draws_depend_on_seed_and_index_only() {
        let a = Stream::new(1);
        let b = Stream::new(2);
        assert_ne!(a.block(0), b.block(0));
        assert_ne!(a.block(0), a.block(1));
        assert_eq!(
            a.block(123_456_789_012),
            Stream::new(1).block(123_456_789_012)
        );
        // Indices past 2^32 use the counter's high word.
        assert_ne!(a.block(5), a.block(5 + (1 << 32)));
        assert_eq!(seed_for(Some(3), "x"), seed_for(Some(3), "y"));
        assert_ne!(seed_for(None, "x"), seed_for(None, "y"));
        assert_eq!(seed_for(None, "x"), seed_for(None, "x"));
    }

    #[test]
    fn uniform_grid_stays_below_one() {
        // The largest draw on an 11-bit grid is exact in f16 and rounds to below 1.
        let top = unit(u32::MAX, u32::MAX, 11);
        assert_eq!(top, 1.0 - 2f64.powi(-11));
        assert!(half::f16::from_f64(top).to_f64() < 1.0);
    }
}
