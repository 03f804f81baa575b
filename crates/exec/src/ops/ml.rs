//! Ops of the `ai.onnx.ml` domain: `Binarizer` (f32, f64: 1 where `x > threshold`, else 0) and
//! `ArrayFeatureExtractor` (elements of any fixed size gathered on the last axis by int64
//! indices), `TreeEnsemble` (f32, f64). Scratch: none.

use memplan_ir::DataType;

use super::{fail, raw, raw_mut, req, unsupported, OpCtx, OpFail, OpFn};
use crate::tensor::Tensor;

pub const OPS: &[(&str, OpFn)] = &[
    ("ai.onnx.ml.Binarizer", binarizer),
    ("ai.onnx.ml.ArrayFeatureExtractor", feature_extractor),
    ("ai.onnx.ml.TreeEnsemble", tree_ensemble),
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
