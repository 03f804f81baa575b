//! Op family: the `ai.onnx.ml` domain: `Binarizer` (elementwise `x > threshold`),
//! `ArrayFeatureExtractor` (a gather on the last axis), `TreeEnsemble` (opset 5) and
//! `LabelEncoder` (a lookup of each element in a key -> value table, same shape, the values' type).
//!
//! The kernels (`exec::ops::ml`) hold no scratch.

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::graph::AttrValue;
use crate::infer::{invalid, Fact, InferCtx, OpError};

use super::{Mem, OpDef, ONE, TWO};

pub const DEFS: &[OpDef] = &[
    OpDef::new("ai.onnx.ml.Binarizer", ONE, same, Mem::NEW),
    OpDef::new(
        "ai.onnx.ml.ArrayFeatureExtractor",
        TWO,
        feature_extractor,
        Mem::NEW,
    ),
    OpDef::new("ai.onnx.ml.TreeEnsemble", ONE, tree_ensemble, Mem::NEW),
    OpDef::new("ai.onnx.ml.LabelEncoder", ONE, label_encoder, Mem::NEW),
];

fn same(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    Ok(vec![Fact::new(ctx.dtype(0)?, ctx.shape(0)?.to_vec())])
}

/// `[x[..-1], |indices|]`, or `[1, |indices|]` for a vector `x` (as onnxruntime does).
fn feature_extractor(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?;
    let n = Expr::product(ctx.shape(1)?.iter());
    let out = match x {
        [] => return invalid("X must have rank >= 1"),
        [_] => vec![Expr::one(), n],
        [lead @ .., _] => lead.iter().cloned().chain([n]).collect(),
    };
    Ok(vec![Fact::new(ctx.dtype(0)?, out)])
}

/// `TreeEnsemble` (ai.onnx.ml opset 5): `[N, F]` to `[N, n_targets]` of X's type.
fn tree_ensemble(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?;
    let [n, _] = x else {
        return invalid(format!("X must have rank 2, got {}", x.len()));
    };
    let targets = ctx
        .attr_opt_int("n_targets")?
        .ok_or_else(|| OpError::BadAttr("attribute 'n_targets' is required".into()))?;
    if targets < 1 {
        return Err(OpError::BadAttr(format!("n_targets {targets} is not >= 1")));
    }
    Ok(vec![Fact::new(
        ctx.dtype(0)?,
        vec![n.clone(), Expr::int(targets)],
    )])
}

/// The element type of `LabelEncoder`'s values: `values_int64s`, `values_floats`,
/// `values_strings` or the type of `values_tensor` (exactly one of them).
pub fn label_encoder_values_type(node: &crate::graph::Node) -> Result<DataType, String> {
    let found: Vec<DataType> = [
        "values_int64s",
        "values_floats",
        "values_strings",
        "values_tensor",
    ]
    .iter()
    .filter_map(|name| match node.attr(name)? {
        AttrValue::Ints(_) => Some(DataType::I64),
        AttrValue::Floats(_) => Some(DataType::F32),
        AttrValue::Strings(_) => Some(DataType::String),
        AttrValue::Tensor(t) => Some(t.dtype),
        _ => None,
    })
    .collect();
    match found.as_slice() {
        [t] => Ok(*t),
        [] => Err(
            "one of values_int64s, values_floats, values_strings, values_tensor is required".into(),
        ),
        _ => Err("more than one values_* attribute is given".into()),
    }
}

/// `LabelEncoder`: X's shape, the values' element type.
fn label_encoder(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = label_encoder_values_type(ctx.node).map_err(OpError::BadAttr)?;
    Ok(vec![Fact::new(t, ctx.shape(0)?.to_vec())])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Attribute, DeclType, Graph};

    fn encoder(attrs: Vec<(&str, AttrValue)>) -> Result<Vec<Fact>, String> {
        let mut g = Graph::default();
        let x = g.add_input(
            "x",
            DeclType::tensor(
                DataType::I64,
                vec![crate::graph::DeclDim::Param("N".into())],
            ),
        );
        let attrs = attrs
            .into_iter()
            .map(|(name, value)| Attribute {
                name: name.into(),
                value,
                doc: String::new(),
            })
            .collect();
        let (id, y) = g.add_node("le", "LabelEncoder", &[Some(x)], &["y"], attrs);
        g.nodes[id.index()].domain = "ai.onnx.ml".into();
        g.outputs.push(y[0]);
        let f = crate::infer_graph(&g, 18).map_err(|e| e.to_string())?;
        Ok(vec![f.get(y[0]).clone()])
    }

    #[test]
    fn label_encoder_keeps_the_shape_and_takes_the_values_type() {
        let f = encoder(vec![
            ("keys_int64s", AttrValue::Ints(vec![1, 2])),
            ("values_floats", AttrValue::Floats(vec![0.5, 1.5])),
        ])
        .unwrap();
        assert_eq!(f[0].dtype, Some(DataType::F32));
        assert_eq!(f[0].shape, Some(vec![Expr::sym("N")]));
        let f = encoder(vec![
            ("keys_floats", AttrValue::Floats(vec![1.0])),
            ("values_int64s", AttrValue::Ints(vec![7])),
        ])
        .unwrap();
        assert_eq!(f[0].dtype, Some(DataType::I64));
        let err = encoder(vec![("keys_int64s", AttrValue::Ints(vec![1]))]).unwrap_err();
        assert!(err.contains("values_int64s"), "{err}");
    }
}
