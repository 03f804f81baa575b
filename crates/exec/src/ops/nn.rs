//! Neural-network ops.

use super::OpFn;

pub const OPS: &[(&str, OpFn)] = &[];
