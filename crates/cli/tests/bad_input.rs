//! The CLI on bad input: one line on stderr naming the file, node or tensor and the rule broken, a
//! non-zero exit, no panic, and no output file left behind.

use std::path::PathBuf;
use std::process::{Command, Output};

use memplan_onnx::proto::{
    attribute_proto::AttributeType, tensor_proto::DataLocation, tensor_shape_proto, type_proto,
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto,
    TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use memplan_onnx::{save_model_proto, ExternalData};

fn memplan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(args)
        .output()
        .unwrap()
}

struct Tmp(PathBuf);
impl Tmp {
    fn new(tag: &str) -> Tmp {
        let p = std::env::temp_dir().join(format!("memplan-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Tmp(p)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tensor_type(elem: i32, dims: &[&str]) -> TypeProto {
    TypeProto {
        denotation: None,
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(elem),
            shape: Some(TensorShapeProto {
                dim: dims
                    .iter()
                    .map(|d| tensor_shape_proto::Dimension {
                        denotation: None,
                        value: Some(match d.parse::<i64>() {
                            Ok(v) => tensor_shape_proto::dimension::Value::DimValue(v),
                            Err(_) => tensor_shape_proto::dimension::Value::DimParam(d.to_string()),
                        }),
                    })
                    .collect(),
            }),
        })),
    }
}

fn vi(name: &str, dims: &[&str]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(tensor_type(1, dims)),
        ..Default::default()
    }
}

fn node(name: &str, op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        name: Some(name.into()),
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn model(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
) -> ModelProto {
    ModelProto {
        ir_version: Some(10),
        opset_import: vec![OperatorSetIdProto {
            domain: None,
            version: Some(18),
        }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: nodes,
            input: inputs,
            output: outputs,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn write(dir: &Tmp, name: &str, m: &ModelProto) -> PathBuf {
    let p = dir.path(name);
    save_model_proto(m, &p, ExternalData::Inline).unwrap();
    p
}

/// Runs `args`, expects failure with exactly one stderr line containing every `needles` entry.
fn fails_with(args: &[&str], needles: &[&str]) {
    let out = memplan(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded; stderr: {err}");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{args:?}: exit code (a panic exits 101); stderr: {err}"
    );
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{args:?}: not one line: {err}"
    );
    for n in needles {
        assert!(err.contains(n), "{args:?}: '{n}' not in: {err}");
    }
}

#[test]
fn unreadable_and_non_protobuf_files() {
    let d = Tmp::new("garbage");
    fails_with(
        &["inspect", "/nonexistent/m.onnx"],
        &["/nonexistent/m.onnx", "cannot open"],
    );
    let g = d.path("text.onnx");
    std::fs::write(&g, b"definitely not protobuf\n").unwrap();
    fails_with(
        &["inspect", g.to_str().unwrap()],
        &["text.onnx", "not an ONNX model"],
    );
    let good = model(
        vec![node("r", "Relu", &["x"], &["y"])],
        vec![vi("x", &["N"])],
        vec![vi("y", &["N"])],
    );
    let p = write(&d, "good.onnx", &good);
    let bytes = std::fs::read(&p).unwrap();
    let t = d.path("trunc.onnx");
    std::fs::write(&t, &bytes[..bytes.len() - 7]).unwrap();
    fails_with(
        &["inspect", t.to_str().unwrap()],
        &["trunc.onnx", "not an ONNX model"],
    );
}

#[test]
fn structural_errors_name_the_node_or_value() {
    let d = Tmp::new("struct");
    let cyc = model(
        vec![
            node("a", "Relu", &["b_out"], &["a_out"]),
            node("b", "Neg", &["a_out"], &["b_out"]),
        ],
        vec![vi("x", &["N"])],
        vec![vi("b_out", &["N"])],
    );
    let p = write(&d, "cycle.onnx", &cyc);
    fails_with(&["inspect", p.to_str().unwrap()], &["cycle", "'a' (Relu)"]);

    let dangling = model(
        vec![node("a", "Add", &["x", "nowhere"], &["y"])],
        vec![vi("x", &["N"])],
        vec![vi("y", &["N"])],
    );
    let p = write(&d, "dangling.onnx", &dangling);
    fails_with(
        &["inspect", p.to_str().unwrap()],
        &["node 'a' (Add)", "input 'nowhere' is not defined"],
    );

    let twice = model(
        vec![
            node("a", "Relu", &["x"], &["y"]),
            node("b", "Neg", &["x"], &["y"]),
        ],
        vec![vi("x", &["N"])],
        vec![vi("y", &["N"])],
    );
    let p = write(&d, "twice.onnx", &twice);
    fails_with(
        &["inspect", p.to_str().unwrap()],
        &["node 'b' (Neg)", "output 'y' is already defined"],
    );
}

#[test]
fn attribute_and_shape_errors_name_the_node() {
    let d = Tmp::new("attrs");
    let mut t = node("t", "Transpose", &["x"], &["y"]);
    t.attribute.push(AttributeProto {
        name: Some("perm".into()),
        r#type: Some(AttributeType::Float as i32),
        f: Some(1.0),
        ..Default::default()
    });
    let m = model(
        vec![t],
        vec![vi("x", &["N", "3"])],
        vec![vi("y", &["3", "N"])],
    );
    let p = write(&d, "attr.onnx", &m);
    fails_with(
        &["inspect", p.to_str().unwrap()],
        &["'t' (Transpose)", "'perm'", "INTS", "FLOAT"],
    );

    let mm = model(
        vec![node("mm", "MatMul", &["a", "b"], &["y"])],
        vec![vi("a", &["N", "3"]), vi("b", &["4", "N"])],
        vec![vi("y", &["N", "N"])],
    );
    let p = write(&d, "contra.onnx", &mm);
    fails_with(
        &["inspect", p.to_str().unwrap()],
        &["'mm' (MatMul)", "3", "4"],
    );
}

#[test]
fn missing_external_data_names_the_tensor() {
    let d = Tmp::new("ext");
    let mut m = model(
        vec![node("a", "Add", &["x", "w"], &["y"])],
        vec![vi("x", &["4"])],
        vec![vi("y", &["4"])],
    );
    m.graph.as_mut().unwrap().initializer.push(TensorProto {
        name: Some("w".into()),
        data_type: Some(1),
        dims: vec![4],
        data_location: Some(DataLocation::External as i32),
        external_data: vec![StringStringEntryProto {
            key: Some("location".into()),
            value: Some("weights.bin".into()),
        }],
        ..Default::default()
    });
    // Written as raw protobuf: the saver would (rightly) insist on reading the missing side file.
    let p = d.path("ext.onnx");
    std::fs::write(&p, prost::Message::encode_to_vec(&m)).unwrap();
    fails_with(
        &["inspect", p.to_str().unwrap()],
        &["tensor 'w'", "weights.bin"],
    );
}

#[test]
fn unknown_ops_are_reported_and_the_rest_inspected() {
    let d = Tmp::new("unknown");
    let m = model(
        vec![
            node("r", "Relu", &["x"], &["a"]),
            node("f", "FrobnicateV7", &["a"], &["y"]),
        ],
        vec![vi("x", &["N"])],
        vec![vi("y", &["N"])],
    );
    let p = write(&d, "unknown.onnx", &m);
    let out = memplan(&["inspect", p.to_str().unwrap()]);
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.contains("FrobnicateV7") && s.contains("no rule for op FrobnicateV7"),
        "{s}"
    );
    assert!(s.contains("Relu"), "{s}");
}

#[test]
fn convert_leaves_no_partial_file() {
    let d = Tmp::new("convert");
    let out = d.path("out.onnx");
    let g = d.path("bad.onnx");
    std::fs::write(&g, b"\x08\x01\x12garbage").unwrap();
    fails_with(
        &["convert", g.to_str().unwrap(), "-o", out.to_str().unwrap()],
        &["bad.onnx"],
    );
    assert!(!out.exists());
    // A side-file name with a directory is refused before anything is written.
    let m = model(
        vec![node("r", "Relu", &["x"], &["y"])],
        vec![vi("x", &["N"])],
        vec![vi("y", &["N"])],
    );
    let src = write(&d, "m.onnx", &m);
    fails_with(
        &[
            "convert",
            src.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--external-data",
            "sub/w.bin",
        ],
        &["plain file name"],
    );
    assert!(!out.exists());
    let left: Vec<_> = std::fs::read_dir(&d.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "temporary files left: {left:?}");
}

/// `optimize` into a directory that does not exist is refused before planning, naming the flag;
/// an I/O error's cause is said once on the line.
#[test]
fn outputs_into_a_missing_directory_are_refused_before_planning() {
    let d = Tmp::new("outdir");
    let m = model(
        vec![node("r", "Relu", &["x"], &["y"])],
        vec![vi("x", &["N"])],
        vec![vi("y", &["N"])],
    );
    let src = write(&d, "m.onnx", &m);
    let missing = d.path("no/such/dir");
    for flag in ["-o", "--plan-out"] {
        let out = missing.join("out");
        fails_with(
            &[
                "optimize",
                src.to_str().unwrap(),
                "--dim",
                "N=8",
                flag,
                out.to_str().unwrap(),
            ],
            &["does not exist", missing.to_str().unwrap()],
        );
    }
    assert!(!missing.exists());
    let out = memplan(&["inspect", "/nonexistent/m.onnx"]);
    let err = String::from_utf8_lossy(&out.stderr);
    let cause = "No such file or directory";
    assert_eq!(err.matches(cause).count(), 1, "{err}");
}

#[test]
fn bad_cost_models_are_refused_before_anything_is_written() {
    let d = Tmp::new("cost");
    let m = model(
        vec![node("r", "Relu", &["x"], &["y"])],
        vec![vi("x", &["N"])],
        vec![vi("y", &["N"])],
    );
    let src = write(&d, "m.onnx", &m);
    let out = d.path("out.onnx");
    let optimize = |cost: &std::path::Path, budget: bool| {
        let mut a = vec![
            "optimize".to_string(),
            src.to_str().unwrap().into(),
            "--dim".into(),
            "N=1024".into(),
            "-o".into(),
            out.to_str().unwrap().into(),
            "--cost-model".into(),
            cost.to_str().unwrap().into(),
        ];
        if budget {
            a.extend(["--budget".into(), "1KiB".into()]);
        }
        a
    };
    let curve = r#"[[1.0, 1e-6], [1024.0, 1e-5]]"#;
    let model = |threads: &str, copy: &str, extra: &str| {
        format!(
            r#"{{"threads": {threads}, "view_seconds": 1e-6, "fault_seconds_per_byte": 1e-9, "elementwise": {curve}, "copy": {copy}, "contraction": {curve}, "other": {curve}{extra}}}"#
        )
    };
    let cases: [(&str, String, &[&str]); 5] = [
        (
            "notjson.json",
            "{".into(),
            &["not a cost model", "notjson.json"],
        ),
        (
            "field.json",
            model("2", curve, r#", "extra": 1"#),
            &["unknown field `extra`"],
        ),
        (
            "threads.json",
            model("0", curve, ""),
            &["threads must be at least 1"],
        ),
        (
            "order.json",
            model("2", "[[8.0, 1e-6], [2.0, 1e-5]]", ""),
            &["copy curve must have strictly increasing positive work"],
        ),
        (
            "empty.json",
            model("2", "[]", ""),
            &["copy curve has no points"],
        ),
    ];
    for (name, text, needles) in cases {
        let p = d.path(name);
        std::fs::write(&p, text).unwrap();
        let args = optimize(&p, true);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        fails_with(&args, needles);
        assert!(!out.exists());
    }
    fails_with(
        &optimize(&d.path("missing.json"), true)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        &["--cost-model", "missing.json"],
    );
    let good = d.path("good.json");
    std::fs::write(&good, model("2", curve, "")).unwrap();
    fails_with(
        &optimize(&good, false)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        &["--cost-model applies to chunking"],
    );
    assert!(!out.exists());
}

/// `fails_with` with extra environment variables.
fn fails_with_env(env: &[(&str, &str)], args: &[&str], needles: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: stderr: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{args:?}: not one line: {err}"
    );
    for n in needles {
        assert!(err.contains(n), "{args:?}: '{n}' not in: {err}");
    }
}

#[test]
fn run_never_dies_of_its_own_allocation() {
    let m = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/corpus/models/of3_pair_transition.onnx"
    );
    // The estimated peak (16 TiB) exceeds any machine's memory: refused before drawing inputs.
    fails_with(
        &["run", m, "--dim", "N=100000", "--random"],
        &[
            "estimated peak is 16.33 TiB",
            "is available",
            "optimize",
            "--budget",
            "--force",
        ],
    );
    // The same at a small size, with the memory available given.
    fails_with_env(
        &[("MEMPLAN_MEM_AVAILABLE", "1000")],
        &["run", m, "--dim", "N=16", "--random"],
        &[
            "(509192 B)",
            "(1000 B, MEMPLAN_MEM_AVAILABLE)",
            "--budget 900B",
        ],
    );
    // Forced: the 1.2 TiB random input cannot be allocated, and says so.
    fails_with(
        &["run", m, "--dim", "N=100000", "--random", "--force"],
        &["input 'z'", "cannot allocate 1.16 TiB"],
    );
    // Forced past the check, a node whose output cannot be allocated is named.
    let dir = Tmp::new("huge-alloc");
    let fill = node("huge_fill", "ConstantOfShape", &["shp"], &["big"]);
    let mut mp = model(
        vec![fill, node("add", "Add", &["big", "x"], &["y"])],
        vec![vi("x", &["1"])],
        vec![vi("y", &["100000", "100000", "128"])],
    );
    mp.graph.as_mut().unwrap().initializer.push(TensorProto {
        name: Some("shp".into()),
        data_type: Some(7),
        dims: vec![3],
        int64_data: vec![100_000, 100_000, 128],
        ..Default::default()
    });
    let p = write(&dir, "huge.onnx", &mp);
    let p = p.to_str().unwrap();
    fails_with(&["run", p, "--random"], &["estimated peak", "--force"]);
    fails_with(
        &["run", p, "--random", "--force"],
        &[
            "'huge_fill' (ConstantOfShape)",
            "cannot allocate 5120000000000 bytes",
        ],
    );
    // And a run that fits is not refused.
    let out = memplan(&["run", m, "--dim", "N=16", "--random"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn graph_attr(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(g),
        ..Default::default()
    }
}

fn body(
    name: &str,
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
) -> GraphProto {
    GraphProto {
        name: Some(name.into()),
        node: nodes,
        input: inputs,
        output: outputs,
        ..Default::default()
    }
}

fn typed(name: &str, elem: i32, dims: &[&str]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(tensor_type(elem, dims)),
        ..Default::default()
    }
}

#[test]
fn control_flow_errors_name_the_node() {
    let d = Tmp::new("control");
    let (i64t, boolt) = (7, 9);
    // A Loop whose body adds a [3] carried value to a [4] outer value.
    let bad_body = body(
        "b",
        vec![node("add", "Add", &["v", "w"], &["v2"])],
        vec![
            typed("i", i64t, &[]),
            typed("c", boolt, &[]),
            vi("v", &["3"]),
        ],
        vec![typed("c", boolt, &[]), vi("v2", &["3"])],
    );
    let mut lp = node("loop", "Loop", &["m", "", "x"], &["y"]);
    lp.attribute.push(graph_attr("body", bad_body));
    let m = model(
        vec![lp],
        vec![typed("m", i64t, &[]), vi("x", &["3"]), vi("w", &["4"])],
        vec![vi("y", &["3"])],
    );
    let p = write(&d, "loop_types.onnx", &m);
    fails_with(
        &["inspect", p.to_str().unwrap()],
        &["'loop' (Loop)", "body 'b'", "'add' (Add)", "3", "4"],
    );

    // A Loop passing one carried value to a body that takes none.
    let short = body(
        "b",
        vec![],
        vec![typed("i", i64t, &[]), typed("c", boolt, &[])],
        vec![typed("c", boolt, &[])],
    );
    let mut lp = node("loop", "Loop", &["m", "", "x"], &["y"]);
    lp.attribute.push(graph_attr("body", short));
    let m = model(
        vec![lp],
        vec![typed("m", i64t, &[]), vi("x", &["3"])],
        vec![vi("y", &["3"])],
    );
    let p = write(&d, "loop_arity.onnx", &m);
    fails_with(
        &["inspect", p.to_str().unwrap()],
        &["'loop' (Loop)", "the body takes 2 inputs", "passes 3"],
    );

    // If branches with different output counts.
    let one = body(
        "then",
        vec![node("r", "Relu", &["x"], &["a"])],
        vec![],
        vec![vi("a", &["3"])],
    );
    let two = body(
        "else",
        vec![
            node("n1", "Neg", &["x"], &["b"]),
            node("n2", "Neg", &["x"], &["b2"]),
        ],
        vec![],
        vec![vi("b", &["3"]), vi("b2", &["3"])],
    );
    let mut iff = node("if", "If", &["c"], &["y"]);
    iff.attribute.push(graph_attr("then_branch", one));
    iff.attribute.push(graph_attr("else_branch", two));
    let m = model(
        vec![iff],
        vec![typed("c", boolt, &[]), vi("x", &["3"])],
        vec![vi("y", &["3"])],
    );
    let p = write(&d, "if_arity.onnx", &m);
    fails_with(
        &["inspect", p.to_str().unwrap()],
        &["'if' (If)", "different output counts", "then 1, else 2"],
    );
}

/// Dims at which the model does not type-check are refused before anything is estimated, planned
/// or run, naming the node: `x[S, 4] + w[8, 4]` holds at S=8 (or 1) only. Symbolic inference
/// broadcasts S and 8 to their larger, exact for every input the model accepts, so only the
/// inference at the point sees it.
#[test]
fn dims_at_which_the_model_does_not_type_check_name_the_node() {
    let d = Tmp::new("dims");
    let m = model(
        vec![node("add", "Add", &["x", "w"], &["y"])],
        vec![vi("x", &["S", "4"]), vi("w", &["8", "4"])],
        vec![vi("y", &["S", "4"])],
    );
    let p = write(&d, "bcast.onnx", &m);
    let p = p.to_str().unwrap();
    let out = d.path("out.onnx");
    let out = out.to_str().unwrap();
    for args in [
        vec!["estimate", p, "--dim", "S=16"],
        vec!["optimize", p, "--dim", "S=16", "-o", out],
        vec!["run", p, "--dim", "S=16", "--random"],
    ] {
        fails_with(&args, &["S=16", "'add' (Add)", "16 vs 8"]);
    }
    assert!(!std::path::Path::new(out).exists(), "no file written");
    assert!(memplan(&["estimate", p, "--dim", "S=8"]).status.success());
}

/// `run --threads` on a model whose loading folds a product of two weights: the fold runs the
/// executor's matmul, whose parallel loop would start rayon's default pool before `--threads` set
/// its own (the run was refused: "the global thread pool has already been initialized").
#[test]
fn threads_are_set_before_loading_folds_a_product() {
    let d = Tmp::new("threads-fold");
    let mut m = model(
        vec![
            node("c", "MatMul", &["w1", "w2"], &["c"]),
            node("a", "Add", &["x", "c"], &["y"]),
        ],
        vec![vi("x", &["2", "2"])],
        vec![vi("y", &["2", "2"])],
    );
    for (name, vals) in [
        ("w1", [1.0f32, 2.0, 3.0, 4.0]),
        ("w2", [0.5, 0.0, 0.0, 2.0]),
    ] {
        m.graph.as_mut().unwrap().initializer.push(TensorProto {
            name: Some(name.into()),
            data_type: Some(1),
            dims: vec![2, 2],
            float_data: vals.to_vec(),
            ..Default::default()
        });
    }
    let p = write(&d, "fold.onnx", &m);
    for threads in ["1", "2"] {
        let out = memplan(&[
            "run",
            p.to_str().unwrap(),
            "--random",
            "--threads",
            threads,
            "--json",
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "--threads {threads}: {err}");
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(j["peak_bytes"].as_u64().unwrap() > 0, "{j}");
    }
}

/// A reader that closes the pipe before the report is written (`memplan estimate --json | head`):
/// the process ends as a Unix filter does, on SIGPIPE, with no panic on stderr.
#[cfg(unix)]
#[test]
fn a_closed_pipe_ends_the_process_quietly() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let model = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/corpus/models/of3_pair_transition.onnx"
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(["estimate", model, "--dim", "N=256", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Closed before the model has even loaded.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        out.status.success() || out.status.signal() == Some(libc::SIGPIPE),
        "{:?}: {err}",
        out.status
    );
}
