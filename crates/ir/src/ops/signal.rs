//! Op family: signal processing: the window functions `HannWindow`, `HammingWindow` and
//! `BlackmanWindow`.
//!
//! The kernels (`exec::ops::signal`) compute each element from its index alone and hold no scratch.

use crate::dtype::DataType;
use crate::infer::{invalid, Fact, InferCtx, OpError};

use super::{Mem, OpDef};

pub const DEFS: &[OpDef] = &[
    OpDef::new("HannWindow", (1, 1), window, Mem::NEW),
    OpDef::new("HammingWindow", (1, 1), window, Mem::NEW),
    OpDef::new("BlackmanWindow", (1, 1), window, Mem::NEW),
];

/// A window of `size` (a scalar input) elements of `output_datatype` (default float).
fn window(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let code = ctx.attr_int("output_datatype", 1)?;
    let t = DataType::from_onnx(code as i32)
        .ok_or_else(|| OpError::BadAttr(format!("output_datatype {code} is not a data type")))?;
    if ctx.input(0)?.shape.as_ref().is_some_and(|s| !s.is_empty()) {
        return invalid("size must be a scalar");
    }
    let size = ctx
        .known_ints(0)
        .ok_or_else(|| OpError::Unknown("contents of size (input 0)".into()))?;
    let [n] = size.as_slice() else {
        return invalid("size must hold one element");
    };
    if n.as_const().is_some_and(|c| c < 0) {
        return invalid(format!("size {n} is negative"));
    }
    Ok(vec![Fact::new(t, vec![n.clone()])])
}
