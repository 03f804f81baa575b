//! Op family: nn.

use super::OpDef;

pub const DEFS: &[OpDef] = &[];
