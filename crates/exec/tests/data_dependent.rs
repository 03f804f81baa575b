//! Sizes made from the data (`NonZero`): inference gives them fresh symbols, a run binds each to
//! the size it made (`RunResult::dims`), and the estimate at those dims equals the measured peak.

use std::collections::BTreeMap;

use memplan_exec::{run, RunOptions, RunResult, Tensor};
use memplan_ir::graph::{DeclDim, DeclType, Graph};
use memplan_ir::infer::Facts;
use memplan_ir::DataType;

/// Runs `g` on `x` and checks the estimate at the run's dims against the measured peak.
fn run_exact(g: &Graph, facts: &Facts, x: &[f32]) -> RunResult {
    let t = Tensor::from_vec::<f32>(&[x.len()], x, None).unwrap();
    let r = run(
        g,
        facts,
        BTreeMap::from([("x".to_string(), t)]),
        &RunOptions::default(),
    )
    .unwrap();
    let tl = memplan_sim::Timeline::build(g, facts, &facts.order).unwrap();
    let est = memplan_sim::peak::concrete_peak(&tl, &r.dims).unwrap();
    assert_eq!(est.peak_bytes, r.peak_bytes, "{:?}", r.dims);
    r
}

#[test]
fn a_run_binds_the_sizes_it_makes_from_the_data() {
    memplan_exec::install_const_folder();
    let mut g = Graph::default();
    let x = g.add_input(
        "x",
        DeclType::tensor(DataType::F32, vec![DeclDim::Param("N".into())]),
    );
    let nz = g.add_node("nz", "NonZero", &[Some(x)], &["nz"], vec![]).1[0];
    let f = g
        .add_node(
            "f",
            "Cast",
            &[Some(nz)],
            &["f"],
            vec![memplan_ir::Attribute {
                name: "to".into(),
                value: memplan_ir::AttrValue::Int(1),
                doc: String::new(),
            }],
        )
        .1[0];
    g.outputs.push(f);
    let facts = memplan_ir::infer_graph(&g, 18).unwrap();
    let sym = facts.symbols.introduced[0].name.clone();
    for (n, every) in [(10usize, 3usize), (7, 1), (12, 5)] {
        let v: Vec<f32> = (0..n)
            .map(|i| f32::from(u8::from(i % every == 0)))
            .collect();
        let r = run_exact(&g, &facts, &v);
        let count = v.iter().filter(|&&e| e != 0.0).count();
        assert_eq!(r.dims.get(&sym), Some(&(count as i64)), "{:?}", r.dims);
    }
}

fn attr(name: &str, value: memplan_ir::AttrValue) -> memplan_ir::Attribute {
    memplan_ir::Attribute {
        name: name.into(),
        value,
        doc: String::new(),
    }
}

/// A branch on "the selection is empty" (`Equal(ReduceProd(Shape(NonZero(x))), 0)`, how
/// torchvision's detection heads guard their box decoding): a count made from the data may be 0,
/// so inference must not decide the condition, and both an empty and a non-empty selection run,
/// with the estimate at the run's dims (the branch taken included) equal to the measured peak.
#[test]
fn a_count_made_from_the_data_may_be_zero() {
    use memplan_ir::{AttrValue, TensorData};
    memplan_exec::install_const_folder();
    let branch = |name: &str, v: f32| {
        let mut b = Graph {
            name: name.into(),
            ..Graph::default()
        };
        let t = TensorData::from_f32(format!("{name}_v"), vec![2], &[v, v]);
        let o = b
            .add_node(
                name,
                "Constant",
                &[],
                &[&format!("{name}_out")],
                vec![attr("value", AttrValue::Tensor(t))],
            )
            .1[0];
        b.outputs.push(o);
        b
    };
    let mut g = Graph::default();
    let x = g.add_input(
        "x",
        DeclType::tensor(DataType::F32, vec![DeclDim::Param("N".into())]),
    );
    let nz = g.add_node("nz", "NonZero", &[Some(x)], &["nz"], vec![]).1[0];
    let s = g.add_node("s", "Shape", &[Some(nz)], &["s"], vec![]).1[0];
    let p = g
        .add_node(
            "p",
            "ReduceProd",
            &[Some(s)],
            &["p"],
            vec![attr("keepdims", AttrValue::Int(0))],
        )
        .1[0];
    let zero = g.add_initializer(TensorData::from_i64("zero", vec![], &[0]));
    let e = g
        .add_node("e", "Equal", &[Some(p), Some(zero)], &["e"], vec![])
        .1[0];
    let out = g
        .add_node(
            "if",
            "If",
            &[Some(e)],
            &["out"],
            vec![
                attr(
                    "then_branch",
                    AttrValue::Graph(Box::new(branch("then", 0.0))),
                ),
                attr(
                    "else_branch",
                    AttrValue::Graph(Box::new(branch("else", 1.0))),
                ),
            ],
        )
        .1[0];
    g.outputs.push(out);
    let facts = memplan_ir::infer_graph(&g, 18).unwrap();
    assert_eq!(
        facts.get(e).value,
        None,
        "the emptiness of a selection was decided"
    );
    for (v, want) in [(vec![0.0f32; 5], 0.0f32), (vec![0.0, 2.0, 0.0], 1.0)] {
        let r = run_exact(&g, &facts, &v);
        assert_eq!(r.outputs[0].1.to_f32_vec().unwrap(), [want, want]);
    }
}

/// A count the data cannot change: `NonZero` of ones (`ConstantOfShape` over `Shape(x)`, cast to
/// float by the executor's own kernel in the value-set proof), the index grid TorchScript writes.
/// Inference gives it as a formula of `N` with no fresh symbol, so the estimate at `N` alone (no
/// run first) is the measured peak; the same over zeros counts none.
#[test]
fn a_count_its_input_proves_needs_no_run_first() {
    use memplan_ir::{AttrValue, TensorData};
    memplan_exec::install_const_folder();
    for (fill, per_row) in [(1i64, 2i64), (0, 0)] {
        let mut g = Graph::default();
        let x = g.add_input(
            "x",
            DeclType::tensor(
                DataType::F32,
                vec![DeclDim::Param("N".into()), DeclDim::Value(2)],
            ),
        );
        let s = g.add_node("s", "Shape", &[Some(x)], &["s"], vec![]).1[0];
        let fill_t = TensorData::from_i64("fill", vec![1], &[fill]);
        let c = g
            .add_node(
                "c",
                "ConstantOfShape",
                &[Some(s)],
                &["c"],
                vec![attr("value", AttrValue::Tensor(fill_t))],
            )
            .1[0];
        let f = g
            .add_node(
                "f",
                "Cast",
                &[Some(c)],
                &["f"],
                vec![attr("to", AttrValue::Int(1))],
            )
            .1[0];
        let nz = g.add_node("nz", "NonZero", &[Some(f)], &["nz"], vec![]).1[0];
        g.outputs.push(nz);
        let facts = memplan_ir::infer_graph(&g, 18).unwrap();
        assert!(
            facts.symbols.introduced.is_empty(),
            "{:?}",
            facts.symbols.introduced
        );
        for n in [3usize, 8] {
            let t = Tensor::from_vec::<f32>(&[n, 2], &vec![0.5; 2 * n], None).unwrap();
            let r = run(
                &g,
                &facts,
                BTreeMap::from([("x".to_string(), t)]),
                &RunOptions::default(),
            )
            .unwrap();
            assert_eq!(r.outputs[0].1.shape, vec![2, n * per_row as usize]);
            let tl = memplan_sim::Timeline::build(&g, &facts, &facts.order).unwrap();
            let dims = BTreeMap::from([("N".to_string(), n as i64)]);
            let est = memplan_sim::peak::concrete_peak(&tl, &dims).unwrap();
            assert_eq!(est.peak_bytes, r.peak_bytes, "fill {fill}, N={n}");
        }
    }
}
