//! Gradient rules, one table per op family (the families of `memplan_ir::ops`).
//!
//! A rule gets the forward node, the gradients of its outputs (`None` where an output gets none) and
//! which inputs need a gradient, and returns one entry per input: `Some(gradient)` for each wanted
//! input it can differentiate, `None` otherwise (a wanted input left `None` is reported as having no
//! rule). Every gradient has its input's dtype and shape.

mod elementwise;
mod linalg;
mod nn;
mod reduce;
mod shape;

use memplan_ir::graph::{Node, NodeId, ValueId};
use memplan_ir::{DataType, Expr};

use crate::builder::Builder;
use crate::GradError;

/// What a rule sees of the node it differentiates.
pub(crate) struct Ctx<'n> {
    pub node: &'n Node,
    pub dy: &'n [Option<ValueId>],
    pub want: &'n [bool],
}

/// A rule's result: one optional gradient per input slot.
pub(crate) type Grads = Vec<Option<ValueId>>;
pub(crate) type Rule = fn(&mut Builder, &Ctx) -> Result<Grads, String>;

impl Ctx<'_> {
    /// Input `i` (required).
    pub fn x(&self, i: usize) -> Result<ValueId, String> {
        self.node
            .inputs
            .get(i)
            .copied()
            .flatten()
            .ok_or_else(|| format!("input {i} is missing"))
    }

    /// Input `i` when present.
    pub fn opt_x(&self, i: usize) -> Option<ValueId> {
        self.node.inputs.get(i).copied().flatten()
    }

    /// Output `i` (required).
    pub fn y(&self, i: usize) -> Result<ValueId, String> {
        self.node
            .outputs
            .get(i)
            .copied()
            .flatten()
            .ok_or_else(|| format!("output {i} is missing"))
    }

    /// The gradient of output 0; the other outputs must have none.
    pub fn dy0(&self) -> Result<ValueId, String> {
        if self.dy.iter().skip(1).any(Option::is_some) {
            return Err(format!(
                "gradients flow into a secondary output of {}, which has no rule",
                self.node.op
            ));
        }
        self.dy
            .first()
            .copied()
            .flatten()
            .ok_or_else(|| "output 0 has no gradient".to_string())
    }

    /// Whether input `i` needs a gradient.
    pub fn wants(&self, i: usize) -> bool {
        self.want.get(i).copied().unwrap_or(false)
    }

    /// The number of input slots.
    pub fn arity(&self) -> usize {
        self.node.inputs.len()
    }

    /// Attribute `name` read by `get` (`None` when absent); another kind is an error naming `kind`.
    fn attr<T>(
        &self,
        name: &str,
        kind: &str,
        get: impl Fn(&memplan_ir::AttrValue) -> Option<T>,
    ) -> Result<Option<T>, String> {
        match self.node.attr(name) {
            None => Ok(None),
            Some(a) => get(a)
                .map(Some)
                .ok_or_else(|| format!("attribute '{name}' must be {kind}, got {}", a.kind_name())),
        }
    }

    /// An INT attribute.
    pub fn int(&self, name: &str, default: i64) -> Result<i64, String> {
        use memplan_ir::AttrValue as A;
        let v = self.attr(
            name,
            "INT",
            |a| if let A::Int(v) = a { Some(*v) } else { None },
        )?;
        Ok(v.unwrap_or(default))
    }

    /// A FLOAT attribute.
    pub fn float(&self, name: &str, default: f32) -> Result<f32, String> {
        use memplan_ir::AttrValue as A;
        let v = self.attr(name, "FLOAT", |a| {
            if let A::Float(v) = a {
                Some(*v)
            } else {
                None
            }
        })?;
        Ok(v.unwrap_or(default))
    }

    /// An INTS attribute.
    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, String> {
        use memplan_ir::AttrValue as A;
        self.attr(name, "INTS", |a| {
            if let A::Ints(v) = a {
                Some(v.clone())
            } else {
                None
            }
        })
    }

    /// A STRING attribute.
    pub fn string(&self, name: &str) -> Result<Option<String>, String> {
        use memplan_ir::AttrValue as A;
        self.attr(name, "STRING", |a| {
            if let A::String(v) = a {
                Some(String::from_utf8_lossy(v).into_owned())
            } else {
                None
            }
        })
    }
}

/// The inferred shape of a forward value.
pub(crate) fn shape(b: &Builder, v: ValueId) -> Result<Vec<Expr>, String> {
    b.facts
        .get(v)
        .shape
        .clone()
        .ok_or_else(|| format!("value '{}' has no inferred shape", b.g.value(v).name))
}

/// The inferred dtype of a forward value.
pub(crate) fn dtype(b: &Builder, v: ValueId) -> Result<DataType, String> {
    b.facts
        .get(v)
        .dtype
        .ok_or_else(|| format!("value '{}' has no inferred type", b.g.value(v).name))
}

/// The known integer contents of a forward value (a constant axes or shape operand).
pub(crate) fn known_ints(b: &Builder, v: ValueId) -> Option<Vec<i64>> {
    b.facts.get(v).value.as_ref().and_then(|k| k.as_consts())
}

/// Normalizes a possibly negative axis against `rank`.
pub(crate) fn norm_axis(axis: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r.max(1) {
        return Err(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(a as usize)
}

fn find(op: &str) -> Option<Rule> {
    [
        elementwise::RULES,
        linalg::RULES,
        reduce::RULES,
        shape::RULES,
        nn::RULES,
    ]
    .iter()
    .flat_map(|fam| fam.iter())
    .find(|(name, _)| *name == op)
    .map(|(_, r)| *r)
}

/// Ops with a gradient rule, sorted.
pub fn supported() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = [
        elementwise::RULES,
        linalg::RULES,
        reduce::RULES,
        shape::RULES,
        nn::RULES,
    ]
    .iter()
    .flat_map(|fam| fam.iter().map(|(n, _)| *n))
    .collect();
    v.sort_unstable();
    v
}

/// Runs the rule of `node`.
pub(crate) fn apply(
    b: &mut Builder,
    id: NodeId,
    node: &Node,
    dy: &[Option<ValueId>],
    want: &[bool],
) -> Result<Grads, GradError> {
    let first_wanted = want.iter().position(|&w| w).unwrap_or(0);
    let rule = match (node.is_onnx_domain(), find(&node.op)) {
        (true, Some(r)) => r,
        _ => {
            return Err(GradError::NoRule {
                node: node.label(id),
                op: node.op.clone(),
                input: first_wanted,
            })
        }
    };
    let ctx = Ctx { node, dy, want };
    let mut g = rule(b, &ctx).map_err(|msg| GradError::Rule {
        node: node.label(id),
        msg,
    })?;
    g.resize(node.inputs.len(), None);
    Ok(g)
}
