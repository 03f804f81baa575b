//! Random ONNX models for robustness checks: the one generator shared by the bounded property test in
//! `cargo test` and the `cargo fuzz` target (`fuzz/fuzz_targets/import.rs`).
//!
//! [`random_model`] builds structurally plausible but often wrong `ModelProto`s (dangling and duplicate
//! names, cycles, wrong attribute kinds, bad dims, odd types, subgraphs); [`mutate`] corrupts encoded
//! bytes (bit flips, truncation, splices). [`check_bytes`] runs import and inference on bytes and
//! reports whether an error (never a panic) was one line.

use bytes::Bytes;
use prost::Message;

use crate::proto::{
    attribute_proto::AttributeType, tensor_shape_proto, type_proto, AttributeProto, GraphProto,
    ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};

/// A small deterministic PRNG (splitmix64), so the generator needs no dependency and cases replay.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// Op types the generator picks from: every op in the op table (so a new op is fuzzed as soon as it
/// has an `OpDef`), plus one that does not exist.
fn ops() -> &'static [&'static str] {
    static OPS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    OPS.get_or_init(|| {
        memplan_ir::ops::FAMILIES
            .iter()
            .flat_map(|(_, defs)| defs.iter().map(|d| d.op))
            .chain(["NoSuchOp"])
            .collect()
    })
}

const ATTRS: &[&str] = &[
    "axis",
    "mode",
    "seed",
    "dtype",
    "direction",
    "hidden_size",
    "blocksize",
    "group",
    "strides",
    "dilations",
    "reduction",
    "sample_size",
    "block_size",
    "axes",
    "perm",
    "equation",
    "to",
    "keepdims",
    "value",
    "then_branch",
    "body",
    "split",
    "kernel_shape",
    "pads",
];

fn random_type(rng: &mut Rng) -> TypeProto {
    let dims = (0..rng.below(5))
        .map(|i| tensor_shape_proto::Dimension {
            denotation: None,
            value: match rng.below(4) {
                0 => Some(tensor_shape_proto::dimension::Value::DimParam(
                    ["N", "M", "B", ""][rng.below(4)].to_string(),
                )),
                1 => None,
                2 => Some(tensor_shape_proto::dimension::Value::DimValue(
                    rng.below(6) as i64 - 1,
                )),
                _ => Some(tensor_shape_proto::dimension::Value::DimValue(1 << (i + 1))),
            },
        })
        .collect();
    TypeProto {
        denotation: None,
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(*rng.pick(&[1, 1, 1, 7, 9, 10, 16, 0, 8, 99])),
            shape: (!rng.chance(10)).then_some(TensorShapeProto { dim: dims }),
        })),
    }
}

fn random_tensor(rng: &mut Rng, name: String) -> TensorProto {
    let dims: Vec<i64> = (0..rng.below(3)).map(|_| rng.below(4) as i64).collect();
    let n: i64 = dims.iter().product();
    let dt = *rng.pick(&[1, 7, 7, 9, 8, 0]);
    let mut t = TensorProto {
        name: Some(name),
        dims,
        data_type: Some(dt),
        ..Default::default()
    };
    let wrong = rng.chance(15) as i64;
    match dt {
        7 => t.int64_data = (0..n + wrong).map(|_| rng.below(9) as i64 - 3).collect(),
        8 => t.string_data = (0..n).map(|_| Bytes::from_static(b"s")).collect(),
        _ => t.raw_data = Some(Bytes::from(vec![0u8; ((n + wrong) * 4).max(0) as usize])),
    }
    t
}

fn random_attr(rng: &mut Rng, depth: u32, names: &[String]) -> AttributeProto {
    let name = rng.pick(ATTRS).to_string();
    let mut a = AttributeProto {
        name: Some(name),
        ..Default::default()
    };
    let ty = rng.below(7);
    match ty {
        0 => {
            a.i = Some(rng.below(7) as i64 - 3);
            a.r#type = Some(AttributeType::Int as i32);
        }
        1 => {
            a.ints = (0..rng.below(4)).map(|_| rng.below(7) as i64 - 3).collect();
            a.r#type = Some(AttributeType::Ints as i32);
        }
        2 => {
            const EQS: [&[u8]; 4] = [b"ij,jk->ik", b"...i->i", b"bad", b""];
            let eq: &'static [u8] = EQS[rng.below(EQS.len())];
            a.s = Some(Bytes::from_static(eq));
            a.r#type = Some(AttributeType::String as i32);
        }
        3 => {
            a.f = Some(1.5);
            a.r#type = Some(AttributeType::Float as i32);
        }
        4 => {
            a.t = Some(random_tensor(rng, String::new()));
            a.r#type = Some(AttributeType::Tensor as i32);
        }
        5 if depth < 2 => {
            a.g = Some(random_graph(rng, depth + 1, names));
            a.r#type = Some(AttributeType::Graph as i32);
        }
        _ => {
            // A type tag that disagrees with the field set.
            a.i = Some(2);
            a.r#type = Some(rng.below(16) as i32);
        }
    }
    a
}

fn random_graph(rng: &mut Rng, depth: u32, outer: &[String]) -> GraphProto {
    let mut names: Vec<String> = outer.to_vec();
    let mut g = GraphProto {
        name: Some(format!("g{depth}")),
        ..Default::default()
    };
    for i in 0..1 + rng.below(3) {
        let name = format!("in{depth}_{i}");
        g.input.push(ValueInfoProto {
            name: Some(name.clone()),
            r#type: Some(random_type(rng)),
            ..Default::default()
        });
        names.push(name);
    }
    for i in 0..rng.below(3) {
        let name = format!("w{depth}_{i}");
        g.initializer.push(random_tensor(rng, name.clone()));
        names.push(name);
    }
    let n_nodes = rng.below(if depth == 0 { 12 } else { 4 });
    for i in 0..n_nodes {
        let inputs = (0..rng.below(4))
            .map(|_| match rng.below(10) {
                0 => String::new(),
                1 => format!("dangling{}", rng.below(3)),
                // A value produced later (or by this very node): an out-of-order file or a cycle.
                2 => format!("v{depth}_{}", rng.below(n_nodes.max(1))),
                _ => rng.pick(&names).clone(),
            })
            .collect();
        let out = if rng.chance(5) && !names.is_empty() {
            rng.pick(&names).clone()
        } else {
            format!("v{depth}_{i}")
        };
        let node = NodeProto {
            input: inputs,
            output: vec![out.clone()],
            name: Some(format!("n{depth}_{i}")),
            op_type: Some(rng.pick(ops()).to_string()),
            domain: rng.chance(5).then(|| "com.example".to_string()),
            attribute: (0..rng.below(3))
                .map(|_| random_attr(rng, depth, &names))
                .collect(),
            ..Default::default()
        };
        g.node.push(node);
        names.push(out);
    }
    for _ in 0..1 + rng.below(2) {
        let name = rng.pick(&names).clone();
        g.output.push(ValueInfoProto {
            name: Some(name),
            r#type: rng.chance(50).then(|| random_type(rng)),
            ..Default::default()
        });
    }
    g
}

/// A random model (see the module documentation).
pub fn random_model(rng: &mut Rng) -> ModelProto {
    ModelProto {
        ir_version: Some(rng.below(12) as i64),
        opset_import: vec![OperatorSetIdProto {
            domain: None,
            version: Some(*rng.pick(&[1, 7, 13, 18, 23, 99])),
        }],
        graph: Some(random_graph(rng, 0, &[])),
        ..Default::default()
    }
}

/// Corrupts encoded bytes in place: flips, truncation, duplication of a range.
pub fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(4) {
        if bytes.is_empty() {
            return;
        }
        match rng.below(3) {
            0 => {
                let i = rng.below(bytes.len());
                bytes[i] ^= 1 << rng.below(8);
            }
            1 => {
                let n = rng.below(bytes.len());
                bytes.truncate(n);
            }
            _ => {
                let a = rng.below(bytes.len());
                let b = (a + rng.below(16)).min(bytes.len());
                let chunk = bytes[a..b].to_vec();
                let at = rng.below(bytes.len());
                bytes.splice(at..at, chunk);
            }
        }
    }
}

/// Integer attribute values that break rules: out-of-range axes and sizes, zero, extremes.
const BAD_INTS: [i64; 10] = [-100, -2, -1, 0, 1, 2, 7, 1 << 40, i64::MIN, i64::MAX];
/// Float attribute values that break rules.
const BAD_FLOATS: [f32; 5] = [f32::NAN, f32::INFINITY, -1.0, 0.0, 1e30];

/// Applies one to three structural mutations to a valid model (the bad input a user's file can
/// hold): an attribute set out of range, dropped, retyped or added; a node input dropped, added,
/// emptied or left dangling; an output dropped; the op type swapped; an initializer's integers out of
/// range or its dims wrong; a graph input's declared dim or type changed; and the same inside
/// subgraphs (a `Loop` or `If` body that no longer type-checks).
pub fn mutate_model(rng: &mut Rng, model: &mut ModelProto) {
    let Some(g) = model.graph.as_mut() else {
        return;
    };
    for _ in 0..1 + rng.below(3) {
        mutate_graph(rng, g, 0);
    }
}

fn mutate_graph(rng: &mut Rng, g: &mut GraphProto, depth: u32) {
    let names: Vec<String> = g
        .input
        .iter()
        .filter_map(|v| v.name.clone())
        .chain(g.node.iter().flat_map(|n| n.output.iter().cloned()))
        .collect();
    match rng.below(6) {
        0..=2 if !g.node.is_empty() => {
            let i = rng.below(g.node.len());
            mutate_node(rng, &mut g.node[i], &names, depth);
        }
        3 if !g.initializer.is_empty() => {
            let i = rng.below(g.initializer.len());
            mutate_tensor(rng, &mut g.initializer[i]);
        }
        4 if !g.input.is_empty() => {
            let i = rng.below(g.input.len());
            mutate_value_info(rng, &mut g.input[i]);
        }
        _ if !g.output.is_empty() => {
            let i = rng.below(g.output.len());
            if rng.chance(50) {
                mutate_value_info(rng, &mut g.output[i]);
            } else {
                g.output.remove(i);
            }
        }
        _ => {}
    }
}

fn mutate_node(rng: &mut Rng, n: &mut NodeProto, names: &[String], depth: u32) {
    match rng.below(8) {
        0..=2 if !n.attribute.is_empty() => {
            let i = rng.below(n.attribute.len());
            mutate_attr(rng, &mut n.attribute[i], names, depth);
        }
        3 if !n.attribute.is_empty() => {
            let i = rng.below(n.attribute.len());
            n.attribute.remove(i);
        }
        4 => match rng.below(4) {
            0 => {
                n.input.pop();
            }
            1 if !names.is_empty() => n.input.push(rng.pick(names).clone()),
            2 if !n.input.is_empty() => {
                let i = rng.below(n.input.len());
                n.input[i] = if rng.chance(50) {
                    String::new()
                } else {
                    "dangling".to_string()
                };
            }
            _ => {
                n.output.pop();
            }
        },
        5 => n.op_type = Some(rng.pick(ops()).to_string()),
        _ => n.attribute.push(random_attr(rng, depth, names)),
    }
}

fn mutate_attr(rng: &mut Rng, a: &mut AttributeProto, names: &[String], depth: u32) {
    let pick_int = |rng: &mut Rng| BAD_INTS[rng.below(BAD_INTS.len())];
    if let Some(g) = a.g.as_mut() {
        if depth < 2 {
            mutate_graph(rng, g, depth + 1);
            return;
        }
    }
    if a.i.is_some() {
        a.i = Some(pick_int(rng));
    } else if !a.ints.is_empty() {
        match rng.below(3) {
            0 => {
                let i = rng.below(a.ints.len());
                a.ints[i] = pick_int(rng);
            }
            1 => {
                a.ints.pop();
            }
            _ => a.ints.push(pick_int(rng)),
        }
    } else if a.f.is_some() {
        a.f = Some(BAD_FLOATS[rng.below(BAD_FLOATS.len())]);
    } else if !a.floats.is_empty() {
        a.floats.pop();
    } else if a.s.is_some() {
        a.s = Some(Bytes::from_static(b"bogus"));
    } else if let Some(t) = a.t.as_mut() {
        mutate_tensor(rng, t);
    } else {
        *a = random_attr(rng, depth, names);
    }
}

fn mutate_tensor(rng: &mut Rng, t: &mut TensorProto) {
    let bad = BAD_INTS[rng.below(BAD_INTS.len())];
    match rng.below(3) {
        0 if !t.int64_data.is_empty() => {
            let i = rng.below(t.int64_data.len());
            t.int64_data[i] = bad;
        }
        0 if t.data_type == Some(7) => {
            if let Some(raw) = t.raw_data.as_mut() {
                if raw.len() >= 8 {
                    let mut v = raw.to_vec();
                    let i = rng.below(v.len() / 8) * 8;
                    v[i..i + 8].copy_from_slice(&bad.to_le_bytes());
                    *raw = Bytes::from(v);
                }
            }
        }
        1 if !t.dims.is_empty() => {
            let i = rng.below(t.dims.len());
            t.dims[i] = bad.clamp(-2, 1 << 20);
        }
        _ => t.dims.push(2),
    }
}

fn mutate_value_info(rng: &mut Rng, v: &mut ValueInfoProto) {
    let Some(type_proto::Value::TensorType(tt)) = v.r#type.as_mut().and_then(|t| t.value.as_mut())
    else {
        v.r#type = Some(random_type(rng));
        return;
    };
    if rng.chance(30) {
        tt.elem_type = Some(*rng.pick(&[1, 6, 7, 9, 10, 16, 0, 99]));
        return;
    }
    let Some(shape) = tt.shape.as_mut() else {
        return;
    };
    if shape.dim.is_empty() || rng.chance(20) {
        shape.dim.push(tensor_shape_proto::Dimension {
            denotation: None,
            value: Some(tensor_shape_proto::dimension::Value::DimValue(3)),
        });
        return;
    }
    let i = rng.below(shape.dim.len());
    shape.dim[i].value = Some(tensor_shape_proto::dimension::Value::DimValue(
        *rng.pick(&[0, 1, 3, -1, 1 << 20]),
    ));
}

/// Imports and infers `bytes`; `Err` carries the error message, which must be one line.
pub fn check_bytes(bytes: &[u8]) -> Result<(), String> {
    let model = crate::import::import_bytes(
        Bytes::copy_from_slice(bytes),
        std::path::Path::new("<fuzz>"),
    )
    .map_err(|e| e.to_string())?;
    memplan_ir::infer_model(&model).map_err(|e| e.to_string())?;
    Ok(())
}

/// Encodes a random model, mutated half of the time.
pub fn random_bytes(rng: &mut Rng) -> Vec<u8> {
    let mut bytes = random_model(rng).encode_to_vec();
    if rng.chance(50) {
        mutate(rng, &mut bytes);
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cases that once broke the one-line rule (a newline inside a value name), whatever the
    /// number of cases the test below runs.
    #[test]
    fn names_with_control_characters_stay_on_one_line() {
        for n in [105_820u64, 125_991] {
            let bytes = random_bytes(&mut Rng::new(n));
            let msg = check_bytes(&bytes).expect_err("the case is invalid");
            assert!(!msg.is_empty() && !msg.contains('\n'), "case {n}: {msg:?}");
        }
    }

    /// A fixed number of cases (50,000, about a second; `MEMPLAN_FUZZ_CASES` for more or fewer),
    /// so the same cases run on every machine: import and inference never panic, and every error
    /// is one non-empty line.
    #[test]
    fn random_models_never_panic_and_errors_are_one_line() {
        let cases: u64 = std::env::var("MEMPLAN_FUZZ_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(50_000);
        let (mut ok, mut err) = (0usize, 0usize);
        for n in 0..cases {
            let mut rng = Rng::new(n);
            let bytes = random_bytes(&mut rng);
            let r = std::panic::catch_unwind(|| check_bytes(&bytes));
            match r {
                Err(_) => panic!("case {n} panicked (replay with Rng::new({n}))"),
                Ok(Ok(())) => ok += 1,
                Ok(Err(msg)) => {
                    assert!(!msg.is_empty() && !msg.contains('\n'), "case {n}: {msg:?}");
                    err += 1;
                }
            }
        }
        eprintln!("{cases} random models: {ok} imported and inferred, {err} rejected");
        assert!(
            ok > 0 && err > 0,
            "the generator must produce both valid and invalid models"
        );
    }

    #[test]
    fn corrupted_corpus_model_never_panics() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/corpus/models/of3_tri_mul_out.legacy.onnx");
        let Ok(orig) = std::fs::read(&path) else {
            return;
        };
        assert!(check_bytes(&orig).is_ok());
        for seed in 0..300 {
            let mut rng = Rng::new(seed);
            let mut bytes = orig.clone();
            mutate(&mut rng, &mut bytes);
            let r = std::panic::catch_unwind(|| check_bytes(&bytes));
            match r {
                Err(_) => panic!("mutation seed {seed} panicked"),
                Ok(Err(msg)) => assert!(!msg.contains('\n'), "seed {seed}: {msg}"),
                Ok(Ok(())) => {}
            }
        }
    }
}
