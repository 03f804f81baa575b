//! Concatenations assembled in place: the planner writes a `Concat`'s inputs straight into their
//! parts of its output's buffer, the checker verifies the parts (and refuses forged ones), and the
//! planned run is bit-identical to the plain one with the plan's peak.

use std::collections::BTreeMap;

use memplan_exec::{run, run_planned, RunOptions, Tensor};
use memplan_ir::graph::{AttrValue, Attribute, DeclDim, DeclType, Graph};
use memplan_ir::{DataType, TensorData};
use memplan_plan::{check, optimize, Options, Plan};

/// x [L, 4, 3] -> a = x·w, b = -x -> y = Concat(a, b, axis 1) [L, 8, 3] -> z = y * y (output).
fn graph(lead: i64) -> Graph {
    let mut g = Graph::default();
    let x = g.add_input(
        "x",
        DeclType::tensor(
            DataType::F32,
            vec![
                DeclDim::Value(lead),
                DeclDim::Param("N".into()),
                DeclDim::Value(3),
            ],
        ),
    );
    let w = g.add_initializer(TensorData::from_f32(
        "w",
        vec![3, 3],
        &[0.5, -1.0, 2.0, 1.5, 0.25, -0.75, 1.0, 3.0, -2.0],
    ));
    let (_, a) = g.add_node("mm", "MatMul", &[Some(x), Some(w)], &["a"], vec![]);
    let (_, b) = g.add_node("neg", "Neg", &[Some(x)], &["b"], vec![]);
    let axis = Attribute {
        name: "axis".into(),
        value: AttrValue::Int(1),
        doc: String::new(),
    };
    let (_, y) = g.add_node(
        "cat",
        "Concat",
        &[Some(a[0]), Some(b[0])],
        &["y"],
        vec![axis],
    );
    let (_, z) = g.add_node("sq", "Mul", &[Some(y[0]), Some(y[0])], &["z"], vec![]);
    g.outputs.push(z[0]);
    g
}

fn inputs(lead: usize, n: usize) -> BTreeMap<String, Tensor> {
    let vals: Vec<f32> = (0..lead * n * 3).map(|i| (i as f32 * 0.37).sin()).collect();
    BTreeMap::from([(
        "x".to_string(),
        Tensor::from_vec::<f32>(&[lead, n, 3], &vals, None).unwrap(),
    )])
}

fn plan(g: &Graph, n: i64) -> Plan {
    let facts = memplan_ir::infer_graph(g, 18).unwrap();
    let dims = BTreeMap::from([("N".to_string(), n)]);
    optimize(g, &facts, &dims, &Options::default())
        .unwrap()
        .plan
}

#[test]
fn an_assembled_concat_runs_in_place_and_bit_identical() {
    let g = graph(1);
    let facts = memplan_ir::infer_graph(&g, 18).unwrap();
    let p = plan(&g, 5);
    assert_eq!(p.assembled.len(), 1, "{}", p.render());
    let a = &p.assembled[0];
    assert_eq!(a.output, "y");
    let parts: Vec<(&str, u64, u64)> = a
        .parts
        .iter()
        .map(|x| (x.value.as_str(), x.offset, x.size))
        .collect();
    assert_eq!(parts, [("a", 0, 60), ("b", 60, 60)]);
    // One buffer holds the output and its parts, from the first part's step on.
    let buf = p.buffers.iter().find(|b| b.values[0] == "y").unwrap();
    let mut vals = buf.values.clone();
    vals.sort();
    assert_eq!(vals, ["a", "b", "y"]);
    let step_of = |name: &str| p.schedule.iter().position(|s| s.name == name).unwrap();
    assert_eq!(buf.first, step_of("mm").min(step_of("neg")));

    let plain = run(&g, &facts, inputs(1, 5), &RunOptions::default()).unwrap();
    let planned = run_planned(&g, &facts, inputs(1, 5), &p, 18).unwrap();
    assert_eq!(plain.outputs[0].1.bytes(), planned.outputs[0].1.bytes());
    assert_eq!(planned.peak_bytes, p.arena_bytes + p.resident_bytes);
    assert!(planned.plan.unwrap().misses.is_empty());
}

#[test]
fn a_concat_whose_inputs_are_not_contiguous_runs_is_not_assembled() {
    // With a leading dim of 2, each input is two separate runs of the output.
    let g = graph(2);
    let p = plan(&g, 5);
    assert!(p.assembled.is_empty(), "{}", p.render());
}

#[test]
fn the_checker_refuses_forged_assemblies() {
    let g = graph(1);
    let facts = memplan_ir::infer_graph(&g, 18).unwrap();
    let p = plan(&g, 5);
    assert_eq!(check(&g, &facts, &p), Ok(()));
    let err = |f: &dyn Fn(&mut Plan)| {
        let mut q = p.clone();
        f(&mut q);
        check(&g, &facts, &q).unwrap_err().to_string()
    };
    let e = err(&|q| q.assembled[0].parts[1].offset = 64);
    assert!(e.contains("part 'b' at offset 64"), "{e}");
    let e = err(&|q| q.assembled[0].parts.swap(0, 1));
    assert!(e.contains("are not its inputs"), "{e}");
    let e = err(&|q| q.assembled[0].output = "z".into());
    assert!(e.contains("its output is not 'z'"), "{e}");
    let e = err(&|q| q.assembled[0].node = 99);
    assert!(e.contains("no such node"), "{e}");
    // Without the decision, the buffer that lists the parts is wrong.
    let e = err(&|q| {
        q.assembled.clear();
    });
    assert!(e.contains("shares its bytes with"), "{e}");
    // The same decision over the graph where the parts are not contiguous.
    let g2 = graph(2);
    let f2 = memplan_ir::infer_graph(&g2, 18).unwrap();
    let mut q = plan(&g2, 5);
    q.assembled = p.assembled.clone();
    let e = check(&g2, &f2, &q).unwrap_err().to_string();
    assert!(e.contains("contiguous runs"), "{e}");
}
