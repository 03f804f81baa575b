//! Constant folding by the executor's kernels: a node whose inputs are all small tensors with known
//! concrete contents is evaluated by the same kernel that runs it, so inference never holds a second
//! implementation of the arithmetic. Rules in [`crate::ops`] fold only what must stay symbolic
//! (shape values holding symbols, as [`Expr`](crate::Expr) arithmetic).
//!
//! `ir` cannot depend on the executor (the executor depends on `ir`), so the kernels come in through
//! the [`ConstFolder`] trait, registered once per process with [`set_const_folder`]
//! (`memplan_exec::install_const_folder()` registers the executor's; the CLI calls it at startup and
//! the executor's run entry points call it too). Without a folder, values that only a kernel could
//! compute stay unknown: inference is still sound, only less precise.
//!
//! **Invariant**: folding is deterministic: kernels compute each element independently of threads,
//! and only nodes whose inputs are all concrete (no symbols) are folded, so every caller that
//! registered the folder gets the same facts.

use std::sync::OnceLock;

use bytes::Bytes;

use crate::dim::Expr;
use crate::dtype::DataType;
use crate::graph::{AttrValue, Node};
use crate::infer::{Fact, Known, MAX_KNOWN_ELEMS};
use crate::tensor::TensorData;

/// Evaluates one node on constant inputs.
pub trait ConstFolder: Sync {
    /// The node's outputs, in output order, for the given inputs (`None` for an absent optional
    /// input); `None` when the folder cannot evaluate the node (no kernel, a kernel error).
    fn fold(
        &self,
        node: &Node,
        opset: i64,
        inputs: &[Option<&TensorData>],
    ) -> Option<Vec<TensorData>>;
}

static FOLDER: OnceLock<&'static dyn ConstFolder> = OnceLock::new();

/// Registers the process-wide folder. The first registration wins; later calls are no-ops, so every
/// entry point may call it.
pub fn set_const_folder(f: &'static dyn ConstFolder) {
    let _ = FOLDER.set(f);
}

/// The registered folder, if any.
pub fn const_folder() -> Option<&'static dyn ConstFolder> {
    FOLDER.get().copied()
}

/// Op families whose nodes are never folded: random ops (their values are the run's, not facts).
fn never_folded(node: &Node) -> bool {
    crate::ops::random::DEFS.iter().any(|d| d.op == node.op)
        || node
            .attrs
            .iter()
            .any(|a| matches!(a.value, AttrValue::Graph(_) | AttrValue::Graphs(_)))
}

/// Replaces the facts a rule gave a node's outputs by the kernel's values when every present input
/// is a known concrete tensor and every output the rule produced is small and concretely shaped.
/// The kernel's outputs must agree with the rule's types and shapes; otherwise (or on a kernel
/// error) the rule's facts stand.
pub(crate) fn fold_node(
    node: &Node,
    opset: i64,
    inputs: &[Option<&Fact>],
    outs: &mut [Fact],
) -> bool {
    let Some(folder) = const_folder() else {
        return false;
    };
    if inputs.iter().all(|i| i.is_none()) || !node.is_onnx_domain() || never_folded(node) {
        return false;
    }
    let mut tensors = Vec::with_capacity(inputs.len());
    for f in inputs {
        match f {
            None => tensors.push(None),
            Some(f) => match fact_tensor(f) {
                Some(t) => tensors.push(Some(t)),
                None => return false,
            },
        }
    }
    let n_out = node.outputs.len().min(outs.len());
    if n_out == 0 {
        return false;
    }
    for o in &outs[..n_out] {
        match o.concrete_shape() {
            Some(s) if s.iter().product::<usize>() <= MAX_KNOWN_ELEMS => {}
            _ => return false,
        }
    }
    let refs: Vec<Option<&TensorData>> = tensors.iter().map(|t| t.as_ref()).collect();
    let Some(results) = folder.fold(node, opset, &refs) else {
        return false;
    };
    if results.len() < n_out {
        return false;
    }
    let mut folded = Vec::with_capacity(n_out);
    for (o, t) in outs[..n_out].iter().zip(&results) {
        let dims: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
        if o.dtype != Some(t.dtype) || o.concrete_shape().as_deref() != Some(&dims[..]) {
            return false;
        }
        let f = Fact::of_tensor(t);
        if f.value.is_none() {
            return false;
        }
        folded.push(f);
    }
    for (o, f) in outs.iter_mut().zip(folded) {
        *o = f;
    }
    true
}

/// A fact's contents as a constant tensor, when its type, shape and every element are known
/// concretely.
pub fn fact_tensor(f: &Fact) -> Option<TensorData> {
    let dtype = f.dtype?;
    let dims: Vec<u64> = f.concrete_shape()?.iter().map(|&d| d as u64).collect();
    let k = f.value.as_ref()?;
    let n: u64 = crate::tensor::numel(&dims);
    if k.len() as u64 != n {
        return None;
    }
    let raw = match k {
        Known::Int(v) => {
            let c: Vec<i64> = v.iter().map(Expr::as_const).collect::<Option<_>>()?;
            int_bytes(dtype, &c)?
        }
        Known::Float(v) => float_bytes(dtype, v)?,
        Known::Ratio(_) => return None,
    };
    TensorData::from_raw(String::new(), dtype, dims, Bytes::from(raw)).ok()
}

fn int_bytes(dtype: DataType, v: &[i64]) -> Option<Vec<u8>> {
    use DataType as D;
    let mut out = Vec::with_capacity(v.len() * 8);
    for &x in v {
        match dtype {
            D::I64 => out.extend_from_slice(&x.to_le_bytes()),
            D::U64 => out.extend_from_slice(&(x as u64).to_le_bytes()),
            D::I32 => out.extend_from_slice(&i32::try_from(x).ok()?.to_le_bytes()),
            D::U32 => out.extend_from_slice(&u32::try_from(x).ok()?.to_le_bytes()),
            D::I16 => out.extend_from_slice(&i16::try_from(x).ok()?.to_le_bytes()),
            D::U16 => out.extend_from_slice(&u16::try_from(x).ok()?.to_le_bytes()),
            D::I8 => out.extend_from_slice(&i8::try_from(x).ok()?.to_le_bytes()),
            D::U8 => out.push(u8::try_from(x).ok()?),
            D::Bool => out.push(u8::from(x != 0)),
            // Integer contents of a float tensor (rules keep floats as `Known::Float`).
            D::F32 | D::F64 | D::F16 | D::BF16 => {
                return float_bytes(dtype, &v.iter().map(|&c| c as f64).collect::<Vec<_>>())
            }
            _ => return None,
        }
    }
    Some(out)
}

fn float_bytes(dtype: DataType, v: &[f64]) -> Option<Vec<u8>> {
    use DataType as D;
    let mut out = Vec::with_capacity(v.len() * 8);
    for &x in v {
        match dtype {
            D::F32 => out.extend_from_slice(&(x as f32).to_le_bytes()),
            D::F64 => out.extend_from_slice(&x.to_le_bytes()),
            D::F16 => out.extend_from_slice(&half::f16::from_f64(x).to_le_bytes()),
            D::BF16 => out.extend_from_slice(&half::bf16::from_f64(x).to_le_bytes()),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_round_trip_through_tensors() {
        for t in [
            TensorData::from_i64("a", vec![3], &[4, -1, 7]),
            TensorData::from_f32("b", vec![2], &[1.5, -0.25]),
        ] {
            let f = Fact::of_tensor(&t);
            let back = fact_tensor(&f).unwrap();
            assert_eq!(
                (back.dtype, &back.dims, back.raw()),
                (t.dtype, &t.dims, t.raw())
            );
        }
        let sym = Fact::with_value(
            DataType::I64,
            vec![Expr::int(1)],
            Known::Int(vec![Expr::sym("N")]),
        );
        assert!(fact_tensor(&sym).is_none());
    }
}
