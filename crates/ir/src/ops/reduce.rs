//! Op family: reduce.

use super::OpDef;

pub const DEFS: &[OpDef] = &[];
