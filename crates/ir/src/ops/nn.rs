//! Op family: neural-network layers: normalizations over channels (`BatchNormalization`,
//! `InstanceNormalization`, `GroupNormalization`), `Conv`, pooling
//! (`MaxPool`, `AveragePool`, `Global*Pool`) and `Dropout` (the identity at inference; in training
//! mode its mask is drawn by `exec`'s counter-based generator, no scratch).

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::infer::{invalid, Fact, InferCtx, OpError};

use super::{is_half, numel, Mem, OpDef, ONE, THREE};
use crate::graph::{AttrValue, Node};

pub const DEFS: &[OpDef] = &[
    OpDef::new(
        "BatchNormalization",
        (5, 5),
        same_as_input,
        with_scratch(widened_scratch),
    ),
    OpDef::new(
        "InstanceNormalization",
        THREE,
        same_as_input,
        with_scratch(widened_scratch),
    ),
    OpDef::new("GroupNormalization", THREE, same_as_input, Mem::NEW),
    OpDef::new("Conv", (2, 3), conv, with_scratch(conv_scratch)),
    OpDef::new("MaxPool", ONE, pool, with_scratch(widened_scratch)),
    OpDef::new("AveragePool", ONE, pool, with_scratch(widened_scratch)),
    OpDef::new("LpPool", ONE, pool, Mem::NEW),
    OpDef::new(
        "GlobalAveragePool",
        ONE,
        global_pool,
        with_scratch(widened_scratch),
    ),
    OpDef::new(
        "GlobalMaxPool",
        ONE,
        global_pool,
        with_scratch(widened_scratch),
    ),
    OpDef::new("GlobalLpPool", ONE, global_pool, Mem::NEW),
    // Inputs: data, ratio, training_mode (opset 12+).
    OpDef::new("Dropout", (1, 3), dropout, Mem::NEW),
];

const fn with_scratch(f: super::ScratchFn) -> Mem {
    Mem {
        scratch: Some(f),
        ..Mem::NEW
    }
}

// ---- Scratch: what `exec::ops::nn` and `exec::ops::reduce` (the normalizations) allocate. ----
//
// f32/f64 kernels run on the tensors directly; f16/bf16 are widened to f32 in scratch (every float
// input) and the result is computed in an f32 scratch buffer, then rounded into the output.

/// Sum of the present facts' element counts; `None` when one is unknown.
fn numel_sum<'a>(fs: impl IntoIterator<Item = &'a Option<&'a Fact>>) -> Option<Expr> {
    let mut n = Expr::zero();
    for f in fs.into_iter().flatten() {
        n += numel(Some(f))?;
    }
    Some(n)
}

fn half_input(inputs: &[Option<&Fact>]) -> bool {
    inputs
        .first()
        .copied()
        .flatten()
        .and_then(|f| f.dtype)
        .is_some_and(is_half)
}

/// Batch/InstanceNormalization and the pools: f16/bf16 `4 * (sum of |inputs| + |Y|)`, else none.
pub(super) fn widened_scratch(
    _node: &Node,
    _opset: i64,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Expr {
    if !half_input(inputs) {
        return Expr::zero();
    }
    numel_sum(inputs.iter().chain(outputs.first()))
        .map(|n| n * 4)
        .unwrap_or_else(Expr::zero)
}

/// Conv: the im2col buffer, `e * C/group * prod(kernel) * prod(Y spatial)`, none for a 1x1 stride-1
/// unpadded kernel; f16/bf16 add `4 * (|X| + |W| + |B| + |Y|)`.
fn conv_scratch(
    node: &Node,
    opset: i64,
    inputs: &[Option<&Fact>],
    outputs: &[Option<&Fact>],
) -> Expr {
    let col = || -> Option<Expr> {
        let x = inputs.first().copied().flatten()?;
        let w = inputs.get(1).copied().flatten()?.shape.as_ref()?;
        let y = outputs.first().copied().flatten()?.shape.as_ref()?;
        let e = super::compute_size(x.dtype?)?;
        let c = x.shape.as_ref()?.get(1)?;
        let ints = |name: &str| match node.attr(name) {
            Some(AttrValue::Ints(v)) => v.clone(),
            _ => Vec::new(),
        };
        let kernel: Vec<Expr> = match node.attr("kernel_shape") {
            Some(AttrValue::Ints(v)) => v.iter().map(|&k| Expr::int(k)).collect(),
            _ => w.get(2..)?.to_vec(),
        };
        let explicit = !matches!(
            node.attr("auto_pad"),
            Some(AttrValue::String(a)) if a.as_slice() != b"NOTSET"
        );
        let direct = kernel.iter().all(|k| k.as_const() == Some(1))
            && ints("strides").iter().all(|&s| s == 1)
            && (!explicit || ints("pads").iter().all(|&p| p == 0));
        if direct {
            return Some(Expr::zero());
        }
        let group = match node.attr("group") {
            Some(AttrValue::Int(g)) if *g >= 1 => *g,
            _ => 1,
        };
        let per_group = c.floor_div(&Expr::int(group));
        Some(per_group * Expr::product(kernel.iter()) * Expr::product(y.get(2..)?.iter()) * e)
    };
    col().unwrap_or_else(Expr::zero) + widened_scratch(node, opset, inputs, outputs)
}

fn same_as_input(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let t = ctx.dtype(0)?;
    if x.len() < 2 {
        return invalid(format!(
            "input has rank {}, needs at least 2 (N, C, ...)",
            x.len()
        ));
    }
    Ok(vec![Fact::new(t, x)])
}

fn dropout(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let t = ctx.dtype(0)?;
    // The mask is bool from opset 10 on, of the data's type before.
    let mask = if ctx.opset >= 10 { DataType::Bool } else { t };
    Ok(vec![Fact::new(t, x.clone()), Fact::new(mask, x)])
}

/// Spatial output extents of a sliding window: per spatial axis `i`, input `d`, kernel `k`.
fn window_out(
    ctx: &InferCtx,
    spatial: &[Expr],
    kernel: &[i64],
    ceil_mode: bool,
) -> Result<Vec<Expr>, OpError> {
    let n = spatial.len();
    if kernel.len() != n {
        return invalid(format!(
            "kernel has {} dims, the input has {n} spatial dims",
            kernel.len()
        ));
    }
    let strides = ctx.attr_ints("strides")?.unwrap_or_else(|| vec![1; n]);
    let dil = ctx.attr_ints("dilations")?.unwrap_or_else(|| vec![1; n]);
    if strides.len() != n || dil.len() != n {
        return invalid(format!("strides/dilations must have {n} entries"));
    }
    if strides.iter().chain(&dil).chain(kernel).any(|&v| v < 1) {
        return invalid("kernel, strides and dilations must be >= 1");
    }
    let auto_pad = ctx
        .attr_string("auto_pad")?
        .unwrap_or_else(|| "NOTSET".into());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let d = &spatial[i];
        let ek = Expr::int(dil[i] * (kernel[i] - 1) + 1);
        let s = Expr::int(strides[i]);
        let o = match auto_pad.as_str() {
            "SAME_UPPER" | "SAME_LOWER" => d.ceil_div(&s),
            "VALID" => (&(d - &ek) + &Expr::one()).ceil_div(&s),
            "NOTSET" | "" => {
                let pads = ctx.attr_ints("pads")?.unwrap_or_else(|| vec![0; 2 * n]);
                if pads.len() != 2 * n {
                    return invalid(format!("pads must have {} entries", 2 * n));
                }
                let span = &(d + &Expr::int(pads[i] + pads[i + n])) - &ek;
                let q = if ceil_mode {
                    span.ceil_div(&s)
                } else {
                    span.floor_div(&s)
                };
                &q + &Expr::one()
            }
            other => {
                return Err(OpError::BadAttr(format!(
                    "auto_pad '{other}' is not a known mode"
                )))
            }
        };
        out.push(o);
    }
    Ok(out)
}

fn conv(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let t = ctx.dtype(0)?;
    Ok(vec![Fact::new(t, conv_shape(ctx, 0, 1)?)])
}

/// The output shape of a convolution of input `xi` by the weights `wi` (Conv, ConvInteger,
/// QLinearConv), from the attributes `kernel_shape`, `strides`, `dilations`, `pads`, `auto_pad`.
pub(super) fn conv_shape(ctx: &InferCtx, xi: usize, wi: usize) -> Result<Vec<Expr>, OpError> {
    let x = ctx.shape(xi)?.to_vec();
    let w = ctx.shape(wi)?.to_vec();
    if x.len() < 3 || w.len() != x.len() {
        return invalid(format!(
            "X has rank {} and W rank {}; both must be the same and >= 3",
            x.len(),
            w.len()
        ));
    }
    let kernel = match ctx.attr_ints("kernel_shape")? {
        Some(k) => k,
        None => w[2..]
            .iter()
            .map(|d| {
                d.as_const()
                    .ok_or_else(|| OpError::Unsupported("symbolic kernel shape".into()))
            })
            .collect::<Result<_, _>>()?,
    };
    let mut out = vec![x[0].clone(), w[0].clone()];
    out.extend(window_out(ctx, &x[2..], &kernel, false)?);
    Ok(out)
}

fn pool(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let t = ctx.dtype(0)?;
    if x.len() < 3 {
        return invalid(format!(
            "input has rank {}, needs at least 3 (N, C, spatial...)",
            x.len()
        ));
    }
    let kernel = ctx
        .attr_ints("kernel_shape")?
        .ok_or_else(|| OpError::BadAttr("attribute 'kernel_shape' is required".into()))?;
    let ceil = ctx.attr_int("ceil_mode", 0)? != 0;
    let mut out = x[..2].to_vec();
    out.extend(window_out(ctx, &x[2..], &kernel, ceil)?);
    let mut facts = vec![Fact::new(t, out.clone())];
    if ctx.node.op == "MaxPool" {
        facts.push(Fact::new(DataType::I64, out));
    }
    Ok(facts)
}

fn global_pool(ctx: &mut InferCtx) -> Result<Vec<Fact>, OpError> {
    let x = ctx.shape(0)?.to_vec();
    let t = ctx.dtype(0)?;
    if x.len() < 3 {
        return invalid(format!(
            "input has rank {}, needs at least 3 (N, C, spatial...)",
            x.len()
        ));
    }
    let mut out = x[..2].to_vec();
    out.extend(std::iter::repeat_n(Expr::one(), x.len() - 2));
    Ok(vec![Fact::new(t, out)])
}

#[cfg(test)]
mod tests {
    use crate::graph::{AttrValue, Attribute, DeclDim, DeclType, Graph};
    use crate::infer::{fmt_shape, infer_graph};
    use crate::DataType;

    fn attr(name: &str, value: AttrValue) -> Attribute {
        Attribute {
            name: name.into(),
            value,
            doc: String::new(),
        }
    }

    #[test]
    fn layer_norm_and_conv_shapes() {
        let mut g = Graph::default();
        let n = DeclDim::Param("N".into());
        let x = g.add_input(
            "x",
            DeclType::tensor(
                DataType::F32,
                vec![n.clone(), DeclDim::Value(3), n.clone(), n],
            ),
        );
        let w = g.add_input(
            "w",
            DeclType::tensor(
                DataType::F32,
                vec![
                    DeclDim::Value(8),
                    DeclDim::Value(3),
                    DeclDim::Value(3),
                    DeclDim::Value(3),
                ],
            ),
        );
        let scale = g.add_input(
            "scale",
            DeclType::tensor(
                DataType::F32,
                vec![DeclDim::Param("N".into()), DeclDim::Param("N".into())],
            ),
        );
        let (_, ln) = g.add_node(
            "ln",
            "LayerNormalization",
            &[Some(x), Some(scale)],
            &["y", "mean", "inv"],
            vec![attr("axis", AttrValue::Int(2))],
        );
        let (_, cv) = g.add_node(
            "cv",
            "Conv",
            &[Some(ln[0]), Some(w)],
            &["c"],
            vec![
                attr("strides", AttrValue::Ints(vec![2, 2])),
                attr("pads", AttrValue::Ints(vec![1, 1, 1, 1])),
            ],
        );
        let (_, mp) = g.add_node(
            "mp",
            "MaxPool",
            &[Some(cv[0])],
            &["p"],
            vec![
                attr("kernel_shape", AttrValue::Ints(vec![2, 2])),
                attr("ceil_mode", AttrValue::Int(1)),
            ],
        );
        let f = infer_graph(&g, 18).unwrap();
        let shape = |v| fmt_shape(f.get(v).shape.as_ref().unwrap());
        assert_eq!(shape(ln[0]), "[N, 3, N, N]");
        assert_eq!(shape(ln[1]), "[N, 3, 1, 1]");
        // floor((N + 2 - 3) / 2) + 1, canonically (N + 1)//2
        assert_eq!(shape(cv[0]), "[N, 8, (N + 1)//2, (N + 1)//2]");
        let env = |s: &str| (s == "N").then_some(7);
        let p = f.get(mp[0]).shape.as_ref().unwrap();
        // Conv: 7 -> 4; ceil pool 2: ceil((4 - 2) / 1) + 1 = 3.
        assert_eq!(p[2].eval(&env).unwrap(), 3);
    }
}
