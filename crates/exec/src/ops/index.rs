//! Indexing ops.

use super::OpFn;

pub const OPS: &[(&str, OpFn)] = &[];
