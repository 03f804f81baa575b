//! Sequence and optional values on a hand-built graph: outputs checked by hand, the simulator's peak
//! equal to the executor's measured peak (a sequence is one packed buffer of its elements), and a
//! planned run bit-identical to the plain one, measured = planned, at several sizes.

use std::collections::BTreeMap;

use memplan_exec::{run, run_planned, RunOptions, Tensor};
use memplan_ir::graph::{AttrValue, Attribute, DeclDim, DeclType, Graph};
use memplan_ir::{DataType, TensorData};
use memplan_plan::{optimize, Options};

fn attr(name: &str, value: AttrValue) -> Attribute {
    Attribute {
        name: name.into(),
        value,
        doc: String::new(),
    }
}

fn int_const(g: &mut Graph, name: &str, v: i64) -> memplan_ir::ValueId {
    let t = TensorData::from_i64(name, vec![], &[v]);
    let (_, o) = g.add_node(
        name,
        "Constant",
        &[],
        &[name],
        vec![attr("value", AttrValue::Tensor(t))],
    );
    o[0]
}

/// `x` [N, 3] is split into 3 columns; `Relu(x)` is inserted at the front; element 2 is read back
/// (`col1`), the sequence is joined on axis 1 (`joined` [N, 6]) and stacked after erasing the
/// front (`stacked` [3, N, 1]); `len` is its length.
fn graph() -> Graph {
    let mut g = Graph::default();
    let x = g.add_input(
        "x",
        DeclType::tensor(
            DataType::F32,
            vec![DeclDim::Param("N".into()), DeclDim::Value(3)],
        ),
    );
    let (_, s) = g.add_node(
        "split",
        "SplitToSequence",
        &[Some(x)],
        &["cols"],
        vec![attr("axis", AttrValue::Int(1))],
    );
    let (_, r) = g.add_node("relu", "Relu", &[Some(x)], &["r"], vec![]);
    let zero = int_const(&mut g, "zero", 0);
    let (_, s2) = g.add_node(
        "insert",
        "SequenceInsert",
        &[Some(s[0]), Some(r[0]), Some(zero)],
        &["seq"],
        vec![],
    );
    let two = int_const(&mut g, "two", 2);
    let (_, at) = g.add_node(
        "at",
        "SequenceAt",
        &[Some(s2[0]), Some(two)],
        &["col1"],
        vec![],
    );
    let (_, j) = g.add_node(
        "join",
        "ConcatFromSequence",
        &[Some(s2[0])],
        &["joined"],
        vec![attr("axis", AttrValue::Int(1))],
    );
    let (_, e) = g.add_node(
        "erase",
        "SequenceErase",
        &[Some(s2[0]), Some(zero)],
        &["rest"],
        vec![],
    );
    let (_, st) = g.add_node(
        "stack",
        "ConcatFromSequence",
        &[Some(e[0])],
        &["stacked"],
        vec![
            attr("axis", AttrValue::Int(0)),
            attr("new_axis", AttrValue::Int(1)),
        ],
    );
    let (_, n) = g.add_node("len", "SequenceLength", &[Some(e[0])], &["len"], vec![]);
    g.outputs.extend([at[0], j[0], st[0], n[0]]);
    g
}

fn inputs(n: usize) -> BTreeMap<String, Tensor> {
    let v: Vec<f32> = (0..n * 3).map(|i| i as f32 - 4.0).collect();
    BTreeMap::from([(
        "x".into(),
        Tensor::from_vec::<f32>(&[n, 3], &v, None).unwrap(),
    )])
}

#[test]
fn sequence_ops_compute_by_hand_and_estimate_equals_measured() {
    let g = graph();
    let facts = memplan_ir::infer_graph(&g, 18).unwrap();
    assert!(facts.skipped.is_empty(), "{:?}", facts.skipped);
    for n in [1usize, 4, 9] {
        let r = run(&g, &facts, inputs(n), &RunOptions::default()).unwrap();
        let x: Vec<f32> = (0..n * 3).map(|i| i as f32 - 4.0).collect();
        let col = |c: usize| (0..n).map(|i| x[i * 3 + c]).collect::<Vec<f32>>();
        let out = |k: usize| r.outputs[k].1.data::<f32>().unwrap().to_vec();
        // Element 2 after the insertion is column 1.
        assert_eq!(r.outputs[0].1.shape, [n, 1]);
        assert_eq!(out(0), col(1));
        // Joined on axis 1: Relu(x) then the three columns, row by row.
        assert_eq!(r.outputs[1].1.shape, [n, 6]);
        let want: Vec<f32> = (0..n)
            .flat_map(|i| {
                let row = &x[i * 3..i * 3 + 3];
                row.iter()
                    .map(|v| v.max(0.0))
                    .chain(row.iter().copied())
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(out(1), want);
        // Stacked: the three columns on a new leading axis.
        assert_eq!(r.outputs[2].1.shape, [3, n, 1]);
        assert_eq!(out(2), [col(0), col(1), col(2)].concat());
        assert_eq!(r.outputs[3].1.data::<i64>().unwrap(), &[3]);

        let t = memplan_sim::Timeline::build(&g, &facts, &facts.order).unwrap();
        let est = memplan_sim::peak::concrete_peak(&t, &r.dims).unwrap();
        assert_eq!(
            est.peak_bytes, r.peak_bytes,
            "estimate vs measured at N={n}"
        );
        // The sequence `seq` holds Relu(x) and the three columns: twice x's bytes.
        let seq = g.find_value("seq").unwrap();
        let bytes = facts.get(seq).bytes().unwrap().eval_map(&r.dims).unwrap();
        assert_eq!(bytes, 2 * 4 * 3 * n as i64);
    }
}

#[test]
fn a_planned_run_with_sequences_is_bit_identical_and_measured_equals_planned() {
    let g = graph();
    let facts = memplan_ir::infer_graph(&g, 18).unwrap();
    for n in [2usize, 7] {
        let dims = BTreeMap::from([("N".to_string(), n as i64)]);
        let p = optimize(&g, &facts, &dims, &Options::default())
            .unwrap()
            .plan;
        let plain = run(&g, &facts, inputs(n), &RunOptions::default()).unwrap();
        let planned = run_planned(&g, &facts, inputs(n), &p, 18).unwrap();
        for ((name, a), (_, b)) in plain.outputs.iter().zip(&planned.outputs) {
            assert_eq!(a.bytes(), b.bytes(), "output {name} at N={n}");
        }
        assert_eq!(planned.peak_bytes, p.arena_bytes + p.resident_bytes);
        assert!(planned.plan.unwrap().misses.is_empty());
    }
}

#[test]
fn a_tensor_fed_where_a_sequence_is_declared_is_refused_by_name() {
    let mut g = Graph::default();
    let s = g.add_input(
        "s",
        DeclType {
            ty: memplan_ir::graph::TypeDecl::Sequence(Some(Box::new(DeclType::tensor(
                DataType::F32,
                vec![DeclDim::Value(2)],
            )))),
            denotation: String::new(),
        },
    );
    let (_, n) = g.add_node("len", "SequenceLength", &[Some(s)], &["n"], vec![]);
    g.outputs.push(n[0]);
    let facts = memplan_ir::infer_graph(&g, 18).unwrap();
    let t = Tensor::from_vec::<f32>(&[2], &[1.0, 2.0], None).unwrap();
    let err = run(
        &g,
        &facts,
        BTreeMap::from([("s".into(), t)]),
        &RunOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        "input 's': is a tensor but the model expects a sequence or optional"
    );
    // The same value packed as a one-element sequence runs.
    let e = Tensor::from_vec::<f32>(&[2], &[1.0, 2.0], None).unwrap();
    let packed = Tensor::packed(memplan_ir::SeqKind::Sequence, DataType::F32, &[&e], None).unwrap();
    let facts = memplan_ir::infer_graph_with(
        &g,
        18,
        &BTreeMap::from([(
            "s".to_string(),
            memplan_ir::Fact::sequence(
                memplan_ir::SeqKind::Sequence,
                Some(DataType::F32),
                Some(vec![memplan_ir::Fact::new(DataType::F32, vec![2.into()])]),
            ),
        )]),
    )
    .unwrap();
    let r = run(
        &g,
        &facts,
        BTreeMap::from([("s".into(), packed)]),
        &RunOptions::default(),
    )
    .unwrap();
    assert_eq!(r.outputs[0].1.data::<i64>().unwrap(), &[1]);
}
