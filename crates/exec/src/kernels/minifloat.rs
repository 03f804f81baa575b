//! Scalar conversions for the narrow ONNX element types the executor holds only as bytes: the
//! float8 formats (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz), the exponent-only float8e8m0, float4e2m1, and
//! the packed integers int4/uint4/int2/uint2.
//!
//! Semantics mirror the ONNX reference implementation (`onnx.reference` Cast, which uses
//! `ml_dtypes` and `onnx.numpy_helper`):
//! - float -> float8/float4 rounds to nearest even, subnormals included. With `saturate` (ONNX's
//!   default) a value beyond the largest finite value, infinities included, becomes that value with
//!   its sign (the reference clips before converting, so e5m2 turns inf into 57344 too). Without
//!   it an overflow becomes inf (e5m2), NaN with the sign (e4m3fn) or the single NaN 0x80 (fnuz).
//!   float4e2m1 has no inf or NaN and always saturates; NaN becomes the zero of the opposite sign,
//!   as `ml_dtypes` does.
//! - NaN stays NaN (e5m2 0x7E, e4m3fn 0x7F, with the sign; fnuz 0x80); fnuz formats have no
//!   negative zero, so -0 and negative values that round to zero become +0.
//! - float -> float8e8m0 follows `onnx.numpy_helper.to_float8e8m0` on the f32 value: the sign is
//!   dropped, NaN and inf become 0xFF, and the exponent is rounded by `round_mode`.
//! - float -> int4/uint4/int2/uint2 truncates to i32 and keeps the low bits (two's complement
//!   wrap); NaN and values outside i32 become 0 (x86's "integer indefinite" has zero low bits).
//!   integer -> these types wraps.
//!
//! Sub-byte types are packed as ONNX stores them: element `i` sits at bit `(i % per_byte) * bits`
//! of byte `i / per_byte` (low bits first), and the padding bits of the last byte are zero.

/// Layout and special values of a float8 or float4 format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MiniFloat {
    exp_bits: u32,
    man_bits: u32,
    bias: i32,
    /// Largest finite magnitude code (sign bit clear).
    max_code: u32,
    kind: Special,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Special {
    /// IEEE-like: all-ones exponent holds inf (mantissa 0) and NaN.
    Ieee,
    /// "fn": no inf; only the all-ones code (either sign) is NaN.
    Fn,
    /// "fnuz": no inf, no negative zero; 0x80 is the single NaN.
    Fnuz,
    /// No inf and no NaN (float4e2m1).
    None,
}

pub const E4M3FN: MiniFloat = MiniFloat {
    exp_bits: 4,
    man_bits: 3,
    bias: 7,
    max_code: 0x7E,
    kind: Special::Fn,
};
pub const E4M3FNUZ: MiniFloat = MiniFloat {
    exp_bits: 4,
    man_bits: 3,
    bias: 8,
    max_code: 0x7F,
    kind: Special::Fnuz,
};
pub const E5M2: MiniFloat = MiniFloat {
    exp_bits: 5,
    man_bits: 2,
    bias: 15,
    max_code: 0x7B,
    kind: Special::Ieee,
};
pub const E5M2FNUZ: MiniFloat = MiniFloat {
    exp_bits: 5,
    man_bits: 2,
    bias: 16,
    max_code: 0x7F,
    kind: Special::Fnuz,
};
pub const E2M1: MiniFloat = MiniFloat {
    exp_bits: 2,
    man_bits: 1,
    bias: 1,
    max_code: 0x7,
    kind: Special::None,
};

impl MiniFloat {
    fn sign_bit(self) -> u32 {
        1 << (self.exp_bits + self.man_bits)
    }

    /// The code of `x`, rounded to nearest even (semantics in the module docs).
    pub fn encode(self, x: f64, saturate: bool) -> u8 {
        let sign = if x.is_sign_negative() {
            self.sign_bit()
        } else {
            0
        };
        if x.is_nan() {
            return match self.kind {
                Special::Ieee => (sign | (self.max_code + 3)) as u8,
                Special::Fn => (sign | (self.max_code + 1)) as u8,
                Special::Fnuz => 0x80,
                Special::None => (sign ^ self.sign_bit()) as u8,
            };
        }
        let a = x.abs();
        let code = if a.is_infinite() {
            u32::MAX
        } else {
            self.round_magnitude(a)
        };
        let code = if code <= self.max_code {
            code
        } else if saturate || self.kind == Special::None {
            self.max_code
        } else {
            match self.kind {
                // The inf code (e5m2) or the NaN code (e4m3fn) follows the largest finite one.
                Special::Ieee | Special::Fn => self.max_code + 1,
                Special::Fnuz => return 0x80,
                Special::None => unreachable!("float4 always saturates"),
            }
        };
        if self.kind == Special::Fnuz && code == 0 {
            return 0;
        }
        (sign | code) as u8
    }

    /// The magnitude code of the finite `a >= 0`, rounded to nearest even; may exceed `max_code`.
    fn round_magnitude(self, a: f64) -> u32 {
        let emin = 1 - self.bias;
        if a < pow2(emin) {
            // Subnormal (or zero): a multiple of the smallest subnormal; a carry gives the first
            // normal.
            let q = (a / pow2(emin - self.man_bits as i32)).round_ties_even();
            return q as u32;
        }
        // `a` is a normal f64 here, so its exponent field gives floor(log2(a)).
        let e = ((a.to_bits() >> 52) & 0x7FF) as i32 - 1023;
        let frac = (a / pow2(e) - 1.0) * f64::from(1u32 << self.man_bits);
        let m = frac.round_ties_even() as u64;
        let biased = (e + self.bias) as u64;
        // A mantissa carry (m == 2^man_bits) moves into the exponent by itself.
        let code = (biased << self.man_bits) + m;
        code.min(u32::MAX as u64) as u32
    }

    /// The value of `code` (exact in f32).
    pub fn decode(self, code: u8) -> f32 {
        let code = u32::from(code) & (2 * self.sign_bit() - 1);
        let sign = code & self.sign_bit() != 0;
        let mag = code & (self.sign_bit() - 1);
        match self.kind {
            Special::Fn if mag == self.max_code + 1 => return f32::NAN,
            Special::Fnuz if code == 0x80 => return f32::NAN,
            Special::Ieee if mag > self.max_code => {
                let v = if mag == self.max_code + 1 {
                    f32::INFINITY
                } else {
                    f32::NAN
                };
                return if sign { -v } else { v };
            }
            _ => {}
        }
        let exp = (mag >> self.man_bits) as i32;
        let man = (mag & ((1 << self.man_bits) - 1)) as f64;
        let v = if exp == 0 {
            man * pow2(1 - self.bias - self.man_bits as i32)
        } else {
            (1.0 + man / f64::from(1u32 << self.man_bits)) * pow2(exp - self.bias)
        };
        let v = v as f32;
        if sign {
            -v
        } else {
            v
        }
    }
}

/// 2^e for the small exponents used here (exact).
fn pow2(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// Rounding of float -> float8e8m0 (the `round_mode` attribute of Cast).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoundMode {
    Up,
    Down,
    Nearest,
}

impl RoundMode {
    /// The mode named by ONNX's `round_mode` attribute (`up`, `down`, `nearest`).
    pub fn parse(s: &str) -> Option<RoundMode> {
        match s {
            "up" => Some(RoundMode::Up),
            "down" => Some(RoundMode::Down),
            "nearest" => Some(RoundMode::Nearest),
            _ => None,
        }
    }
}

/// f32 -> float8e8m0 as `onnx.numpy_helper.to_float8e8m0` computes it (bit for bit, including its
/// handling of zero and f32 subnormals, whose exponent field is 0).
pub fn e8m0_encode(x: f32, saturate: bool, mode: RoundMode) -> u8 {
    let b = x.to_bits();
    let exp = (b >> 23) & 0xFF;
    if exp == 0xFF {
        return 0xFF;
    }
    let up = match mode {
        RoundMode::Down => false,
        RoundMode::Up => b & 0x7F_FFFF != 0,
        RoundMode::Nearest => {
            let g = b & 0x40_0000 != 0;
            let r = b & 0x20_0000 != 0;
            let s = b & 0x1F_FFFF != 0;
            g && (r || s || exp > 0)
        }
    };
    if up && !(saturate && exp == 0xFE) {
        (exp + 1) as u8
    } else {
        exp as u8
    }
}

/// float8e8m0 -> f32: 2^(code - 127), 0xFF is NaN.
pub fn e8m0_decode(code: u8) -> f32 {
    match code {
        0xFF => f32::NAN,
        0 => f32::from_bits(0x40_0000),
        c => f32::from_bits(u32::from(c) << 23),
    }
}

/// A packed integer type: its width and signedness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubInt {
    pub bits: u32,
    pub signed: bool,
}

pub const INT4: SubInt = SubInt {
    bits: 4,
    signed: true,
};
pub const UINT4: SubInt = SubInt {
    bits: 4,
    signed: false,
};
pub const INT2: SubInt = SubInt {
    bits: 2,
    signed: true,
};
pub const UINT2: SubInt = SubInt {
    bits: 2,
    signed: false,
};

impl SubInt {
    fn mask(self) -> u8 {
        ((1u32 << self.bits) - 1) as u8
    }

    /// The low bits of an integer (two's complement wrap).
    pub fn wrap_int(self, i: i128) -> u8 {
        (i as u8) & self.mask()
    }

    /// A float truncated through i32, then wrapped; NaN and values outside i32 give 0.
    pub fn wrap_float(self, x: f64) -> u8 {
        let t = x.trunc();
        if x.is_nan() || t < i32::MIN as f64 || t > i32::MAX as f64 {
            return 0;
        }
        self.wrap_int(t as i128)
    }

    /// The value of the low `bits` bits of `code`.
    pub fn value(self, code: u8) -> i128 {
        let c = code & self.mask();
        if self.signed && c >> (self.bits - 1) != 0 {
            i128::from(c) - (1i128 << self.bits)
        } else {
            i128::from(c)
        }
    }
}

/// Element `i` (a code of `bits` bits) of packed bytes.
pub fn packed_get(bytes: &[u8], bits: u32, i: usize) -> u8 {
    let per = (8 / bits) as usize;
    (bytes[i / per] >> ((i % per) as u32 * bits)) & ((1u32 << bits) - 1) as u8
}

/// Packs `codes` (each below 2^bits) into whole bytes, zero-padding the last one.
pub fn pack_byte(codes: impl Iterator<Item = u8>, bits: u32) -> u8 {
    codes
        .enumerate()
        .fold(0u8, |b, (k, c)| b | (c << (k as u32 * bits)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(f: MiniFloat, xs: &[f32], sat: bool) -> Vec<u8> {
        xs.iter().map(|&x| f.encode(x as f64, sat)).collect()
    }

    #[test]
    fn e4m3fn_rounding_saturation_and_specials() {
        let f = E4M3FN;
        // 464 is the tie between 448 (0x7E, even) and the NaN code; 472 rounds past the max.
        let x = [448.0, 464.0, 472.0, 1e6, f32::INFINITY, f32::NEG_INFINITY];
        assert_eq!(all(f, &x, true), [0x7E, 0x7E, 0x7E, 0x7E, 0x7E, 0xFE]);
        assert_eq!(all(f, &x, false), [0x7E, 0x7E, 0x7F, 0x7F, 0x7F, 0xFF]);
        assert_eq!(all(f, &[f32::NAN, -f32::NAN], true), [0x7F, 0xFF]);
        // Ties to even: 1.0625 lies halfway between 1.0 (0x38) and 1.125 (0x39).
        assert_eq!(
            all(f, &[1.0625, 1.1875, -0.0, 1e-7], true),
            [0x38, 0x3A, 0x80, 0]
        );
        // Subnormals: the smallest is 2^-9; half of it ties to zero, 1.5 of it to 2^-8.
        let s = 2f32.powi(-9);
        assert_eq!(
            all(f, &[s, s / 2.0, 1.5 * s, 7.0 * s, 7.5 * s], true),
            [1, 0, 2, 7, 8]
        );
        assert_eq!(f.decode(0x7E), 448.0);
        assert_eq!(f.decode(0x01), s);
        assert_eq!(f.decode(0x80).to_bits(), (-0.0f32).to_bits());
        assert!(f.decode(0x7F).is_nan() && f.decode(0xFF).is_nan());
    }

    #[test]
    fn fnuz_formats_have_one_nan_and_no_negative_zero() {
        for f in [E4M3FNUZ, E5M2FNUZ] {
            assert_eq!(all(f, &[f32::NAN, -f32::NAN, 1e9, -1e9], false), [0x80; 4]);
            assert_eq!(all(f, &[-0.0, -1e-9], false), [0, 0]);
            assert!(f.decode(0x80).is_nan());
        }
        assert_eq!(
            all(E4M3FNUZ, &[1e9, -1e9, f32::INFINITY], true),
            [0x7F, 0xFF, 0x7F]
        );
        assert_eq!(E4M3FNUZ.decode(0x7F), 240.0);
        assert_eq!(E5M2FNUZ.decode(0x7F), 57344.0);
        assert_eq!(E5M2FNUZ.decode(0x01), 2f32.powi(-17));
    }

    #[test]
    fn e5m2_keeps_infinity_without_saturation() {
        let f = E5M2;
        let x = [57344.0, 61440.0, 1e6, f32::INFINITY, f32::NEG_INFINITY];
        assert_eq!(all(f, &x, true), [0x7B, 0x7B, 0x7B, 0x7B, 0xFB]);
        // 61440 is the tie between 57344 (mantissa 11, odd) and the next binade: it rounds up.
        assert_eq!(all(f, &x, false), [0x7B, 0x7C, 0x7C, 0x7C, 0xFC]);
        assert_eq!(all(f, &[f32::NAN], false), [0x7E]);
        assert_eq!(f.decode(0x7C), f32::INFINITY);
        assert!(f.decode(0x7D).is_nan());
        assert_eq!(f.decode(0x01), 2f32.powi(-16));
        // Values of the test set of the ONNX node tests, checked against ml_dtypes.
        assert_eq!(all(f, &[480.0, 464.0, 472.0], true), [96, 95, 95]);
    }

    #[test]
    fn float4_saturates_and_rounds_ties_to_even() {
        let f = E2M1;
        let x = [
            0.25,
            0.75,
            1.25,
            2.5,
            5.0,
            7.0,
            1e6,
            f32::INFINITY,
            -8.0,
            -0.0,
        ];
        assert_eq!(all(f, &x, false), [0, 2, 2, 4, 6, 7, 7, 7, 15, 8]);
        assert_eq!(all(f, &[f32::NAN, -f32::NAN], false), [8, 0]);
        let v: Vec<f32> = (0..16).map(|c| f.decode(c)).collect();
        assert_eq!(
            v,
            [
                0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0,
                -6.0
            ]
        );
    }

    #[test]
    fn e8m0_matches_the_reference_rounding() {
        let up = |x: f32| e8m0_encode(x, true, RoundMode::Up);
        // 0.124 rounds up to 2^-3; 1.1 to 2; zero keeps exponent field 0; the sign is dropped.
        assert_eq!(
            [
                up(0.0),
                up(0.124),
                up(0.25),
                up(1.1),
                up(-2.0),
                up(f32::NAN)
            ],
            [0, 124, 125, 128, 128, 0xFF]
        );
        assert_eq!(up(f32::MAX), 0xFE);
        assert_eq!(e8m0_encode(f32::MAX, false, RoundMode::Up), 0xFF);
        assert_eq!(e8m0_encode(1.75, true, RoundMode::Down), 127);
        // Nearest: 1.5 (guard bit only) rounds up because the exponent field is non-zero.
        assert_eq!(e8m0_encode(1.5, true, RoundMode::Nearest), 128);
        assert_eq!(e8m0_encode(1.25, true, RoundMode::Nearest), 127);
        assert_eq!(e8m0_decode(127), 1.0);
        assert_eq!(e8m0_decode(0), 2f32.powi(-127));
        assert!(e8m0_decode(0xFF).is_nan());
    }

    #[test]
    fn sub_byte_integers_wrap_and_pack_low_bits_first() {
        let x = [
            -9.0,
            -8.5,
            7.5,
            15.0,
            300.0,
            -300.0,
            3e9,
            f64::NAN,
            f64::INFINITY,
        ];
        let i4: Vec<i128> = x.iter().map(|&v| INT4.value(INT4.wrap_float(v))).collect();
        assert_eq!(i4, [7, -8, 7, -1, -4, 4, 0, 0, 0]);
        let u2: Vec<i128> = x
            .iter()
            .map(|&v| UINT2.value(UINT2.wrap_float(v)))
            .collect();
        assert_eq!(u2, [3, 0, 3, 3, 0, 0, 0, 0, 0]);
        assert_eq!(INT2.value(INT2.wrap_int(-3)), 1);
        assert_eq!(UINT4.value(UINT4.wrap_int(-1)), 15);
        let b = pack_byte([1u8, 0xE].into_iter(), 4);
        assert_eq!(b, 0xE1);
        assert_eq!(packed_get(&[b], 4, 1), 0xE);
        assert_eq!(INT4.value(packed_get(&[b], 4, 1)), -2);
        assert_eq!(pack_byte([3u8, 0, 2].into_iter(), 2), 0b10_00_11);
        assert_eq!(packed_get(&[0b10_00_11], 2, 2), 2);
    }
}
