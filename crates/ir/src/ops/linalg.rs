//! Op family: linalg.

use super::OpDef;

pub const DEFS: &[OpDef] = &[];
