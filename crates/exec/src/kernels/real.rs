//! Float elements read and written through f64: the kernels of the ops that compute each output
//! element with a short scalar loop (losses, LpPool, LRN, ...) compute in f64 and round once into
//! the element type, so f16/bf16 need no widened copy (no scratch) and every dtype shares one path.

use half::{bf16, f16};

/// A float element type, converted to and from f64 per element.
pub trait Real: bytemuck::Pod + Send + Sync + 'static {
    fn get(self) -> f64;
    fn put(v: f64) -> Self;
}

impl Real for f32 {
    #[inline(always)]
    fn get(self) -> f64 {
        f64::from(self)
    }
    #[inline(always)]
    fn put(v: f64) -> Self {
        v as f32
    }
}

impl Real for f64 {
    #[inline(always)]
    fn get(self) -> f64 {
        self
    }
    #[inline(always)]
    fn put(v: f64) -> Self {
        v
    }
}

impl Real for f16 {
    #[inline(always)]
    fn get(self) -> f64 {
        self.to_f64()
    }
    #[inline(always)]
    fn put(v: f64) -> Self {
        f16::from_f64(v)
    }
}

impl Real for bf16 {
    #[inline(always)]
    fn get(self) -> f64 {
        self.to_f64()
    }
    #[inline(always)]
    fn put(v: f64) -> Self {
        bf16::from_f64(v)
    }
}

/// Runs `$body` with `$T` bound to the [`Real`] type of float data type `$dt`; any other type
/// evaluates `$else`.
#[macro_export]
macro_rules! real_dispatch {
    ($dt:expr, $T:ident => $body:expr, $else:expr) => {
        match $dt {
            memplan_ir::DataType::F32 => {
                type $T = f32;
                $body
            }
            memplan_ir::DataType::F64 => {
                type $T = f64;
                $body
            }
            memplan_ir::DataType::F16 => {
                type $T = half::f16;
                $body
            }
            memplan_ir::DataType::BF16 => {
                type $T = half::bf16;
                $body
            }
            _ => $else,
        }
    };
}
