//! Ops of positions (`Trilu`, `EyeLike`) inside chunked regions: chunking writes them as
//! comparisons of row and column index constants (`plan::chunk::positions`), so a region grows
//! through them along rows or columns. Each chunked graph runs to the same bits as the original,
//! plain and from its plan, with the measured peak the planned one, whatever the diagonal offset
//! (below, on and beyond either edge) and with NaN, infinities and -0 among the kept and the
//! zeroed elements. A weight that is a constant of positions (a causal mask kept as a buffer, a
//! local-attention window, an additive 0/-inf mask) is made from index constants the same way,
//! and where only slices of it are read, only the slices are made.

use std::collections::BTreeMap;

use memplan_exec::{run, RunOptions, Tensor};
use memplan_ir::graph::{AttrValue, Attribute, DeclDim, DeclType, Graph, Model};
use memplan_ir::{DataType, TensorData};
use memplan_plan::chunk::{chunk_to_budget, ChunkOptions};

use super::same_bits::runs_to_the_bits_of;

fn int_attr(name: &str, v: i64) -> Attribute {
    Attribute {
        name: name.into(),
        value: AttrValue::Int(v),
        doc: String::new(),
    }
}

/// `x [B, S, S]` (`[S, S]` when `batch` is false).
fn input_x(g: &mut Graph, batch: bool) -> memplan_ir::ValueId {
    let s = || DeclDim::Param("S".into());
    let dims = if batch {
        vec![DeclDim::Param("B".into()), s(), s()]
    } else {
        vec![s(), s()]
    };
    g.add_input("x", DeclType::tensor(DataType::F32, dims))
}

/// `y = Softmax(Trilu(x, k)) * x`: the mask's rows are the softmax's rows. (With a batch of 1: the
/// rows are then the outermost axis that varies, so chunks of them are assembled in place.)
fn trilu_model(upper: bool, k: Option<i64>, batch: bool) -> Model {
    let mut g = Graph::default();
    let x = input_x(&mut g, batch);
    let k = k.map(|k| g.add_initializer(TensorData::from_i64("k", vec![], &[k])));
    let (_, t) = g.add_node(
        "tri",
        "Trilu",
        &[Some(x), k],
        &["t"],
        vec![int_attr("upper", upper as i64)],
    );
    let (_, s) = g.add_node(
        "soft",
        "Softmax",
        &[Some(t[0])],
        &["s"],
        vec![int_attr("axis", -1)],
    );
    let (_, y) = g.add_node("mul", "Mul", &[Some(s[0]), Some(x)], &["y"], vec![]);
    g.outputs.push(y[0]);
    Model {
        graph: g,
        ..Model::default()
    }
}

/// `y = Softmax(EyeLike(x, k) + x)`.
fn eye_model(k: i64) -> Model {
    let mut g = Graph::default();
    let x = input_x(&mut g, false);
    let (_, e) = g.add_node("eye", "EyeLike", &[Some(x)], &["e"], vec![int_attr("k", k)]);
    let (_, a) = g.add_node("add", "Add", &[Some(e[0]), Some(x)], &["a"], vec![]);
    let (_, y) = g.add_node(
        "soft",
        "Softmax",
        &[Some(a[0])],
        &["y"],
        vec![int_attr("axis", -1)],
    );
    g.outputs.push(y[0]);
    Model {
        graph: g,
        ..Model::default()
    }
}

fn input(shape: &[usize]) -> BTreeMap<String, Tensor> {
    let n: usize = shape.iter().product();
    let mut v: Vec<f32> = (0..n)
        .map(|i| ((i * 31 % 113) as f32) / 40.0 - 1.4)
        .collect();
    // Specials on and off the diagonals: kept as they are, or zeroed.
    for (i, s) in [f32::NAN, f32::INFINITY, -0.0, f32::NEG_INFINITY]
        .iter()
        .enumerate()
    {
        v[i * 7 + 1] = *s;
        v[n - 1 - i * 5] = *s;
    }
    BTreeMap::from([("x".to_string(), Tensor::from_vec(shape, &v, None).unwrap())])
}

/// Chunks `model` as low as it goes, 4 chunks a region: no op of positions is left, a region
/// was cut along an axis of extent `s`, and the chunked graph runs plain and from its plan to the
/// original's bits, measured = planned.
fn check(model: &Model, dims: &[(&str, i64)], shape: &[usize], s: i64) {
    let dims: BTreeMap<String, i64> = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let facts = memplan_ir::infer_model_for(model, &dims).unwrap();
    let want = run(&model.graph, &facts, input(shape), &RunOptions::default()).unwrap();
    let opts = ChunkOptions {
        chunk_counts: vec![4],
        ..ChunkOptions::default()
    };
    let c = chunk_to_budget(model, &dims, &opts).unwrap();
    let ops: Vec<&str> = c.model.graph.nodes.iter().map(|n| n.op.as_str()).collect();
    assert!(
        !ops.iter().any(|o| matches!(*o, "Trilu" | "EyeLike")),
        "{ops:?} {:?} {} -> {}",
        c.steps
            .iter()
            .map(|st| (st.nodes, st.extent))
            .collect::<Vec<_>>(),
        c.peak_before,
        c.peak_after
    );
    assert!(
        c.steps.iter().any(|st| st.extent == s),
        "no region along an axis of {s}: {:?}",
        c.steps
            .iter()
            .map(|st| (st.nodes, st.extent))
            .collect::<Vec<_>>()
    );
    assert!(
        c.peak_after < c.peak_before,
        "{} -> {}",
        c.peak_before,
        c.peak_after
    );
    let want = want.outputs[0].1.bytes();
    runs_to_the_bits_of(&c.model, &dims, || input(shape), want, "");
}

#[test]
fn trilu_chunks_along_its_rows_with_the_bits_of_the_whole() {
    let s = 24;
    for upper in [true, false] {
        for k in [None, Some(0), Some(2), Some(-3), Some(s + 5), Some(-s - 5)] {
            check(
                &trilu_model(upper, k, false),
                &[("S", s)],
                &[s as usize, s as usize],
                s,
            );
            check(
                &trilu_model(upper, k, true),
                &[("B", 1), ("S", s)],
                &[1, s as usize, s as usize],
                s,
            );
        }
    }
}

#[test]
fn eyelike_chunks_along_its_rows_with_the_bits_of_the_whole() {
    let s = 20;
    for k in [0, 3, -2, s + 1] {
        check(&eye_model(k), &[("S", s)], &[s as usize, s as usize], s);
    }
}

/// A band of diagonals `lo <= j - i <= hi` of an `[m, m]` tensor, `inside` there and `outside`
/// elsewhere, as little-endian bytes of `[1, 1, m, m]`.
fn band_bytes(m: usize, lo: i64, hi: i64, inside: &[u8], outside: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    for i in 0..m as i64 {
        for j in 0..m as i64 {
            b.extend_from_slice(if (lo..=hi).contains(&(j - i)) {
                inside
            } else {
                outside
            });
        }
    }
    b
}

/// `y = Softmax(masked)` of `x [S, S]`, the mask a weight `[1, 1, m, m]`: a `bool` mask applied
/// by `Where(mask, x, -1e9)`, read through `Slice(mask, 0, Shape(x), [2, 3])` (as GPT-Neo's
/// exports read their `attention.bias`) when `sliced` (then m > S), or an additive float mask
/// (`x + mask`, m = S).
fn weight_mask_model(mask: TensorData, sliced: bool) -> Model {
    let mut g = Graph::default();
    let x = input_x(&mut g, false);
    let m = g.add_initializer(mask.clone());
    let masked = if mask.dtype == DataType::Bool {
        let mut read = m;
        if sliced {
            let (_, shape) = g.add_node("shape", "Shape", &[Some(x)], &["sx"], vec![]);
            let starts = g.add_initializer(TensorData::from_i64("starts", vec![2], &[0, 0]));
            let axes = g.add_initializer(TensorData::from_i64("axes", vec![2], &[2, 3]));
            let (_, sl) = g.add_node(
                "slice",
                "Slice",
                &[Some(m), Some(starts), Some(shape[0]), Some(axes)],
                &["mask_s"],
                vec![],
            );
            read = sl[0];
        }
        let low = g.add_initializer(TensorData::from_f32("low", vec![], &[-1e9]));
        let (_, w) = g.add_node(
            "where",
            "Where",
            &[Some(read), Some(x), Some(low)],
            &["w"],
            vec![],
        );
        w[0]
    } else {
        let (_, a) = g.add_node("add", "Add", &[Some(x), Some(m)], &["w"], vec![]);
        a[0]
    };
    let (_, y) = g.add_node(
        "soft",
        "Softmax",
        &[Some(masked)],
        &["y"],
        vec![int_attr("axis", -1)],
    );
    g.outputs.push(y[0]);
    Model {
        graph: g,
        ..Model::default()
    }
}

#[test]
fn weights_of_positions_are_made_from_index_constants_with_the_same_bits() {
    let s = 24usize;
    let (t, f) = (&[1u8][..], &[0u8][..]);
    let inf = f32::NEG_INFINITY.to_le_bytes();
    let zero = 0f32.to_le_bytes();
    let big = 4 * 1024;
    // (mask, read through a slice): a causal mask (tril) larger than S, sliced; a local window
    // (a band of 3 diagonals) and its complement (true outside: the `Not` path), sliced; an
    // upper mask (j - i >= 2); an additive float causal mask of 0 and -inf, whole.
    let cases: Vec<(&str, Vec<u8>, DataType, usize, bool)> = vec![
        (
            "tril",
            band_bytes(s + 8, -big, 0, t, f),
            DataType::Bool,
            s + 8,
            true,
        ),
        (
            "window",
            band_bytes(s + 8, -2, 0, t, f),
            DataType::Bool,
            s + 8,
            true,
        ),
        (
            "outside",
            band_bytes(s + 8, -2, 0, f, t),
            DataType::Bool,
            s + 8,
            true,
        ),
        (
            "upper",
            band_bytes(s, 2, big, t, f),
            DataType::Bool,
            s,
            false,
        ),
        (
            "additive",
            band_bytes(s, -big, 0, &zero, &inf),
            DataType::F32,
            s,
            false,
        ),
    ];
    for (name, bytes, dtype, m, sliced) in cases {
        let mask = TensorData::from_raw(
            "mask",
            dtype,
            vec![1, 1, m as u64, m as u64],
            bytes::Bytes::from(bytes),
        )
        .unwrap();
        let model = weight_mask_model(mask, sliced);
        let dims: BTreeMap<String, i64> = BTreeMap::from([("S".to_string(), s as i64)]);
        let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
        let want = run(&model.graph, &facts, input(&[s, s]), &RunOptions::default()).unwrap();
        let opts = ChunkOptions {
            chunk_counts: vec![4],
            ..ChunkOptions::default()
        };
        let c = chunk_to_budget(&model, &dims, &opts).unwrap();
        let g = &c.model.graph;
        // The weight is gone; sliced, neither it nor a slice of it is made whole.
        assert!(
            !g.initializers.iter().any(|&v| g.value(v).name == "mask"),
            "{name}: the mask is still a weight"
        );
        if sliced {
            assert!(
                g.find_value("mask").is_none() && !g.nodes.iter().any(|n| n.name == "slice"),
                "{name}: the whole mask or its slice node is left"
            );
        }
        assert!(
            c.steps.iter().any(|st| st.extent == s as i64),
            "{name}: no region along S: {:?}",
            c.steps
                .iter()
                .map(|st| (st.nodes, st.extent))
                .collect::<Vec<_>>()
        );
        let want = want.outputs[0].1.bytes();
        runs_to_the_bits_of(&c.model, &dims, || input(&[s, s]), want, name);
    }
}

/// A large mask weight and small activations: making the mask from positions alone meets the
/// budget, with no chunk step. The result keeps no initializer that nothing reads (the shape
/// values frozen for the slice that is gone) and runs to the original's bits.
#[test]
fn a_weight_of_positions_alone_can_meet_the_budget() {
    let (s, m) = (8usize, 200usize);
    let mask = TensorData::from_raw(
        "mask",
        DataType::Bool,
        vec![1, 1, m as u64, m as u64],
        bytes::Bytes::from(band_bytes(m, -(m as i64), 0, &[1], &[0])),
    )
    .unwrap();
    let model = weight_mask_model(mask, true);
    let dims: BTreeMap<String, i64> = BTreeMap::from([("S".to_string(), s as i64)]);
    let facts = memplan_ir::infer_model_for(&model, &dims).unwrap();
    let want = run(&model.graph, &facts, input(&[s, s]), &RunOptions::default()).unwrap();
    let opts = ChunkOptions {
        budget: Some(8 << 10),
        ..ChunkOptions::default()
    };
    let c = chunk_to_budget(&model, &dims, &opts).unwrap();
    assert!(c.steps.is_empty(), "{} steps", c.steps.len());
    assert!(
        c.peak_before > 40_000 && c.peak_after <= 8 << 10,
        "{} -> {}",
        c.peak_before,
        c.peak_after
    );
    let g = &c.model.graph;
    assert!(g.find_value("mask").is_none());
    let read: std::collections::BTreeSet<_> = g
        .nodes
        .iter()
        .flat_map(|n| n.input_ids())
        .chain(g.outputs.iter().copied())
        .collect();
    let unread: Vec<&str> = g
        .initializers
        .iter()
        .filter(|v| !read.contains(v))
        .map(|&v| g.value(v).name.as_str())
        .collect();
    assert!(unread.is_empty(), "unread: {unread:?}");
    let f = memplan_ir::infer_model_for(&c.model, &dims).unwrap();
    let got = run(g, &f, input(&[s, s]), &RunOptions::default()).unwrap();
    assert_eq!(got.outputs[0].1.bytes(), want.outputs[0].1.bytes());
}
