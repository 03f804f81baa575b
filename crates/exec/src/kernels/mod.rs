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
