//! Ops of the `ai.onnx.ml` domain: `Binarizer` (f32, f64: 1 where `x > threshold`, else 0) and
//! `ArrayFeatureExtractor` (elements of any fixed size gathered on the last axis by int64
//! indices), `TreeEnsemble` (f32, f64), `LabelEncoder` (integer or float keys and values; string
//! keys or values need string tensors, which the executor does not hold). Scratch: none.

use std::collections::BTreeMap;

use memplan_ir::graph::AttrValue;
use memplan_ir::{DataType, TensorData};

use super::{fail, raw, raw_mut, req, unsupported, OpCtx, OpFail, OpFn};
use crate::tensor::Tensor;

pub const OPS: &[(&str, OpFn)] = &[
    ("ai.onnx.ml.Binarizer", binarizer),
    ("ai.onnx.ml.ArrayFeatureExtractor", feature_extractor),
    ("ai.onnx.ml.TreeEnsemble", tree_ensemble),
    ("ai.onnx.ml.LabelEncoder", label_encoder),
];

fn binarizer(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let th = ctx.float("threshold", 0.0)?;
    let mut out = ctx.alloc_for_overwrite(x.dtype, &x.shape)?;
    match x.dtype {
        DataType::F32 => {
            for (o, &v) in out.data_mut::<f32>()?.iter_mut().zip(x.data::<f32>()?) {
                *o = if v > th { 1.0 } else { 0.0 };
            }
        }
        DataType::F64 => {
            let th = f64::from(th);
            for (o, &v) in out.data_mut::<f64>()?.iter_mut().zip(x.data::<f64>()?) {
                *o = if v > th { 1.0 } else { 0.0 };
            }
        }
        d => return unsupported(format!("Binarizer of {d}")),
    }
    Ok(vec![out])
}

fn feature_extractor(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let idx = req(inputs, 1)?;
    if idx.dtype != DataType::I64 {
        return fail(format!("indices must be int64, got {}", idx.dtype));
    }
    let Some((&last, lead)) = x.shape.split_last() else {
        return fail("X must have rank >= 1");
    };
    let index: &[i64] = raw(idx)?;
    for &i in index {
        if usize::try_from(i).map_or(true, |i| i >= last) {
            return fail(format!(
                "index {i} is out of range for a last axis of {last}"
            ));
        }
    }
    let k = index.len();
    let shape: Vec<usize> = if lead.is_empty() {
        vec![1, k]
    } else {
        lead.iter().copied().chain([k]).collect()
    };
    let rows: usize = lead.iter().product();
    let mut out = ctx.alloc_for_overwrite(x.dtype, &shape)?;
    by_size!(x.dtype.bits() as usize / 8, T => {
        let src: &[T] = raw(x)?;
        let dst: &mut [T] = raw_mut(&mut out)?;
        for r in 0..rows {
            for (j, &i) in index.iter().enumerate() {
                dst[r * k + j] = src[r * last + i as usize];
            }
        }
    });
    Ok(vec![out])
}

/// An attribute tensor's elements as f64 (empty when absent).
fn attr_f64(ctx: &OpCtx, name: &str) -> Result<Vec<f64>, OpFail> {
    match ctx.tensor_attr(name)? {
        None => Ok(Vec::new()),
        Some(t) => t
            .to_f64_vec()
            .ok_or_else(|| OpFail::Invalid(format!("attribute '{name}' is not numeric"))),
    }
}

fn attr_ints(ctx: &OpCtx, name: &str) -> Result<Vec<i64>, OpFail> {
    Ok(ctx.ints(name)?.unwrap_or_default())
}

/// `TreeEnsemble` (ai.onnx.ml opset 5; `post_transform` NONE). Each tree of `tree_roots` sends a
/// row from its root down to one leaf: at node `i`, `X[row, nodes_featureids[i]]` is compared with
/// `nodes_splits[i]` by `nodes_modes[i]` (0 `<=`, 1 `<`, 2 `>=`, 3 `>`, 4 `==`, 5 `!=`, 6 member
/// of the node's set in `membership_values`: the sets of the member nodes in node order,
/// separated by NaN); true goes to `nodes_truenodeids[i]` (a leaf index when
/// `nodes_trueleafs[i]`), false likewise. A NaN feature goes the true way when
/// `nodes_missing_value_tracks_true[i]`. Leaves add `leaf_weights` to `leaf_targetids`'s column,
/// aggregated by `aggregate_function` (0 average, 1 sum, 2 min, 3 max) in tree order.
fn tree_ensemble(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let [rows, feats] = x.shape[..] else {
        return fail(format!("X must have rank 2, got {:?}", x.shape));
    };
    let targets = match ctx.opt_int("n_targets")? {
        Some(t) if t >= 1 => t as usize,
        t => return fail(format!("n_targets must be >= 1, got {t:?}")),
    };
    if ctx.int("post_transform", 0)? != 0 {
        return unsupported("TreeEnsemble post_transform other than NONE");
    }
    let agg = ctx.int("aggregate_function", 1)?;
    if !(0..=3).contains(&agg) {
        return fail(format!("aggregate_function {agg} is not 0 to 3"));
    }
    let splits = attr_f64(ctx, "nodes_splits")?;
    let modes: Vec<i64> = match ctx.tensor_attr("nodes_modes")? {
        Some(t) => t
            .to_i64_vec()
            .ok_or_else(|| OpFail::Invalid("attribute 'nodes_modes' is not integer".into()))?,
        None => return fail("attribute 'nodes_modes' is required"),
    };
    let feature = attr_ints(ctx, "nodes_featureids")?;
    let true_ids = attr_ints(ctx, "nodes_truenodeids")?;
    let false_ids = attr_ints(ctx, "nodes_falsenodeids")?;
    let true_leaf = attr_ints(ctx, "nodes_trueleafs")?;
    let false_leaf = attr_ints(ctx, "nodes_falseleafs")?;
    let missing = attr_ints(ctx, "nodes_missing_value_tracks_true")?;
    let leaf_target = attr_ints(ctx, "leaf_targetids")?;
    let leaf_weight = attr_f64(ctx, "leaf_weights")?;
    let roots = attr_ints(ctx, "tree_roots")?;
    let members = attr_f64(ctx, "membership_values")?;
    let nodes = modes.len();
    let leaves = leaf_weight.len();
    if [
        splits.len(),
        feature.len(),
        true_ids.len(),
        false_ids.len(),
        true_leaf.len(),
        false_leaf.len(),
    ]
    .iter()
    .any(|&l| l != nodes)
        || (!missing.is_empty() && missing.len() != nodes)
        || leaf_target.len() != leaves
    {
        return fail("the nodes_* (and leaf_*) attributes must all have one entry per node (leaf)");
    }
    // The member set of each set-membership node, in node order.
    let mut sets: Vec<&[f64]> = vec![&[]; nodes];
    let mut groups = members.split(|v| v.is_nan());
    for (i, &m) in modes.iter().enumerate() {
        if m == 6 {
            sets[i] = groups.next().ok_or_else(|| {
                OpFail::Invalid("membership_values has fewer sets than member nodes".into())
            })?;
        }
    }
    let check = |id: i64, leaf: bool| -> Result<usize, OpFail> {
        let bound = if leaf { leaves } else { nodes };
        match usize::try_from(id) {
            Ok(i) if i < bound => Ok(i),
            _ => fail(format!("node or leaf id {id} is out of range")),
        }
    };
    for i in 0..nodes {
        check(true_ids[i], true_leaf[i] != 0)?;
        check(false_ids[i], false_leaf[i] != 0)?;
        if !(0..=6).contains(&modes[i]) {
            return fail(format!("node mode {} is not 0 to 6", modes[i]));
        }
        if usize::try_from(feature[i]).map_or(true, |f| f >= feats) {
            return fail(format!("feature id {} is out of range", feature[i]));
        }
    }
    for &t in &leaf_target {
        if usize::try_from(t).map_or(true, |t| t >= targets) {
            return fail(format!("leaf target id {t} is out of range"));
        }
    }
    let roots: Vec<usize> = roots
        .iter()
        .map(|&r| check(r, false))
        .collect::<Result<_, _>>()?;
    // The leaf a row reaches from `root` (a root whose two branches are the same leaf is a leaf).
    let walk = |row: &dyn Fn(usize) -> f64, root: usize| -> Result<usize, OpFail> {
        if true_leaf[root] != 0 && false_leaf[root] != 0 && true_ids[root] == false_ids[root] {
            return Ok(root);
        }
        let mut i = root;
        for _ in 0..=nodes {
            let v = row(feature[i] as usize);
            let s = splits[i];
            let go = (v.is_nan() && missing.get(i).is_some_and(|&m| m != 0))
                || match modes[i] {
                    0 => v <= s,
                    1 => v < s,
                    2 => v >= s,
                    3 => v > s,
                    4 => v == s,
                    5 => v != s,
                    _ => sets[i].contains(&v),
                };
            let (next, leaf) = if go {
                (true_ids[i], true_leaf[i])
            } else {
                (false_ids[i], false_leaf[i])
            };
            if leaf != 0 {
                return Ok(next as usize);
            }
            i = next as usize;
        }
        fail("the trees have a cycle")
    };
    let mut out = ctx.alloc_for_overwrite(x.dtype, &[rows, targets])?;
    macro_rules! go {
        ($t:ty, $max:expr) => {{
            let xs = x.data::<$t>()?;
            let ys = out.data_mut::<$t>()?;
            for r in 0..rows {
                let row = |f: usize| f64::from(xs[r * feats + f]);
                let acc = &mut ys[r * targets..(r + 1) * targets];
                let init: f64 = match agg {
                    2 => $max,
                    3 => -$max,
                    _ => 0.0,
                };
                // Accumulate in f64 per target, in tree order, then round once.
                for t in 0..targets {
                    let mut v = init;
                    for &root in &roots {
                        let leaf = walk(&row, root)?;
                        if leaf_target[leaf] as usize != t {
                            continue;
                        }
                        let w = leaf_weight[leaf];
                        v = match agg {
                            0 => v + w / roots.len() as f64,
                            1 => v + w,
                            2 => v.min(w),
                            _ => v.max(w),
                        };
                    }
                    acc[t] = v as $t;
                }
            }
        }};
    }
    match x.dtype {
        DataType::F32 => go!(f32, f64::from(f32::MAX)),
        DataType::F64 => go!(f64, f64::MAX),
        d => return unsupported(format!("TreeEnsemble of {d}")),
    }
    Ok(vec![out])
}

/// A `LabelEncoder` key: integers exactly; floats by value, `-0.0` equal to `0.0` and every NaN
/// one key (as the op's NaN keys match NaN inputs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Int(i64),
    Float(u64),
}

impl Key {
    fn float(x: f64) -> Key {
        let x = if x.is_nan() {
            f64::NAN
        } else if x == 0.0 {
            0.0
        } else {
            x
        };
        Key::Float(x.to_bits())
    }
}

/// The elements of an integer or float tensor as keys; `None` for other types.
fn keys_of_tensor(t: &TensorData) -> Option<Vec<Key>> {
    if t.dtype.is_float() {
        Some(t.to_f64_vec()?.into_iter().map(Key::float).collect())
    } else if t.dtype.is_int() {
        Some(t.to_i64_vec()?.into_iter().map(Key::Int).collect())
    } else {
        None
    }
}

/// The elements of X as keys.
fn keys_of_input(x: &Tensor) -> Result<Vec<Key>, OpFail> {
    Ok(match x.dtype {
        DataType::F64 => x.data::<f64>()?.iter().map(|&v| Key::float(v)).collect(),
        d if d.is_float() => x
            .to_f32_vec()?
            .into_iter()
            .map(|v| Key::float(f64::from(v)))
            .collect(),
        d if d.is_int() => x.to_i64_vec()?.into_iter().map(Key::Int).collect(),
        d => return unsupported(format!("LabelEncoder on {d} input")),
    })
}

const STRINGS: &str = "string keys or values need string tensors, which the executor does not hold";

/// The `keys_*` attribute as keys.
fn label_keys(ctx: &OpCtx) -> Result<Vec<Key>, OpFail> {
    let mut found = Vec::new();
    for name in ["keys_int64s", "keys_floats", "keys_strings", "keys_tensor"] {
        match ctx.attr(name) {
            None => {}
            Some(AttrValue::Ints(v)) => found.push(v.iter().map(|&k| Key::Int(k)).collect()),
            Some(AttrValue::Floats(v)) => {
                found.push(v.iter().map(|&k| Key::float(f64::from(k))).collect())
            }
            Some(AttrValue::Strings(_)) => return unsupported(STRINGS),
            Some(AttrValue::Tensor(t)) => match keys_of_tensor(t) {
                Some(k) => found.push(k),
                None => return unsupported(STRINGS),
            },
            Some(o) => return fail(format!("attribute '{name}' cannot be {}", o.kind_name())),
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => fail("one of keys_int64s, keys_floats, keys_strings, keys_tensor is required"),
        _ => fail("more than one keys_* attribute is given"),
    }
}

/// The `values_*` attribute (as one tensor of its type) and the default value's bytes
/// (`default_tensor`, else `default_int64` / `default_float`, else -1 or -0.0).
fn label_values(ctx: &OpCtx) -> Result<(DataType, Vec<u8>, Vec<u8>), OpFail> {
    let dtype =
        memplan_ir::ops::ml::label_encoder_values_type(ctx.node).map_err(OpFail::Invalid)?;
    let values: Vec<u8> = match (ctx.attr("values_int64s"), ctx.attr("values_floats")) {
        (Some(AttrValue::Ints(v)), _) => bytemuck::cast_slice(v).to_vec(),
        (_, Some(AttrValue::Floats(v))) => bytemuck::cast_slice(v).to_vec(),
        _ => match ctx.tensor_attr("values_tensor")? {
            Some(t) if dtype.is_int() || dtype.is_float() => t
                .raw()
                .ok_or_else(|| OpFail::Invalid("values_tensor holds no bytes".into()))?
                .to_vec(),
            _ => return unsupported(STRINGS),
        },
    };
    let default: Vec<u8> = match ctx.tensor_attr("default_tensor")? {
        Some(t) if t.dtype == dtype && t.numel() == 1 => t
            .raw()
            .ok_or_else(|| OpFail::Invalid("default_tensor holds no bytes".into()))?
            .to_vec(),
        Some(t) => {
            return fail(format!(
                "default_tensor must hold one {dtype}, got {} of {:?}",
                t.dtype, t.dims
            ))
        }
        None => match dtype {
            DataType::I64 => ctx.int("default_int64", -1)?.to_le_bytes().to_vec(),
            DataType::F32 => ctx.float("default_float", -0.0)?.to_le_bytes().to_vec(),
            d => {
                let es = crate::tensor::elem_size(d)?;
                if d.is_float() {
                    // -0.0: only the sign bit, the top bit of the last byte.
                    let mut b = vec![0u8; es];
                    b[es - 1] = 0x80;
                    b
                } else {
                    // -1 in two's complement at any width.
                    vec![0xff; es]
                }
            }
        },
    };
    Ok((dtype, values, default))
}

/// `LabelEncoder` (ai.onnx.ml opsets 1 to 4 for integer and float keys and values): each element
/// of X is looked up among the keys and replaced by the value at the same position, or by the
/// default when absent. The output has X's shape and the values' type.
fn label_encoder(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpFail> {
    let x = req(inputs, 0)?;
    let keys = label_keys(ctx)?;
    let (dtype, values, default) = label_values(ctx)?;
    let es = crate::tensor::elem_size(dtype)?;
    if values.len() != keys.len() * es || default.len() != es {
        return fail(format!(
            "the keys ({}) and values ({}) must pair one to one",
            keys.len(),
            values.len() / es.max(1)
        ));
    }
    let mut table = BTreeMap::new();
    for (i, k) in keys.iter().enumerate() {
        // The first occurrence of a repeated key wins.
        table.entry(*k).or_insert(i);
    }
    let xs = keys_of_input(x)?;
    if xs
        .first()
        .zip(keys.first())
        .is_some_and(|(a, b)| std::mem::discriminant(a) != std::mem::discriminant(b))
    {
        return fail(format!(
            "X is {} but the keys are not of that kind",
            x.dtype
        ));
    }
    let mut out = ctx.alloc_for_overwrite(dtype, &x.shape)?;
    let dst = out.bytes_mut()?;
    for (o, k) in dst.chunks_exact_mut(es).zip(&xs) {
        o.copy_from_slice(match table.get(k) {
            Some(&i) => &values[i * es..(i + 1) * es],
            None => &default,
        });
    }
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use crate::ops::testutil::*;
    use memplan_ir::graph::AttrValue;

    #[test]
    fn label_encoder_maps_integer_and_float_keys() {
        let x = t_i64(&[2, 2], &[3, 1, 9, 3]);
        let attrs = [
            ("keys_int64s", AttrValue::Ints(vec![1, 3])),
            ("values_floats", AttrValue::Floats(vec![0.5, 2.5])),
            ("default_float", AttrValue::Float(7.0)),
        ];
        let o = run_op("ai.onnx.ml.LabelEncoder", &attrs, &[Some(&x)], 1).unwrap();
        assert_eq!(o[0].shape, [2, 2]);
        assert_eq!(o[0].data::<f32>().unwrap(), &[2.5, 0.5, 7.0, 2.5]);
        // Float keys: NaN matches NaN, -0.0 matches 0.0; absent keys give default_int64's -1.
        let x = t_f32(&[4], &[f32::NAN, -0.0, 1.5, 4.0]);
        let attrs = [
            ("keys_floats", AttrValue::Floats(vec![0.0, f32::NAN, 1.5])),
            ("values_int64s", AttrValue::Ints(vec![10, 20, 30])),
        ];
        let o = run_op("ai.onnx.ml.LabelEncoder", &attrs, &[Some(&x)], 1).unwrap();
        assert_eq!(o[0].data::<i64>().unwrap(), &[20, 10, 30, -1]);
        // String keys are refused with the reason.
        let attrs = [
            ("keys_strings", AttrValue::Strings(vec![b"a".to_vec()])),
            ("values_int64s", AttrValue::Ints(vec![1])),
        ];
        let err = run_op("ai.onnx.ml.LabelEncoder", &attrs, &[Some(&x)], 1).unwrap_err();
        assert!(err.to_string().contains("string"), "{err}");
    }
}
