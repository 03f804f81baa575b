//! Sizes made from the data (`NonZero`): inference gives them fresh symbols, a run binds each to
//! the size it made (`RunResult::dims`), and the estimate at those dims equals the measured peak.

use std::collections::BTreeMap;

use memplan_exec::{run, RunOptions, Tensor};
use memplan_ir::graph::{DeclDim, DeclType, Graph};
use memplan_ir::DataType;

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
        let x = Tensor::from_vec::<f32>(&[n], &v, None).unwrap();
        let r = run(
            &g,
            &facts,
            BTreeMap::from([("x".to_string(), x)]),
            &RunOptions::default(),
        )
        .unwrap();
        let count = v.iter().filter(|&&e| e != 0.0).count();
        assert_eq!(r.dims.get(&sym), Some(&(count as i64)), "{:?}", r.dims);
        let t = memplan_sim::Timeline::build(&g, &facts, &facts.order).unwrap();
        let est = memplan_sim::peak::concrete_peak(&t, &r.dims).unwrap();
        assert_eq!(est.peak_bytes, r.peak_bytes);
    }
}
