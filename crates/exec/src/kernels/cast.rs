//! Cast between every numeric element type and bool, plus the f16/bf16 <-> f32 slice conversions the
//! interpreter uses to do half-precision arithmetic in f32.
//!
//! Semantics (ONNX Cast, pinned where ONNX leaves them open):
//! - float -> integer truncates toward zero; out-of-range values saturate to the target's MIN/MAX and
//!   NaN becomes 0 (Rust `as`). onnxruntime's C++ `static_cast` is undefined there (x86 gives the
//!   "integer indefinite" value), so these cases are implementation-defined in ONNX anyway.
//! - integer -> integer wraps (two's complement truncation), as C++ does.
//! - integer -> float rounds to nearest even in one step (for f32, f64).
//! - anything -> bool is `x != 0` (NaN -> true); bool -> number is 0 or 1.
//! - f64 and integers -> f16/bf16 go through f32 first, as onnxruntime does (`MLFloat16(float(x))`),
//!   which can double-round; f32 -> f16/bf16 rounds to nearest even.
//! - a cast to the same type copies bits (NaN payloads included).
//!
//! The float8, float4e2m1 and packed int4/uint4/int2/uint2 types convert through
//! [`super::minifloat`] instead (the `saturate` and `round_mode` attributes apply there).
//!
//! Each element converts independently with scalar code, so any slicing gives identical bits.

use super::elementwise::{unary, Elem};
use super::matmul::KResult;
use half::{bf16, f16};
use std::any::{Any, TypeId};

/// An element value in the widest form its own type needs, the common currency of [`CastElem`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CastValue {
    F32(f32),
    F64(f64),
    Int(i128),
    Bool(bool),
}

/// An element type Cast can read and write.
pub trait CastElem: Elem {
    /// The value, losslessly.
    fn to_value(self) -> CastValue;
    /// The value converted to `Self` with the semantics in the module docs.
    fn from_value(v: CastValue) -> Self;
}

macro_rules! impl_cast_int {
    ($($t:ty),*) => {$(
        impl CastElem for $t {
            #[inline]
            fn to_value(self) -> CastValue {
                CastValue::Int(self as i128)
            }
            #[inline]
            fn from_value(v: CastValue) -> Self {
                match v {
                    CastValue::F32(x) => x as $t,
                    CastValue::F64(x) => x as $t,
                    CastValue::Int(i) => i as $t,
                    CastValue::Bool(b) => b as $t,
                }
            }
        }
    )*};
}
impl_cast_int!(i8, i16, i32, i64, u8, u16, u32, u64);

impl CastElem for f32 {
    #[inline]
    fn to_value(self) -> CastValue {
        CastValue::F32(self)
    }
    #[inline]
    fn from_value(v: CastValue) -> Self {
        match v {
            CastValue::F32(x) => x,
            CastValue::F64(x) => x as f32,
            CastValue::Int(i) => i as f32,
            CastValue::Bool(b) => b as u8 as f32,
        }
    }
}

impl CastElem for f64 {
    #[inline]
    fn to_value(self) -> CastValue {
        CastValue::F64(self)
    }
    #[inline]
    fn from_value(v: CastValue) -> Self {
        match v {
            CastValue::F32(x) => x as f64,
            CastValue::F64(x) => x,
            CastValue::Int(i) => i as f64,
            CastValue::Bool(b) => b as u8 as f64,
        }
    }
}

macro_rules! impl_cast_half {
    ($($t:ty),*) => {$(
        impl CastElem for $t {
            #[inline]
            fn to_value(self) -> CastValue {
                CastValue::F32(self.to_f32())
            }
            #[inline]
            fn from_value(v: CastValue) -> Self {
                <$t>::from_f32(f32::from_value(v))
            }
        }
    )*};
}
impl_cast_half!(f16, bf16);

impl CastElem for bool {
    #[inline]
    fn to_value(self) -> CastValue {
        CastValue::Bool(self)
    }
    #[inline]
    fn from_value(v: CastValue) -> Self {
        match v {
            CastValue::F32(x) => x != 0.0,
            CastValue::F64(x) => x != 0.0,
            CastValue::Int(i) => i != 0,
            CastValue::Bool(b) => b,
        }
    }
}

/// ONNX Cast from `S` to `D`; `src` and `dst` must have equal lengths.
pub fn cast<S: CastElem, D: CastElem>(src: &[S], dst: &mut [D]) -> KResult<()> {
    if TypeId::of::<S>() == TypeId::of::<D>() {
        return unary(src, dst, |v| match (&v as &dyn Any).downcast_ref::<D>() {
            Some(d) => *d,
            None => D::from_value(v.to_value()),
        });
    }
    unary(src, dst, |v| D::from_value(v.to_value()))
}

/// f16 -> f32 (exact).
pub fn f16_to_f32(src: &[f16], dst: &mut [f32]) -> KResult<()> {
    cast(src, dst)
}

/// f32 -> f16 (round to nearest even).
pub fn f32_to_f16(src: &[f32], dst: &mut [f16]) -> KResult<()> {
    cast(src, dst)
}

/// bf16 -> f32 (exact).
pub fn bf16_to_f32(src: &[bf16], dst: &mut [f32]) -> KResult<()> {
    cast(src, dst)
}

/// f32 -> bf16 (round to nearest even).
pub fn f32_to_bf16(src: &[f32], dst: &mut [bf16]) -> KResult<()> {
    cast(src, dst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::elementwise::testutil::{bits, data_f32, data_i64, ranges};
    use proptest::prelude::*;

    fn c<S: CastElem, D: CastElem>(src: &[S]) -> Vec<D> {
        let mut d = vec![D::default(); src.len()];
        cast(src, &mut d).unwrap();
        d
    }

    #[test]
    fn float_to_int_truncates_and_saturates() {
        let x = [-1.7f32, 1.7, -0.5, f32::NAN, 3e9, -3e9, f32::INFINITY];
        assert_eq!(
            c::<f32, i32>(&x),
            [-1, 1, 0, 0, i32::MAX, i32::MIN, i32::MAX]
        );
        assert_eq!(c::<f32, u8>(&x), [0, 1, 0, 0, 255, 0, 255]);
        assert_eq!(c::<f64, i64>(&[-2.99, 2.99]), [-2, 2]);
        let h = [f16::from_f32(-3.5), f16::from_f32(100.25)];
        assert_eq!(c::<f16, i8>(&h), [-3, 100]);
    }

    #[test]
    fn int_to_int_wraps_and_int_to_float_rounds_once() {
        assert_eq!(c::<i32, u8>(&[-1, 256, 300]), [255, 0, 44]);
        assert_eq!(c::<u64, i64>(&[u64::MAX]), [-1]);
        assert_eq!(
            c::<i64, f32>(&[(1 << 24) + 1, (1 << 24) + 3]),
            [16777216.0, 16777220.0]
        );
        // One rounding from i64 to f32: via f64 would double-round this value up to 2^53+2^30.
        let v = (1i64 << 53) + (1 << 29) + 1;
        assert_eq!(
            c::<i64, f32>(&[v])[0],
            (1u64 << 53) as f32 + (1u64 << 30) as f32
        );
        assert_eq!(c::<u64, f64>(&[u64::MAX])[0], 18446744073709551616.0);
    }

    #[test]
    fn bool_casts() {
        assert_eq!(
            c::<f32, bool>(&[0.0, -0.0, 0.1, f32::NAN]),
            [false, false, true, true]
        );
        assert_eq!(c::<i8, bool>(&[0, -1]), [false, true]);
        assert_eq!(c::<bool, f32>(&[true, false]), [1.0, 0.0]);
        assert_eq!(c::<bool, i64>(&[true, false]), [1, 0]);
        assert_eq!(c::<bool, bf16>(&[true])[0], bf16::ONE);
    }

    #[test]
    fn half_conversions() {
        let x = [
            1.0f32,
            65504.0,
            65520.0,
            1.0 + 1.0 / 2048.0,
            1.0 + 3.0 / 2048.0,
        ];
        let h: Vec<f16> = c(&x);
        let back: Vec<f32> = c(&h);
        // 65520 rounds to infinity; ties go to even.
        assert_eq!(back, [1.0, 65504.0, f32::INFINITY, 1.0, 1.0 + 4.0 / 2048.0]);
        let mut b = [bf16::ZERO; 2];
        f32_to_bf16(&[1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0], &mut b).unwrap();
        let mut w = [0f32; 2];
        bf16_to_f32(&b, &mut w).unwrap();
        assert_eq!(w, [1.0, 1.0 + 4.0 / 256.0]);
        let mut h2 = [f16::ZERO; 1];
        f32_to_f16(&[0.5], &mut h2).unwrap();
        let mut w2 = [0f32; 1];
        f16_to_f32(&h2, &mut w2).unwrap();
        assert_eq!(w2, [0.5]);
        assert_eq!(c::<f64, f16>(&[0.1])[0], f16::from_f32(0.1));
        assert_eq!(
            c::<f16, bf16>(&[f16::from_f32(3.0)])[0],
            bf16::from_f32(3.0)
        );
    }

    #[test]
    fn same_type_copies_bits_and_lengths_are_checked() {
        let nan = f32::from_bits(0x7fa0_0001);
        assert_eq!(c::<f32, f32>(&[nan])[0].to_bits(), 0x7fa0_0001);
        let mut d = [0i32; 2];
        assert!(cast(&[1f32], &mut d).is_err());
    }

    proptest! {
        #[test]
        fn cast_chunk_identity(
            n in 0usize..200,
            cuts in prop::collection::vec(any::<usize>(), 0..5),
            seed in any::<u64>(),
        ) {
            let x: Vec<f32> = data_f32(n, seed).iter().map(|v| v * 1e4).collect();
            let xi = data_i64(n, seed, -(1 << 40), 1 << 40);
            let wh: Vec<f16> = c(&x);
            let wi: Vec<i16> = c(&x);
            let wf: Vec<f32> = c(&xi);
            for (lo, hi) in ranges(n, &cuts) {
                let ph: Vec<f16> = c(&x[lo..hi]);
                prop_assert_eq!(
                    ph.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    wh[lo..hi].iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                );
                prop_assert_eq!(c::<f32, i16>(&x[lo..hi]), wi[lo..hi].to_vec());
                prop_assert_eq!(bits(&c::<i64, f32>(&xi[lo..hi])), bits(&wf[lo..hi]));
            }
        }
    }
}
