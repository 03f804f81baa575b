//! CPU kernels over contiguous row-major slices. Every kernel computes each output element the same way
//! whatever sub-block of the output it is asked for, so chunked execution is bit-identical.

pub mod cast;
pub mod conv;
pub mod conv_transpose;
pub mod elementwise;
pub mod fastmath;
pub mod gemm_small;
pub mod index;
pub mod matmul;
pub mod minifloat;
pub mod movement;
pub mod norm;
pub(crate) mod par;
pub mod pool;
pub mod random;
pub mod real;
pub mod reduce;
pub mod scalar_norm;
pub mod topk;

/// Copies `src` into `dst` (of the same length): element by element when it is short (under 16
/// elements), where a call to `memcpy` per row would cost more than the copy, else with one
/// `copy_from_slice`.
#[inline]
pub(crate) fn copy_row<T: Copy>(dst: &mut [T], src: &[T]) {
    if dst.len() < 16 {
        for (y, &v) in dst.iter_mut().zip(src) {
            *y = v;
        }
    } else {
        dst.copy_from_slice(src);
    }
}
