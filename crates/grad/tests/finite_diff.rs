//! Every gradient rule checked against float64 central finite differences on random inputs.
//!
//! Each case is a small graph over f64 inputs. The training graph (seeded with a random output
//! gradient `r`) is run by memplan's executor; each input element's gradient must equal
//! `(f(x + h e_j) - f(x - h e_j)) / 2h` with `f = sum(y * r)`, computed by running the forward graph,
//! within rtol 1e-4 (plus a small absolute slack for gradients near zero).

use std::collections::BTreeMap;

use memplan_exec::{run, RunOptions, Tensor};
use memplan_grad::{grad, GradSpec, Seed, Wrt};
use memplan_ir::graph::{AttrValue, Attribute, Graph, Model, OpsetImport, ValueId};
use memplan_ir::{infer_model, DataType, DeclDim, DeclType, TensorData};

/// A tiny deterministic generator (the tests must not depend on a seed source).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64) / ((1u64 << 53) as f64)
    }
}

/// How input values are drawn.
#[derive(Clone, Copy)]
enum Domain {
    /// Magnitude in [0.5, 1.5], random sign: away from the kinks of Relu/Abs and from ties.
    Signed,
    /// In [0.5, 1.5].
    Positive,
}

struct T {
    g: Graph,
    opset: i64,
    inputs: Vec<(String, Vec<usize>, Domain)>,
}

fn a(name: &str, value: AttrValue) -> Attribute {
    Attribute {
        name: name.to_string(),
        value,
        doc: String::new(),
    }
}

fn ai(name: &str, v: i64) -> Attribute {
    a(name, AttrValue::Int(v))
}

fn ais(name: &str, v: &[i64]) -> Attribute {
    a(name, AttrValue::Ints(v.to_vec()))
}

impl T {
    fn new() -> T {
        T {
            g: Graph::default(),
            opset: 18,
            inputs: Vec::new(),
        }
    }

    fn input_in(&mut self, name: &str, shape: &[usize], d: Domain) -> ValueId {
        let dims = shape.iter().map(|&s| DeclDim::Value(s as i64)).collect();
        self.inputs.push((name.to_string(), shape.to_vec(), d));
        self.g
            .add_input(name, DeclType::tensor(DataType::F64, dims))
    }

    fn input(&mut self, name: &str, shape: &[usize]) -> ValueId {
        self.input_in(name, shape, Domain::Signed)
    }

    fn ints(&mut self, v: &[i64], dims: &[u64]) -> ValueId {
        let n = format!("c{}", self.g.values.len());
        self.g
            .add_initializer(TensorData::from_i64(n, dims.to_vec(), v))
    }

    fn op(&mut self, op: &str, ins: &[ValueId], attrs: Vec<Attribute>) -> ValueId {
        self.op_n(op, ins, 1, attrs)[0]
    }

    fn op_n(&mut self, op: &str, ins: &[ValueId], n: usize, attrs: Vec<Attribute>) -> Vec<ValueId> {
        let k = self.g.nodes.len();
        let names: Vec<String> = (0..n).map(|i| format!("n{k}_{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let ins: Vec<Option<ValueId>> = ins.iter().map(|&v| Some(v)).collect();
        self.g
            .add_node(format!("node{k}"), op, &ins, &refs, attrs)
            .1
    }

    fn model(mut self, out: ValueId) -> (Model, Vec<(String, Vec<usize>, Domain)>) {
        self.g.outputs.push(out);
        let m = Model {
            graph: self.g,
            ir_version: 8,
            opsets: vec![OpsetImport {
                domain: String::new(),
                version: self.opset,
            }],
            producer_name: "test".into(),
            producer_version: String::new(),
            domain: String::new(),
            model_version: 0,
            doc: String::new(),
            metadata: Vec::new(),
        };
        (m, self.inputs)
    }
}

fn tensor(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_vec(shape, v, None).unwrap()
}

fn run_model(m: &Model, inputs: &BTreeMap<String, Tensor>) -> Vec<(String, Vec<f64>)> {
    let facts = infer_model(m).unwrap();
    let r = run(&m.graph, &facts, inputs.clone(), &RunOptions::default())
        .unwrap_or_else(|e| panic!("run failed: {e}"));
    r.outputs
        .into_iter()
        .map(|(n, t)| (n, t.data::<f64>().unwrap().to_vec()))
        .collect()
}

/// Checks the gradient of `t`'s output with respect to every input against finite differences.
fn check(t: T, out: ValueId) {
    let (model, specs) = t.model(out);
    let facts = infer_model(&model).unwrap();
    let spec = GradSpec {
        wrt: Wrt::Inputs,
        of: None,
        seed: Seed::Input,
    };
    let gm = grad(&model, &facts, &spec).unwrap_or_else(|e| panic!("grad failed: {e}"));
    let gfacts = infer_model(&gm.model).unwrap();
    assert!(
        gfacts.skipped.is_empty(),
        "training graph has nodes without facts: {:?}",
        gfacts.skipped
    );
    let mut rng = Lcg(0x5eed);
    let mut inputs = BTreeMap::new();
    let mut values = BTreeMap::new();
    for (name, shape, d) in &specs {
        let n: usize = shape.iter().product();
        let v: Vec<f64> = (0..n)
            .map(|_| {
                let m = 0.5 + rng.next();
                match d {
                    Domain::Positive => m,
                    Domain::Signed => {
                        if rng.next() < 0.5 {
                            -m
                        } else {
                            m
                        }
                    }
                }
            })
            .collect();
        inputs.insert(name.clone(), tensor(shape, &v));
        values.insert(name.clone(), (shape.clone(), v));
    }
    let yfact = facts.get(out);
    let yshape = yfact.concrete_shape().unwrap();
    let ny: usize = yshape.iter().product();
    let r: Vec<f64> = (0..ny).map(|_| rng.next() * 2.0 - 1.0).collect();
    let mut ginputs = inputs.clone();
    ginputs.insert(gm.seed_input.clone().unwrap(), tensor(&yshape, &r));
    let gouts = run_model(&gm.model, &ginputs);

    let f = |inp: &BTreeMap<String, Tensor>| -> f64 {
        let y = &run_model(&model, inp)[0].1;
        y.iter().zip(&r).map(|(a, b)| a * b).sum()
    };
    let h = 1e-6;
    for g in &gm.grads {
        let got = &gouts.iter().find(|(n, _)| *n == g.output).unwrap().1;
        let (shape, base) = &values[&g.wrt];
        assert_eq!(
            got.len(),
            base.len(),
            "gradient of {} has the wrong size",
            g.wrt
        );
        for j in 0..base.len() {
            let mut plus = base.clone();
            plus[j] += h;
            let mut minus = base.clone();
            minus[j] -= h;
            let mut ip = inputs.clone();
            ip.insert(g.wrt.clone(), tensor(shape, &plus));
            let mut im = inputs.clone();
            im.insert(g.wrt.clone(), tensor(shape, &minus));
            let fd = (f(&ip) - f(&im)) / (2.0 * h);
            let tol = 1e-4 * fd.abs().max(got[j].abs()) + 1e-6;
            assert!(
                (fd - got[j]).abs() <= tol,
                "d/d{}[{j}]: rule {} vs finite difference {fd}",
                g.wrt,
                got[j]
            );
        }
    }
}

fn binary(op: &str, sa: &[usize], sb: &[usize], d: Domain) {
    let mut t = T::new();
    let x = t.input_in("a", sa, d);
    let y = t.input_in("b", sb, d);
    let o = t.op(op, &[x, y], vec![]);
    check(t, o);
}

#[test]
fn arithmetic_with_broadcasting() {
    for op in ["Add", "Sub", "Mul", "Div"] {
        binary(op, &[2, 3], &[2, 3], Domain::Signed);
        binary(op, &[2, 1, 3], &[4, 1], Domain::Signed);
        binary(op, &[3], &[2, 3], Domain::Signed);
    }
    binary("Pow", &[2, 3], &[3], Domain::Positive);
    binary("Max", &[2, 3], &[2, 3], Domain::Signed);
    binary("Min", &[2, 3], &[1, 3], Domain::Signed);
}

#[test]
fn unary_math_and_activations() {
    for (op, d) in [
        ("Neg", Domain::Signed),
        ("Exp", Domain::Signed),
        ("Log", Domain::Positive),
        ("Sqrt", Domain::Positive),
        ("Reciprocal", Domain::Positive),
        ("Sigmoid", Domain::Signed),
        ("Tanh", Domain::Signed),
        ("Relu", Domain::Signed),
        ("Erf", Domain::Signed),
        ("Gelu", Domain::Signed),
        ("Softplus", Domain::Signed),
        ("Sin", Domain::Signed),
        ("Cos", Domain::Signed),
        ("Abs", Domain::Signed),
        ("Identity", Domain::Signed),
    ] {
        let mut t = T::new();
        let x = t.input_in("x", &[2, 3], d);
        let o = t.op(op, &[x], vec![]);
        check(t, o);
    }
}

#[test]
fn where_and_variadic() {
    let mut t = T::new();
    let x = t.input("x", &[2, 3]);
    let y = t.input("y", &[3]);
    let z = t.input("z", &[2, 3]);
    let zero = t.g.add_initializer(TensorData {
        name: "zero".into(),
        dtype: DataType::F64,
        dims: vec![],
        storage: memplan_ir::TensorStorage::Raw(bytes::Bytes::from(0f64.to_le_bytes().to_vec())),
        origin: Default::default(),
        doc: String::new(),
        metadata: Vec::new(),
    });
    let c = t.op("Greater", &[z, zero], vec![]);
    let w = t.op("Where", &[c, x, y], vec![]);
    let s = t.op("Sum", &[w, x, z], vec![]);
    let m = t.op("Mean", &[s, y], vec![]);
    check(t, m);
}

#[test]
fn matmul_shapes() {
    for (sa, sb) in [
        (vec![3, 4], vec![4, 2]),
        (vec![2, 3, 4], vec![4, 5]),
        (vec![2, 1, 3, 4], vec![3, 4, 2]),
        (vec![4], vec![4, 3]),
        (vec![2, 3, 4], vec![4]),
        (vec![4], vec![4]),
    ] {
        binary("MatMul", &sa, &sb, Domain::Signed);
    }
}

#[test]
fn gemm_transposes() {
    for (ta, tb) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        let mut t = T::new();
        let sa = if ta == 1 { [4, 3] } else { [3, 4] };
        let sb = if tb == 1 { [2, 4] } else { [4, 2] };
        let x = t.input("a", &sa);
        let w = t.input("b", &sb);
        let c = t.input("c", &[2]);
        let attrs = vec![
            ai("transA", ta),
            ai("transB", tb),
            a("alpha", AttrValue::Float(0.5)),
            a("beta", AttrValue::Float(2.0)),
        ];
        let o = t.op("Gemm", &[x, w, c], attrs);
        check(t, o);
    }
}

#[test]
fn einsum_equations() {
    for (eq, shapes) in [
        ("ij,jk->ik", vec![vec![2, 3], vec![3, 4]]),
        ("bij,bjk->bik", vec![vec![2, 2, 3], vec![2, 3, 2]]),
        ("ij->i", vec![vec![2, 3]]),
        ("...ij,...jk->...ik", vec![vec![2, 2, 3], vec![2, 3, 2]]),
        ("bikc,bjkc->bijc", vec![vec![1, 2, 3, 2], vec![1, 2, 3, 2]]),
        ("ij,j", vec![vec![2, 3], vec![3]]),
    ] {
        let mut t = T::new();
        let ins: Vec<ValueId> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| t.input(&format!("x{i}"), s))
            .collect();
        let o = t.op(
            "Einsum",
            &ins,
            vec![a("equation", AttrValue::String(eq.as_bytes().to_vec()))],
        );
        check(t, o);
    }
}

#[test]
fn reductions_and_softmax() {
    for op in [
        "ReduceSum",
        "ReduceMean",
        "ReduceMax",
        "ReduceMin",
        "ReduceLogSumExp",
        "ReduceSumSquare",
    ] {
        for keep in [0, 1] {
            let mut t = T::new();
            let x = t.input("x", &[2, 3, 4]);
            let axes = t.ints(&[1, -1], &[2]);
            let o = t.op(op, &[x, axes], vec![ai("keepdims", keep)]);
            check(t, o);
        }
        let mut t = T::new();
        let x = t.input("x", &[2, 3]);
        let o = t.op(op, &[x], vec![ai("keepdims", 0)]);
        check(t, o);
    }
    for op in ["Softmax", "LogSoftmax"] {
        for axis in [-1, 1] {
            let mut t = T::new();
            let x = t.input("x", &[2, 3, 4]);
            let o = t.op(op, &[x], vec![ai("axis", axis)]);
            check(t, o);
        }
    }
}

#[test]
fn layer_normalization() {
    for axis in [-1, 1] {
        let mut t = T::new();
        let x = t.input("x", &[2, 3, 4]);
        let sshape: Vec<usize> = if axis == -1 { vec![4] } else { vec![3, 4] };
        let s = t.input("scale", &sshape);
        let b = t.input("bias", &sshape);
        let o = t.op("LayerNormalization", &[x, s, b], vec![ai("axis", axis)]);
        check(t, o);
    }
}

#[test]
fn movement() {
    let mut t = T::new();
    let x = t.input("x", &[2, 3, 4]);
    let shp = t.ints(&[6, 4], &[2]);
    let r = t.op("Reshape", &[x, shp], vec![]);
    let tr = t.op("Transpose", &[r], vec![ais("perm", &[1, 0])]);
    let ax = t.ints(&[0], &[1]);
    let u = t.op("Unsqueeze", &[tr, ax], vec![]);
    let s = t.op("Squeeze", &[u, ax], vec![]);
    let f = t.op("Flatten", &[s], vec![ai("axis", 1)]);
    check(t, f);

    let mut t = T::new();
    let x = t.input("x", &[3, 1]);
    let shp = t.ints(&[2, 3, 4], &[3]);
    let e = t.op("Expand", &[x, shp], vec![]);
    check(t, e);

    let mut t = T::new();
    let x = t.input("x", &[2, 3]);
    let y = t.input("y", &[2, 2]);
    let c = t.op("Concat", &[x, y, x], vec![ai("axis", 1)]);
    let sp = t.ints(&[3, 5], &[2]);
    let parts = t.op_n("Split", &[c, sp], 2, vec![ai("axis", 1)]);
    let o = t.op("Mul", &[parts[1], parts[1]], vec![]);
    check(t, o);
}

#[test]
fn selecting_ops() {
    let mut t = T::new();
    let x = t.input("x", &[4, 5]);
    let st = t.ints(&[1, -1], &[2]);
    let en = t.ints(&[4, -5], &[2]);
    let ax = t.ints(&[0, 1], &[2]);
    let sp = t.ints(&[2, -2], &[2]);
    let o = t.op("Slice", &[x, st, en, ax, sp], vec![]);
    check(t, o);

    let mut t = T::new();
    let x = t.input("x", &[4, 3]);
    let idx = t.ints(&[0, 2, 2, -1], &[2, 2]);
    let o = t.op("Gather", &[x, idx], vec![ai("axis", 0)]);
    check(t, o);

    let mut t = T::new();
    let x = t.input("x", &[3, 3]);
    let idx = t.ints(&[0, 2, 1, 1, 0, 0], &[2, 3]);
    let o = t.op("GatherElements", &[x, idx], vec![ai("axis", 0)]);
    check(t, o);

    let mut t = T::new();
    let x = t.input("x", &[2, 3, 2]);
    let idx = t.ints(&[0, 1, 1, 2, 0, 1], &[3, 2]);
    let o = t.op("GatherND", &[x, idx], vec![]);
    check(t, o);

    let mut t = T::new();
    let x = t.input("x", &[2, 3]);
    let rep = t.ints(&[2, 2], &[2]);
    let o = t.op("Tile", &[x, rep], vec![]);
    check(t, o);

    let mut t = T::new();
    let x = t.input("x", &[3, 5]);
    let k = t.ints(&[2], &[1]);
    let o = t.op_n("TopK", &[x, k], 2, vec![ai("axis", 1)]);
    check(t, o[0]);
}

#[test]
fn shared_values_accumulate() {
    // x feeds three paths; the gradient is the sum of the three contributions.
    let mut t = T::new();
    let x = t.input("x", &[2, 3]);
    let w = t.input("w", &[3, 3]);
    let m = t.op("MatMul", &[x, w], vec![]);
    let s = t.op("Sigmoid", &[m], vec![]);
    let p = t.op("Mul", &[s, x], vec![]);
    let o = t.op("Add", &[p, x], vec![]);
    check(t, o);
}
