//! Emits backward nodes into the graph: fresh names, constants, and the shape helpers rules share.

use std::collections::BTreeMap;

use bytes::Bytes;
use memplan_ir::graph::{AttrValue, Attribute, Graph, Names, ValueId};
use memplan_ir::tensor::{DataOrigin, TensorData, TensorStorage};
use memplan_ir::{DataType, Expr, Facts};

/// Adds nodes to a graph under construction. Names are `grad/<hint>_<n>`, unique in the graph.
pub struct Builder<'a> {
    pub g: &'a mut Graph,
    /// Facts of the forward graph (values that existed before differentiation).
    pub facts: &'a Facts,
    pub opset: i64,
    names: Names,
    next: usize,
    shapes: BTreeMap<ValueId, ValueId>,
}

/// An attribute.
pub fn attr(name: &str, value: AttrValue) -> Attribute {
    Attribute {
        name: name.to_string(),
        value,
        doc: String::new(),
    }
}

/// An INT attribute.
pub fn attr_int(name: &str, v: i64) -> Attribute {
    attr(name, AttrValue::Int(v))
}

/// An INTS attribute.
pub fn attr_ints(name: &str, v: &[i64]) -> Attribute {
    attr(name, AttrValue::Ints(v.to_vec()))
}

/// A constant tensor of `dtype` holding `values` (converted from f64), with the given dims.
pub fn float_tensor(
    name: &str,
    dtype: DataType,
    dims: Vec<u64>,
    values: &[f64],
) -> Option<TensorData> {
    let mut raw: Vec<u8> = Vec::new();
    for &x in values {
        match dtype {
            DataType::F32 => raw.extend_from_slice(&(x as f32).to_le_bytes()),
            DataType::F64 => raw.extend_from_slice(&x.to_le_bytes()),
            DataType::F16 => raw.extend_from_slice(&half::f16::from_f64(x).to_le_bytes()),
            DataType::BF16 => raw.extend_from_slice(&half::bf16::from_f64(x).to_le_bytes()),
            _ => return None,
        }
    }
    Some(TensorData {
        name: name.to_string(),
        dtype,
        dims,
        storage: TensorStorage::Raw(Bytes::from(raw)),
        origin: DataOrigin::Inline,
        doc: String::new(),
        metadata: Vec::new(),
    })
}

impl<'a> Builder<'a> {
    pub fn new(g: &'a mut Graph, facts: &'a Facts, opset: i64) -> Builder<'a> {
        let names = Names::of(g);
        Builder {
            g,
            facts,
            opset,
            names,
            next: 0,
            shapes: BTreeMap::new(),
        }
    }

    /// A name not yet used in the graph, `hint` itself when free.
    pub fn unique_name(&mut self, hint: &str) -> String {
        self.names.fresh(hint)
    }

    fn fresh(&mut self, hint: &str) -> String {
        self.next += 1;
        let name = format!("grad/{hint}_{}", self.next);
        self.unique_name(&name)
    }

    /// A node with one output.
    pub fn op(&mut self, op: &str, inputs: &[ValueId], attrs: Vec<Attribute>) -> ValueId {
        let ins: Vec<Option<ValueId>> = inputs.iter().map(|&v| Some(v)).collect();
        self.op_n(op, &ins, 1, attrs)[0]
    }

    /// A node with one output of the given name.
    pub fn op_named(
        &mut self,
        op: &str,
        inputs: &[ValueId],
        name: &str,
        attrs: Vec<Attribute>,
    ) -> ValueId {
        let ins: Vec<Option<ValueId>> = inputs.iter().map(|&v| Some(v)).collect();
        let node = self.fresh(op);
        self.g.add_node(node, op, &ins, &[name], attrs).1[0]
    }

    /// A node with `n` outputs and possibly omitted inputs.
    pub fn op_n(
        &mut self,
        op: &str,
        inputs: &[Option<ValueId>],
        n: usize,
        attrs: Vec<Attribute>,
    ) -> Vec<ValueId> {
        let node = self.fresh(op);
        let outs: Vec<String> = (0..n).map(|_| self.fresh(&op.to_lowercase())).collect();
        let refs: Vec<&str> = outs.iter().map(String::as_str).collect();
        self.g.add_node(node, op, inputs, &refs, attrs).1
    }

    /// A constant initializer.
    pub fn constant(&mut self, mut t: TensorData) -> ValueId {
        t.name = self.fresh("c");
        self.g.add_initializer(t)
    }

    /// A 0-d constant of a float type.
    pub fn scalar(&mut self, dtype: DataType, v: f64) -> ValueId {
        let t = float_tensor("", dtype, vec![], &[v]).unwrap_or_else(|| {
            // Non-float types only reach here through a rule bug; f32 keeps the graph valid.
            float_tensor("", DataType::F32, vec![], &[v]).expect("f32 constant")
        });
        self.constant(t)
    }

    /// A 1-D int64 constant.
    pub fn ints(&mut self, v: &[i64]) -> ValueId {
        self.constant(TensorData::from_i64("", vec![v.len() as u64], v))
    }

    /// `Shape(v)`, made once per value.
    pub fn shape_of(&mut self, v: ValueId) -> ValueId {
        if let Some(&s) = self.shapes.get(&v) {
            return s;
        }
        let s = self.op("Shape", &[v], vec![]);
        self.shapes.insert(v, s);
        s
    }

    /// A tensor of `v`'s shape filled with `x`, of type `dtype`.
    pub fn fill_like(&mut self, v: ValueId, dtype: DataType, x: f64) -> ValueId {
        let s = self.shape_of(v);
        let value = float_tensor("value", dtype, vec![1], &[x])
            .unwrap_or_else(|| TensorData::from_i64("value", vec![1], &[x as i64]));
        self.op(
            "ConstantOfShape",
            &[s],
            vec![attr("value", AttrValue::Tensor(value))],
        )
    }

    /// Zeros of `v`'s shape and type `dtype`.
    pub fn zeros_like(&mut self, v: ValueId, dtype: DataType) -> ValueId {
        self.fill_like(v, dtype, 0.0)
    }

    /// `ReduceSum` over `axes` (opset-appropriate form). An empty `axes` returns `x` unchanged.
    pub fn reduce_sum(&mut self, x: ValueId, axes: &[i64], keepdims: bool) -> ValueId {
        self.reduce("ReduceSum", x, axes, keepdims)
    }

    /// A reduction op over `axes` in the opset's form (axes input from opset 18, or 13 for ReduceSum).
    pub fn reduce(&mut self, op: &str, x: ValueId, axes: &[i64], keepdims: bool) -> ValueId {
        if axes.is_empty() {
            return x;
        }
        let keep = attr_int("keepdims", i64::from(keepdims));
        let input_form = if op == "ReduceSum" {
            self.opset >= 13
        } else {
            self.opset >= 18
        };
        if input_form {
            let a = self.ints(axes);
            self.op(op, &[x, a], vec![keep])
        } else {
            self.op(op, &[x], vec![keep, attr_ints("axes", axes)])
        }
    }

    /// `Reshape(x, Shape(like))`.
    pub fn reshape_like(&mut self, x: ValueId, like: ValueId) -> ValueId {
        let s = self.shape_of(like);
        self.op("Reshape", &[x, s], vec![])
    }

    /// `Unsqueeze(x, axes)` in the opset's form.
    pub fn unsqueeze(&mut self, x: ValueId, axes: &[i64]) -> ValueId {
        if self.opset >= 13 {
            let a = self.ints(axes);
            self.op("Unsqueeze", &[x, a], vec![])
        } else {
            self.op("Unsqueeze", &[x], vec![attr_ints("axes", axes)])
        }
    }

    /// The gradient `dy` (of shape `out`) summed down to an input `x` of shape `inp` that was
    /// broadcast to `out`: leading extra axes and axes where `x` has extent 1 and `out` does not are
    /// summed, then the result takes `x`'s shape. An input extent that is neither 1 nor provably the
    /// output's (`min(S, 2048)` against `S`) is taken as equal to it, and the result is reshaped to
    /// `x`'s shape at run time, so a run where it was in fact broadcast fails on that reshape rather
    /// than returning a wrong gradient.
    pub fn unbroadcast(
        &mut self,
        dy: ValueId,
        out: &[Expr],
        x: ValueId,
        inp: &[Expr],
    ) -> Result<ValueId, String> {
        if inp.len() > out.len() {
            return Err(format!(
                "input of rank {} is larger than the output's rank {}",
                inp.len(),
                out.len()
            ));
        }
        let lead = out.len() - inp.len();
        let mut axes: Vec<i64> = (0..lead as i64).collect();
        let mut assumed = false;
        for (i, d) in inp.iter().enumerate() {
            let o = &out[lead + i];
            if d == o {
                continue;
            }
            match (d.as_const(), o.as_const()) {
                (Some(1), _) => axes.push((lead + i) as i64),
                (Some(a), Some(b)) => {
                    return Err(format!(
                        "input dim {i} ({a}) does not broadcast to the output's {b}"
                    ))
                }
                _ => assumed = true,
            }
        }
        if axes.is_empty() && !assumed {
            return Ok(dy);
        }
        let s = self.reduce_sum(dy, &axes, true);
        Ok(self.reshape_like(s, x))
    }
}
