//! Chunked execution on the corpus: every model (both exporters, at its smaller input size) is
//! chunked by `memplan optimize --budget` restricted to each chunk count the planner can choose
//! (`--chunks K`), and the rewritten model runs bit-identical to the original, from its plan and
//! without one; a planned run's measured peak is the plan's.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn json_of(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "memplan {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The JSON of an `optimize --budget` and its exit status: 0 when the plan fits, 3 when it does
/// not (the lowest plan reached is still written).
fn json_and_status(args: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(args)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "memplan {}: no JSON ({e}): {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

/// Runs the written model `o` on inputs `i` from its plan `p` and without one: outputs bit-identical
/// to the reference `r`, and the planned run's measured peak is the plan's (`rep`, optimize's
/// JSON).
fn runs_bit_identical(o: &str, p: &str, i: &str, r: &str, rep: &serde_json::Value, what: &str) {
    for planned in [true, false] {
        let mut args = vec![
            "run",
            o,
            "--inputs-npz",
            i,
            "--compare",
            r,
            "--exact",
            "--json",
        ];
        if planned {
            args.extend(["--plan", p]);
        }
        let run = json_of(&args);
        assert_eq!(
            run["mismatches"].as_array().unwrap().len(),
            0,
            "{what} (planned {planned}): {}",
            run["mismatches"]
        );
        if planned {
            assert_eq!(
                run["peak_bytes"], rep["peak_bytes_after"],
                "{what}: the measured peak is the plan's"
            );
        }
    }
}

/// The default chunk counts of `memplan_plan::chunk::ChunkOptions`.
const COUNTS: [usize; 8] = [2, 4, 8, 16, 32, 64, 128, 256];

#[test]
fn chunked_corpus_runs_bit_identical_at_every_chunk_count() {
    let tmp = std::env::temp_dir().join(format!("memplan-chunk-corpus-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    // (model, size, inputs), the smaller size of each model only.
    let mut inputs: Vec<(String, u32, PathBuf)> =
        std::fs::read_dir(repo().join("tests/corpus/inputs"))
            .unwrap()
            .map(|e| {
                let path = e.unwrap().path();
                let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
                let (base, size) = stem.rsplit_once('_').unwrap();
                (base.to_string(), size.parse().unwrap(), path)
            })
            .collect();
    inputs.sort();
    inputs.dedup_by(|b, a| a.0 == b.0);
    let (mut chunked, mut models) = (0, 0);
    for (base, _, npz) in &inputs {
        for variant in ["", ".legacy"] {
            let model = repo().join(format!("tests/corpus/models/{base}{variant}.onnx"));
            let (m, i) = (model.to_str().unwrap(), npz.to_str().unwrap());
            let stem = format!("{base}{variant}");
            let reference = tmp.join(format!("{stem}.ref.npz"));
            let r = reference.to_str().unwrap();
            let free = json_of(&["run", m, "--inputs-npz", i, "--out", r, "--json"]);
            let dims: Vec<String> = free["dims"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| format!("--dim={k}={v}"))
                .collect();
            let dim_args: Vec<&str> = dims.iter().map(String::as_str).collect();
            // Half the unoptimized peak (chunking has to act), not below the floor (refused).
            let budget = (free["peak_bytes"].as_u64().unwrap() / 2)
                .max(floor_of(m, &dim_args))
                .to_string();
            models += 1;
            for k in COUNTS {
                let (opt, plan) = (
                    tmp.join(format!("{stem}.{k}.onnx")),
                    tmp.join(format!("{stem}.{k}.plan.json")),
                );
                let (o, p) = (opt.to_str().unwrap(), plan.to_str().unwrap());
                let ks = k.to_string();
                let mut args = vec![
                    "optimize",
                    m,
                    "--budget",
                    &budget,
                    "--chunks",
                    &ks,
                    "--exact-work",
                    "0",
                    "-o",
                    o,
                    "--plan-out",
                    p,
                    "--json",
                ];
                args.extend(&dim_args);
                let (code, rep) = json_and_status(&args);
                assert!(code == 0 || code == 3, "{stem}: exit status {code}");
                assert_eq!(rep["fits"] == true, code == 0, "{stem}: exit status {code}");
                // The floor is a lower bound: resident bytes and more, never above a plan.
                let floor = rep["floor"]["bytes"].as_u64().unwrap();
                assert!(floor >= rep["floor"]["resident_bytes"].as_u64().unwrap());
                assert!(
                    floor <= rep["peak_bytes_after"].as_u64().unwrap(),
                    "{stem}: floor {floor} above the planned peak {}",
                    rep["peak_bytes_after"]
                );
                let steps = rep["chunking"]["steps"].as_array().map_or(0, |s| s.len());
                if steps == 0 {
                    continue;
                }
                chunked += 1;
                runs_bit_identical(o, p, i, r, &rep, &format!("{stem} in chunks of {k}"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(models >= 10, "only {models} models");
    assert!(
        chunked >= models,
        "only {chunked} chunked runs over {models} models"
    );
}

/// Bad budget flags get one line naming the flag and a non-zero exit; so does a budget below the
/// floor (status 1, nothing written). `lowest` gets the lowest plan (status 0); a budget between
/// the floor and the lowest plan is reported with the lowest peak and what holds it up (status 3).
#[test]
fn budget_flags_and_an_unreachable_budget() {
    let model = repo().join("tests/corpus/models/of3_tri_att_start.onnx");
    let m = model.to_str().unwrap();
    let fail = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_memplan"))
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "memplan {}", args.join(" "));
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        err
    };
    let e = fail(&["optimize", m, "--dim", "N=32", "--budget", "lots"]);
    assert!(e.contains("--budget"), "{e}");
    let e = fail(&["optimize", m, "--dim", "N=32", "--budget", "0x"]);
    assert!(e.contains("--budget") && e.contains("0.15x"), "{e}");
    // A fraction of the peak: of the estimate's peak at the dims, rounded down.
    let est = json_of(&["estimate", m, "--dim", "N=32", "--json"]);
    let peak = est["peak_bytes"].as_u64().unwrap();
    let (_, half) =
        json_and_status(&["optimize", m, "--dim", "N=32", "--budget", "0.5x", "--json"]);
    assert_eq!(
        half["budget_bytes"].as_u64(),
        Some(peak / 2),
        "{}",
        half["budget_bytes"]
    );
    assert!(half["peak_bytes_after"].as_u64().unwrap() <= peak / 2);
    let e = fail(&[
        "optimize", m, "--dim", "N=32", "--budget", "1MiB", "--chunks", "1",
    ]);
    assert!(e.contains("--chunks"), "{e}");
    let e = fail(&["optimize", m, "--dim", "N=32", "--chunks", "4"]);
    assert!(e.contains("--budget"), "{e}");
    // 1 KiB cannot hold even the input: below the floor, refused in one line, nothing written.
    let out = std::env::temp_dir().join(format!("memplan-floor-{}.json", std::process::id()));
    let o = out.to_str().unwrap();
    let e = fail(&[
        "optimize",
        m,
        "--dim",
        "N=32",
        "--budget",
        "1KiB",
        "--plan-out",
        o,
    ]);
    assert!(
        e.contains("below the floor") && e.contains("--budget"),
        "{e}"
    );
    assert_eq!(
        Command::new(env!("CARGO_BIN_EXE_memplan"))
            .args(["optimize", m, "--dim", "N=32", "--budget", "1KiB"])
            .status()
            .unwrap()
            .code(),
        Some(1)
    );
    assert!(!out.exists(), "nothing is written");
    // `lowest`: the lowest plan, exit 0; its floor is what no plan goes below.
    let (code, low) = json_and_status(&[
        "optimize", m, "--dim", "N=32", "--budget", "lowest", "--json",
    ]);
    assert_eq!(code, 0);
    assert!(low["fits"].is_null(), "{}", low["fits"]);
    let floor = low["floor"]["bytes"].as_u64().unwrap();
    let lowest = low["peak_bytes_after"].as_u64().unwrap();
    assert!(!low["floor"]["held_by"].as_str().unwrap().is_empty());
    assert!(floor < lowest && lowest < low["peak_bytes_before"].as_u64().unwrap());
    // Between the floor and the lowest plan: not met, exit 3, the lowest plan is written with
    // what holds it up.
    let between = format!("{}B", floor + (lowest - floor) / 2);
    let (code, rep) = json_and_status(&[
        "optimize",
        m,
        "--dim",
        "N=32",
        "--budget",
        &between,
        "--plan-out",
        o,
        "--json",
    ]);
    assert_eq!(code, 3, "a budget not met exits 3");
    assert_eq!(rep["fits"], false);
    assert!(out.exists(), "the lowest plan is written");
    let live = rep["chunking"]["live_at_peak"].as_array().unwrap();
    assert!(!live.is_empty());
    assert!(rep["peak_bytes_after"].as_u64().unwrap() < rep["peak_bytes_before"].as_u64().unwrap());
    let _ = std::fs::remove_file(&out);
}

/// The floor of `model` at `dims` (`--dim` flags): the bound no plan goes below, from the report of
/// its lowest plan.
fn floor_of(model: &str, dims: &[&str]) -> u64 {
    let mut args = vec!["optimize", model, "--budget", "lowest", "--json"];
    args.extend(dims);
    json_of(&args)["floor"]["bytes"].as_u64().unwrap()
}

/// Runs `model` unoptimized (writing its outputs to `reference`); returns its measured peak and
/// the dims its inputs bind, as `--dim` flags.
fn unoptimized(model: &str, inputs: &str, reference: &str) -> (u64, Vec<String>) {
    let free = json_of(&[
        "run",
        model,
        "--inputs-npz",
        inputs,
        "--out",
        reference,
        "--json",
    ]);
    let dims = free["dims"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| format!("--dim={k}={v}"))
        .collect();
    (free["peak_bytes"].as_u64().unwrap(), dims)
}

/// `optimize --budget` at `fraction` of the unoptimized peak, then the planned run: outputs
/// bit-identical to the unoptimized run's, measured peak = planned peak. Returns the planned peak
/// as a fraction of the unoptimized one and the report.
fn chunk_and_run(tmp: &Path, model: &str, inputs: &str, fraction: f64) -> (f64, serde_json::Value) {
    let stem = Path::new(model).file_stem().unwrap().to_str().unwrap();
    let reference = tmp.join(format!("{stem}.ref.npz"));
    let r = reference.to_str().unwrap();
    let (peak, dims) = unoptimized(model, inputs, r);
    // Not below the floor, which is refused.
    let dim_args: Vec<&str> = dims.iter().map(String::as_str).collect();
    let budget = ((peak as f64 * fraction) as u64)
        .max(floor_of(model, &dim_args))
        .to_string();
    let (opt, plan) = (
        tmp.join(format!("{stem}.chunked.onnx")),
        tmp.join(format!("{stem}.plan.json")),
    );
    let (o, p) = (opt.to_str().unwrap(), plan.to_str().unwrap());
    let mut args = vec![
        "optimize",
        model,
        "--budget",
        &budget,
        "-o",
        o,
        "--plan-out",
        p,
        "--json",
    ];
    args.extend(dims.iter().map(String::as_str));
    let (code, rep) = json_and_status(&args);
    assert!(code == 0 || code == 3, "{stem}: exit status {code}");
    let run = json_of(&[
        "run",
        o,
        "--plan",
        p,
        "--inputs-npz",
        inputs,
        "--compare",
        r,
        "--exact",
        "--json",
    ]);
    assert_eq!(
        run["mismatches"].as_array().unwrap().len(),
        0,
        "{stem}: {}",
        run["mismatches"]
    );
    let planned = rep["peak_bytes_after"].as_u64().unwrap();
    assert_eq!(
        run["peak_bytes"].as_u64().unwrap(),
        planned,
        "{stem}: the measured peak is the plan's"
    );
    (planned as f64 / peak as f64, rep)
}

/// Runs the optimized model `o` from its plan `p` at `dims` against the unoptimized run's outputs
/// `reference`: bit-identical, and the measured peak is the one `rep` (the optimize report)
/// planned, which it returns.
fn run_exact(o: &str, p: &str, reference: &Path, dims: &[&str], rep: &serde_json::Value) -> u64 {
    let r = reference.to_str().unwrap();
    let mut args = vec!["run", o, "--plan", p, "--compare", r, "--exact", "--json"];
    args.extend(dims);
    let run = json_of(&args);
    assert_eq!(run["mismatches"].as_array().unwrap().len(), 0, "{run}");
    let planned = rep["peak_bytes_after"].as_u64().unwrap();
    assert_eq!(
        run["peak_bytes"].as_u64(),
        Some(planned),
        "measured = planned"
    );
    planned
}

/// Both exports of a module chunk alike. The TorchScript export computes every reshape target,
/// slice bound and pad amount from `Shape`; frozen to constants at the dims, they make shapes
/// concrete after the first reshape while the inputs stay symbolic, and the axis flows are decided
/// at the dims, so a region grows through those reshapes as it does in the dynamo export. Triangle
/// attention: one region spans the projections, the attention and the output projection (its
/// layer norm, also read whole by the triangle bias, recomputed per chunk), well under a third of
/// the unoptimized peak. The forum program: one region spans the whole program, through its
/// shape-computed padding and strided slices, to the graph output.
#[test]
fn legacy_exports_chunk_as_well_as_dynamo_exports() {
    let tmp = std::env::temp_dir().join(format!("memplan-chunk-exports-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let corpus = repo().join("tests/corpus");
    let cases = [
        (
            corpus.join("models/of3_tri_att_start"),
            corpus.join("inputs/of3_tri_att_start_64.npz"),
            0.15,
        ),
        (
            corpus.join("forum/models/logspace_forum"),
            corpus.join("forum/inputs/logspace_forum_5.npz"),
            0.15,
        ),
    ];
    for (stem, inputs, fraction) in cases {
        let mut got = Vec::new();
        for variant in ["", ".legacy"] {
            let model = format!("{}{variant}.onnx", stem.display());
            let (f, rep) = chunk_and_run(&tmp, &model, inputs.to_str().unwrap(), fraction);
            let steps = rep["chunking"]["steps"].as_array().unwrap();
            assert!(!steps.is_empty(), "{model}: not chunked");
            if model.contains("forum") {
                // One region reaches the program's output.
                assert!(
                    steps.iter().any(|s| s["outputs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|o| o == "logz")),
                    "{model}: no region reaches the output: {steps:?}"
                );
            } else {
                assert!(
                    f < 0.3,
                    "{model}: planned peak {f:.3} of the unoptimized one"
                );
            }
            got.push(f);
        }
        assert!(
            (got[0] - got[1]).abs() <= 0.01,
            "{}: dynamo export {:.3}, legacy export {:.3} of the unoptimized peak",
            stem.display(),
            got[0],
            got[1]
        );
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A T5 encoder (both exports, wide corpus) at S=512: its relative position bias [1, H, S, S] is
/// computed once, from bucket arithmetic over two position ranges, and read by every layer. Made
/// again for each layer from those small inputs, it joins each layer's attention region and is
/// never whole: the planned peak falls under 0.15x of the unoptimized one, measured = planned,
/// outputs bit-identical.
#[test]
fn a_position_bias_every_layer_reads_is_recomputed_per_chunk() {
    let tmp = std::env::temp_dir().join(format!("memplan-chunk-t5-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for variant in ["", ".legacy"] {
        let dims = ["--dim", "B=1", "--dim", "S=512"];
        let c = Optimized::optimize(&tmp, "t5_encoder", variant, &dims, |peak| {
            format!("{}B", peak * 15 / 100)
        });
        assert_eq!(c.code, 0, "t5_encoder{variant}: the budget is met");
        let shared = c.rep["chunking"]["per_reader"].as_array().unwrap();
        assert!(
            shared
                .iter()
                .any(|s| s["value"].as_str().unwrap().contains("here_1")
                    && s["bytes"].as_u64() == Some(4 * 4 * 512 * 512)),
            "t5_encoder{variant}: the [1, 4, S, S] float bias is made per reader: {shared:?}"
        );
        let planned = c.run_exact(&dims);
        assert!(planned * 100 <= c.peak * 15, "{planned} of {}", c.peak);
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// DeBERTa's disentangled attention (wide corpus, both exports) at S=256: its position terms are
/// `GatherElements` of the content-to-position scores by relative-position indices, one along the
/// key axis and one along the query axis (then transposed). Slices along the gather axis are the
/// indices' slices over the data read whole, so a region runs along the query axis through both
/// gathers: at the lowest plan a region is chunked along the sequence, the planned peak is at most
/// 0.2x the unoptimized one (the TorchScript export stopped at 0.54x when only the heads split,
/// and both exports at 0.36-0.38x before the relative positions were made into one tree per
/// reader, [`Copies::Trees`](memplan_plan::remat::Copies)), measured = planned, outputs
/// bit-identical. The dynamo export's first-layer region, grown on into the second layer (whose
/// keys and values are made outside it), is not convex, and only a prefix of its growth in
/// topological order is that layer whole (it stopped at 0.32x before regions were also cut at
/// topological prefixes, [`ChunkOptions::topological`](memplan_plan::chunk::ChunkOptions)).
/// The TorchScript export slices its relative positions `rel_pos[:S]` of an `[S, S]` tensor, which
/// cut the region off from the bucket arithmetic before it until a slice that keeps an axis whole
/// passed that axis (it stopped at 0.33x).
#[test]
fn relative_position_gathers_chunk_along_the_query_axis() {
    let tmp = std::env::temp_dir().join(format!("memplan-chunk-deberta-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for variant in ["", ".legacy"] {
        let dims = ["--dim", "B=1", "--dim", "S=256"];
        let c = Optimized::optimize(&tmp, "deberta_v2", variant, &dims, |_| "lowest".into());
        let steps = c.rep["chunking"]["steps"].as_array().unwrap();
        assert!(
            steps.iter().any(|s| s["extent"] == 256),
            "deberta_v2{variant}: no region chunked along the sequence: {steps:?}"
        );
        let planned = c.run_exact(&dims);
        assert!(
            planned * 100 <= c.peak * 20,
            "deberta_v2{variant}: planned {planned} of {}",
            c.peak
        );
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A model run unoptimized on random inputs at its dims (outputs kept to compare with, measured
/// peak) and then optimized with `optimize --json`: a wide-corpus export ([`Optimized::optimize`])
/// or any file ([`Optimized::of`]).
struct Optimized {
    peak: u64,
    code: i32,
    rep: serde_json::Value,
    reference: PathBuf,
    out: String,
    plan: String,
}

impl Optimized {
    /// `stem` + `variant` from tests/wide/models at `dims` (`--dim` pairs), under the budget
    /// `budget` makes of the unoptimized run's measured peak; files under `tmp`.
    fn optimize(
        tmp: &Path,
        stem: &str,
        variant: &str,
        dims: &[&str],
        budget: impl Fn(u64) -> String,
    ) -> Optimized {
        let model = repo().join(format!("tests/wide/models/{stem}{variant}.onnx"));
        Optimized::of(tmp, &model, &format!("{stem}{variant}"), dims, budget)
    }

    /// [`Optimized::optimize`] of any model file; its files under `tmp` are named after `tag`.
    fn of(
        tmp: &Path,
        model: &Path,
        tag: &str,
        dims: &[&str],
        budget: impl Fn(u64) -> String,
    ) -> Optimized {
        let m = model.to_str().unwrap();
        let reference = tmp.join(format!("{tag}.ref.npz"));
        let mut args = vec![
            "run",
            m,
            "--out",
            reference.to_str().unwrap(),
            "--json",
            "--random",
        ];
        args.extend(dims);
        let peak = json_of(&args)["peak_bytes"].as_u64().unwrap();
        let out = tmp.join(format!("{tag}.opt.onnx"));
        let plan = tmp.join(format!("{tag}.plan.json"));
        let (out, plan) = (
            out.to_str().unwrap().to_string(),
            plan.to_str().unwrap().to_string(),
        );
        let b = budget(peak);
        let mut args = vec![
            "optimize",
            m,
            "--budget",
            &b,
            "-o",
            &out,
            "--plan-out",
            &plan,
        ];
        args.extend(dims);
        args.push("--json");
        let (code, rep) = json_and_status(&args);
        Optimized {
            peak,
            code,
            rep,
            reference,
            out,
            plan,
        }
    }

    /// [`run_exact`] of the optimized file from its plan, at `dims`.
    fn run_exact(&self, dims: &[&str]) -> u64 {
        let mut d = dims.to_vec();
        d.push("--random");
        run_exact(&self.out, &self.plan, &self.reference, &d, &self.rep)
    }
}

/// The pairformer's triangle multiplication reads the layer norm of the residual stream in its
/// projections, before the peak, and in its output gate, after it; no region splits the norm
/// (it reduces over the channels the projections are chunked by). At its lowest plan the norm is
/// made again right before the gate, from the residual stream live there anyway, and chunked
/// with the gate: both exports, measured = planned, outputs bit-identical. (At N=320: at N=256
/// the regions alone reach as low, and the lever is not needed.)
#[test]
fn a_layer_norm_read_across_the_peak_is_made_again_for_the_gate() {
    let tmp = std::env::temp_dir().join(format!("memplan-chunk-gate-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for variant in ["", ".legacy"] {
        let model = repo().join(format!(
            "tests/corpus/models/of3_pairformer_block{variant}.onnx"
        ));
        let dims = ["--dim", "N=320"];
        let tag = format!("pf{variant}");
        let l = Optimized::of(&tmp, &model, &tag, &dims, |_| "lowest".into());
        assert_eq!(l.code, 0, "{tag}: lowest exits 0");
        let rep = &l.rep;
        let remade = rep["chunking"]["per_reader"].as_array().unwrap();
        assert!(
            remade
                .iter()
                .any(|s| s["value"].as_str().unwrap().contains("layer_norm")
                    && s["copies"] == 1
                    && s["bytes"].as_u64() == Some(320 * 320 * 32 * 4)),
            "pairformer{variant}: a [N, N, 32] layer norm is made again for one reader: {remade:?}"
        );
        l.run_exact(&dims);
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// The outgoing triangle multiplication chunked along its rows reads all of its right operand in
/// every chunk; its lowest plan tiles it (the operand made again per chunk of rows, from copies of
/// its makers, and chunked along its own rows): both exports, a step in tiles, the planned peak
/// below what one axis reaches (0.586 of the unoptimized peak), measured = planned, outputs
/// bit-identical.
#[test]
fn tiled_triangle_multiplication_runs_bit_identical_at_its_plan() {
    let tmp = std::env::temp_dir().join(format!("memplan-chunk-tiles-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for variant in ["", ".legacy"] {
        let model = repo().join(format!("tests/corpus/models/of3_tri_mul_out{variant}.onnx"));
        let dims = ["--dim", "N=96"];
        let tag = format!("tm{variant}");
        let l = Optimized::of(&tmp, &model, &tag, &dims, |_| "lowest".into());
        assert_eq!(l.code, 0, "{tag}: lowest exits 0");
        let rep = &l.rep;
        let steps = rep["chunking"]["steps"].as_array().unwrap();
        assert!(
            steps
                .iter()
                .any(|s| s["tiles"].as_u64().is_some_and(|t| t > 1)),
            "tri_mul_out{variant}: no step in tiles: {steps:?}"
        );
        let before = rep["peak_bytes_before"].as_u64().unwrap() as f64;
        let planned = l.run_exact(&dims) as f64;
        assert!(
            planned < 0.5 * before,
            "tri_mul_out{variant}: {planned} of {before}"
        );
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `--scan-from K` folds a region of K or more equal chunks into one `Scan` (its body one chunk):
/// on the corpus at half the unoptimized peak in 8 chunks, the folded file holds a `Scan` where
/// the report says so, fewer nodes than the unrolled one, and runs bit-identical to the original
/// from its plan (measured peak = planned, the bodies in the lanes the plan and the report give)
/// and without one.
#[test]
fn regions_folded_into_a_scan_run_bit_identical() {
    let tmp = std::env::temp_dir().join(format!("memplan-scan-corpus-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let (mut folded, mut laned) = (0, 0);
    for base in ["of3_pair_transition", "of3_tri_att_start", "bert_encoder"] {
        for variant in ["", ".legacy"] {
            let model = repo().join(format!("tests/corpus/models/{base}{variant}.onnx"));
            let npz = std::fs::read_dir(repo().join("tests/corpus/inputs"))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| {
                    let s = p.file_stem().unwrap().to_str().unwrap();
                    s.rsplit_once('_').is_some_and(|(b, _)| b == base)
                })
                .min()
                .unwrap();
            let stem = format!("{base}{variant}");
            let reference = tmp.join(format!("{stem}.ref.npz"));
            let (m, i, r) = (
                model.to_str().unwrap(),
                npz.to_str().unwrap(),
                reference.to_str().unwrap(),
            );
            let (peak, dims) = unoptimized(m, i, r);
            let dim_args: Vec<&str> = dims.iter().map(String::as_str).collect();
            let budget = (peak / 2).max(floor_of(m, &dim_args)).to_string();
            let mut sizes = Vec::new();
            for scan_from in ["0", "2"] {
                let opt = tmp.join(format!("{stem}.scan{scan_from}.onnx"));
                let plan = tmp.join(format!("{stem}.scan{scan_from}.plan.json"));
                let (o, p) = (opt.to_str().unwrap(), plan.to_str().unwrap());
                let mut args = vec![
                    "optimize",
                    m,
                    "--budget",
                    &budget,
                    "--chunks",
                    "8",
                    "--scan-from",
                    scan_from,
                    "--exact-work",
                    "0",
                    "-o",
                    o,
                    "--plan-out",
                    p,
                    "--json",
                ];
                args.extend(&dim_args);
                let (code, rep) = json_and_status(&args);
                assert!(code == 0 || code == 3, "{stem}: exit status {code}");
                let steps = rep["chunking"]["steps"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let scans = steps.iter().filter(|s| s["scan"] == true).count();
                let text = std::fs::read(o).unwrap();
                let has_scan = text.windows(4).any(|w| w == b"Scan");
                assert_eq!(
                    has_scan,
                    scans > 0,
                    "{stem}: a Scan in the file iff reported"
                );
                if scan_from == "0" {
                    assert_eq!(scans, 0, "{stem}: --scan-from 0 never folds");
                }
                // Each folded Scan carries no state: the plan runs its body from a plan of its own.
                let plan_json: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
                let bodies = plan_json["bodies"].as_array().cloned().unwrap_or_default();
                assert_eq!(bodies.len(), scans, "{stem}: body plans for {scans} Scans");
                folded += scans;
                // The lanes each body runs in, as the plan says and as the report says.
                let mut in_plan: Vec<u64> = bodies
                    .iter()
                    .map(|b| b["lanes"].as_u64().unwrap_or(1))
                    .collect();
                let mut reported: Vec<u64> = steps
                    .iter()
                    .filter(|s| s["scan"] == true)
                    .map(|s| s["lanes"].as_u64().unwrap_or(0))
                    .collect();
                in_plan.sort_unstable();
                reported.sort_unstable();
                assert_eq!(in_plan, reported, "{stem}: lanes");
                laned += in_plan.iter().filter(|&&l| l > 1).count();
                sizes.push((text.len(), scans));
                runs_bit_identical(o, p, i, r, &rep, &format!("{stem} --scan-from {scan_from}"));
            }
            if sizes[1].1 > 0 {
                assert!(sizes[1].0 < sizes[0].0, "{stem}: folded file {sizes:?}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    eprintln!("{folded} regions folded into a Scan over the models, {laned} run in lanes");
    assert!(folded >= 2, "only {folded} regions folded over the models");
    // Half the peak leaves room for a second copy of a chunk's body: the default two lanes.
    assert!(laned >= 2, "only {laned} folded regions run in lanes");
}

/// A chunked model holds chunk bounds made at its dims, so the written file is pinned there: its
/// inputs declare those sizes, `inspect` says so, the same `--dim` is taken and another refused
/// naming both, and its estimate needs no dims.
#[test]
fn a_chunked_file_is_pinned_at_the_dims_it_was_chunked_at() {
    let tmp = std::env::temp_dir().join(format!("memplan-pinned-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let model = repo().join("tests/corpus/models/of3_tri_att_start.legacy.onnx");
    let m = model.to_str().unwrap();
    let (o, p) = (tmp.join("pinned.onnx"), tmp.join("pinned.plan.json"));
    let (o, p) = (o.to_str().unwrap(), p.to_str().unwrap());
    let est = json_of(&["estimate", m, "--dim", "N=48", "--json"]);
    let budget = (est["peak_bytes"].as_u64().unwrap() / 3).to_string();
    let args = [
        "optimize",
        m,
        "--dim",
        "N=48",
        "--budget",
        &budget,
        "--exact-work",
        "0",
        "-o",
        o,
        "--plan-out",
        p,
        "--json",
    ];
    let (code, rep) = json_and_status(&args);
    assert!(code == 0 || code == 3, "exit status {code}");
    assert!(
        !rep["chunking"]["steps"].as_array().unwrap().is_empty(),
        "the budget makes it chunk"
    );
    let ins = json_of(&["inspect", o, "--json"]);
    assert_eq!(ins["pinned_dims"], serde_json::json!({"N": 48}));
    assert_eq!(ins["symbols"], serde_json::json!([]));
    let shape = ins["inputs"][0]["shape"].as_array().unwrap();
    assert!(shape.iter().any(|d| d == "48"), "input shape {shape:?}");
    // No dims needed, the pinned one taken at its value: the same estimate.
    let free = json_of(&["estimate", o, "--json"]);
    let same = json_of(&["estimate", o, "--dim", "N=48", "--json"]);
    assert_eq!(free["peak_bytes"], same["peak_bytes"]);
    // Another value of the pinned symbol is refused (exit 1), naming both, by run and by sweep.
    let refused = |args: &[&str], flag: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_memplan"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(flag) && err.contains("optimized at N=48"),
            "{err}"
        );
    };
    refused(
        &["run", o, "--plan", p, "--dim", "N=64", "--random"],
        "--dim N=64",
    );
    refused(&["estimate", o, "--sweep", "N=16..64"], "--sweep N");
}

/// Attention's projections split into heads by a reshape (`(x @ W + b).view(B, S, H, D)`) are
/// products over heads once chunked (`chunk/heads.rs`): the written file multiplies by weights of
/// `[H, E, D]`, so regions split heads from the product on. BERT's encoder, both exports, at its
/// lowest plan: such products in the file, measured = planned, outputs bit-identical with the
/// unoptimized run.
#[test]
fn projections_split_into_heads_are_products_over_heads() {
    let tmp = std::env::temp_dir().join(format!("memplan-chunk-heads-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for variant in ["", ".legacy"] {
        let model = repo().join(format!("tests/corpus/models/bert_encoder{variant}.onnx"));
        let dims = ["--dim", "B=1", "--dim", "S=1024"];
        let tag = format!("bert{variant}");
        let c = Optimized::of(&tmp, &model, &tag, &dims, |_| "lowest".into());
        let m = memplan_onnx::import(Path::new(&c.out)).unwrap();
        let g = &m.graph;
        // A weight `[H, E, D]`, read whole or through a chunk's slice of it.
        let rank3 = |v: memplan_ir::ValueId| match &g.value(v).kind {
            memplan_ir::graph::ValueKind::Initializer(t) => t.dims.len() == 3,
            _ => false,
        };
        let per_head = g
            .nodes
            .iter()
            .filter(|n| n.op == "MatMul")
            .filter_map(|n| n.inputs.get(1).copied().flatten())
            .filter(|&w| {
                rank3(w)
                    || g.producer(w).is_some_and(|p| {
                        let n = g.node(p);
                        n.op == "Slice" && n.inputs[0].is_some_and(rank3)
                    })
            })
            .count();
        assert!(
            per_head > 0,
            "bert_encoder{variant}: no product over heads in the file"
        );
        let planned = c.run_exact(&dims);
        assert!(
            planned < c.peak,
            "bert_encoder{variant}: planned {planned} of {}",
            c.peak
        );
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A program over `x: [1, S, 64]` (f32) built node by node for the chunking tests (node `k` is
/// named `{op}_{k}`, its outputs `{op}_{k}_out{i}`), saved in a temporary folder of its own.
struct Program {
    g: memplan_ir::graph::Graph,
    x: memplan_ir::ValueId,
    tmp: PathBuf,
    tag: &'static str,
}

impl Program {
    fn new(tag: &'static str) -> Program {
        use memplan_ir::graph::{DeclDim, DeclType, Graph};
        let tmp = std::env::temp_dir().join(format!("memplan-chunk-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let mut g = Graph::default();
        let dims = vec![
            DeclDim::Value(1),
            DeclDim::Param("S".into()),
            DeclDim::Value(64),
        ];
        let x = g.add_input("x", DeclType::tensor(memplan_ir::DataType::F32, dims));
        Program { g, x, tmp, tag }
    }

    /// A `[rows, cols]` weight of small values, `k` varying them.
    fn weight(&mut self, name: &str, rows: usize, cols: usize, k: usize) -> memplan_ir::ValueId {
        let v: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * k % 101) as f32 - 50.0) / 400.0)
            .collect();
        let t = memplan_ir::TensorData::from_f32(name, vec![rows as u64, cols as u64], &v);
        self.g.add_initializer(t)
    }

    fn ints(&mut self, name: &str, v: &[i64]) -> memplan_ir::ValueId {
        let t = memplan_ir::TensorData::from_i64(name, vec![v.len() as u64], v);
        self.g.add_initializer(t)
    }

    fn scalar(&mut self, name: &str, v: f32) -> memplan_ir::ValueId {
        let t = memplan_ir::TensorData::from_f32(name, vec![], &[v]);
        self.g.add_initializer(t)
    }

    /// Node `op` over `ins` with `outs` outputs.
    fn ops(
        &mut self,
        op: &str,
        ins: &[memplan_ir::ValueId],
        outs: usize,
        attrs: Vec<memplan_ir::graph::Attribute>,
    ) -> Vec<memplan_ir::ValueId> {
        let ins: Vec<_> = ins.iter().map(|&v| Some(v)).collect();
        let name = format!("{op}_{}", self.g.nodes.len());
        let outs: Vec<String> = (0..outs).map(|k| format!("{name}_out{k}")).collect();
        let outs: Vec<&str> = outs.iter().map(String::as_str).collect();
        self.g.add_node(name.clone(), op, &ins, &outs, attrs).1
    }

    /// Node `op` over `ins` with one output.
    fn op(
        &mut self,
        op: &str,
        ins: &[memplan_ir::ValueId],
        attrs: Vec<memplan_ir::graph::Attribute>,
    ) -> memplan_ir::ValueId {
        self.ops(op, ins, 1, attrs)[0]
    }

    /// The program with output `y` (opset 18), optimized to `lowest` at `dims`.
    fn lowest(mut self, y: memplan_ir::ValueId, dims: &[&str]) -> (Optimized, PathBuf) {
        use memplan_ir::graph::{Model, OpsetImport};
        self.g.outputs = vec![y];
        let model = Model {
            graph: self.g,
            opsets: vec![OpsetImport {
                domain: String::new(),
                version: 18,
            }],
            ..Model::default()
        };
        let path = self.tmp.join(format!("{}.onnx", self.tag));
        memplan_onnx::save(&model, &path, memplan_onnx::ExternalData::Inline).unwrap();
        let c = Optimized::of(&self.tmp, &path, self.tag, dims, |_| "lowest".into());
        (c, self.tmp)
    }
}

/// Attribute `name` of `value`.
fn attr(name: &str, value: memplan_ir::graph::AttrValue) -> memplan_ir::graph::Attribute {
    memplan_ir::graph::Attribute {
        name: name.into(),
        value,
        doc: String::new(),
    }
}

/// A reshape that changes the split axis's extent by a whole factor (ConvBERT's `[1, S, 64, 9]`
/// to `[2S, 32, 9]`, and back) passes it: rows `[lo, hi)` of `S` are rows `[2 lo, 2 hi)` of
/// `2S`. Here `x [1, S, 64]` is projected, reshaped to `[2S, 8, 4]`, softmaxed along the 8,
/// multiplied up to `[2S, 8, 16]` (4 MiB at S = 4096), reshaped back to `[1, S, 256]` and summed
/// over its last axis. No region split the `[2S, 8, 16]` product before (each reshape mixed `S`),
/// so it was made whole; now one region runs the whole program in chunks of `S`: the lowest plan
/// is under the product's size, measured = planned, outputs bit-identical.
#[test]
fn a_reshape_that_scales_the_split_axis_passes_it() {
    use memplan_ir::graph::AttrValue;
    let mut p = Program::new("scaled");
    let (w1, w2) = (p.weight("w1", 64, 64, 37), p.weight("w2", 4, 16, 37));
    let (to_rows, back) = (
        p.ints("to_rows", &[-1, 8, 4]),
        p.ints("back", &[1, -1, 256]),
    );
    let axes = p.ints("axes", &[2]);
    let a = p.op("MatMul", &[p.x, w1], vec![]);
    let r = p.op("Reshape", &[a, to_rows], vec![]);
    let s = p.op("Softmax", &[r], vec![attr("axis", AttrValue::Int(1))]);
    let e = p.op("MatMul", &[s, w2], vec![]);
    let b = p.op("Reshape", &[e, back], vec![]);
    let y = p.op("ReduceSum", &[b, axes], vec![]);
    let dims = ["--dim", "S=4096"];
    let (c, tmp) = p.lowest(y, &dims);
    let product = 2 * 4096 * 8 * 16 * 4;
    let planned = c.run_exact(&dims);
    assert!(
        planned < product,
        "planned {planned} B, not under the [2S, 8, 16] product's {product} B"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Local attention over a band of blocks, as LongT5 writes it: keys and values `[1, S, 64]` cut
/// into blocks of 16 (`[1, S/16, 16, 64]`), padded by one block of zeros on each side and cut at
/// block offsets 0, 1 and 2, the three cuts concatenated along the rows: each query block attends
/// to its own block and its two neighbours (`[1, S/16, 48, 64]`). A pad's flow mixes the axis it
/// pads, so the padded keys and values were made whole (1 MiB each at S = 4096), beside the
/// input and the keys and values themselves: lowest plan 4.06 MiB. Each cut is now a gather of the
/// blocks' positions (masked where it reads the pad), sliced per chunk, so one region runs the
/// attention in chunks of query blocks from the keys and values: the input, the keys and the
/// values are whole at the peak, and chunks (3.12 MiB); measured = planned, bit-identical.
#[test]
fn a_band_of_padded_blocks_chunks_along_the_blocks() {
    use memplan_ir::graph::AttrValue;
    let mut p = Program::new("band");
    let (wq, wk, wv) = (
        p.weight("wq", 64, 64, 37),
        p.weight("wk", 64, 64, 53),
        p.weight("wv", 64, 64, 71),
    );
    let (blocks, back) = (
        p.ints("blocks", &[1, -1, 16, 64]),
        p.ints("back", &[1, -1, 64]),
    );
    let (pads, axes) = (
        p.ints("pads", &[0, 1, 0, 0, 0, 1, 0, 0]),
        p.ints("axes", &[2]),
    );
    let (zero, one) = (p.scalar("zero", 0.0), p.ints("one", &[1]));
    // Blocks [k, S/16 + k) of the S/16 + 2, the end counted from the last.
    let cut: Vec<_> = (0..3i64)
        .map(|k| {
            let end = if k == 2 { i64::MAX } else { k - 2 };
            (
                p.ints(&format!("s{k}"), &[k]),
                p.ints(&format!("e{k}"), &[end]),
            )
        })
        .collect();
    let mut band = |w| {
        let x = p.x;
        let b = p.op("MatMul", &[x, w], vec![]);
        let b = p.op("Reshape", &[b, blocks], vec![]);
        let padded = p.op("Pad", &[b, pads, zero], vec![]);
        let cuts: Vec<_> = cut
            .iter()
            .map(|&(s, e)| p.op("Slice", &[padded, s, e, one], vec![]))
            .collect();
        p.op("Concat", &cuts, vec![attr("axis", AttrValue::Int(2))])
    };
    let (k, v) = (band(wk), band(wv));
    let q = p.op("MatMul", &[p.x, wq], vec![]);
    let q = p.op("Reshape", &[q, blocks], vec![]);
    let kt = p.op(
        "Transpose",
        &[k],
        vec![attr("perm", AttrValue::Ints(vec![0, 1, 3, 2]))],
    );
    let s = p.op("MatMul", &[q, kt], vec![]);
    let s = p.op("Softmax", &[s], vec![attr("axis", AttrValue::Int(-1))]);
    let o = p.op("MatMul", &[s, v], vec![]);
    let o = p.op("Reshape", &[o, back], vec![]);
    let y = p.op("ReduceSum", &[o, axes], vec![]);
    let dims = ["--dim", "S=4096"];
    let (c, tmp) = p.lowest(y, &dims);
    let whole = 4096 * 64 * 4;
    let planned = c.run_exact(&dims);
    assert!(
        2 * planned < 7 * whole,
        "planned {planned} B, not under 3.5 times a [1, S, 64] value ({whole} B)"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A fused projection split into query, keys and values, a rotary-style mix of the query's halves
/// (`q * a + cat(-q2, q1) * b`), attention over `S` keys, as ModernBERT's TorchScript file writes
/// it. The keys and values are read whole by every chunk of query rows; the query's mix is read
/// only by the attention region, and joins it (`chunk::with_producers`): made in the region's
/// chunks from the query's slices, bit-identical, measured = planned.
#[test]
fn a_query_made_only_for_the_attention_is_made_in_its_chunks() {
    use memplan_ir::graph::AttrValue;
    let mut p = Program::new("query");
    let w = p.weight("wqkv", 64, 192, 37);
    let (to, two, split) = (
        p.ints("to", &[1, -1, 3, 64]),
        p.ints("two", &[2]),
        p.ints("split", &[1, 1, 1]),
    );
    let (zero, half, end) = (
        p.ints("zero", &[0]),
        p.ints("half", &[32]),
        p.ints("end", &[64]),
    );
    let (a, b) = (p.scalar("a", 0.5), p.scalar("b", 0.25));
    let qkv = p.op("MatMul", &[p.x, w], vec![]);
    let qkv = p.op("Reshape", &[qkv, to], vec![]);
    let qkv = p.ops(
        "Split",
        &[qkv, split],
        3,
        vec![attr("axis", AttrValue::Int(2))],
    );
    let [q, k, v] = [0, 1, 2].map(|i| p.op("Squeeze", &[qkv[i], two], vec![]));
    let q1 = p.op("Slice", &[q, zero, half, two], vec![]);
    let q2 = p.op("Slice", &[q, half, end, two], vec![]);
    let n2 = p.op("Neg", &[q2], vec![]);
    let rot = p.op("Concat", &[n2, q1], vec![attr("axis", AttrValue::Int(2))]);
    let qa = p.op("Mul", &[q, a], vec![]);
    let rb = p.op("Mul", &[rot, b], vec![]);
    let qr = p.op("Add", &[qa, rb], vec![]);
    let kt = p.op(
        "Transpose",
        &[k],
        vec![attr("perm", AttrValue::Ints(vec![0, 2, 1]))],
    );
    let s = p.op("MatMul", &[qr, kt], vec![]);
    let s = p.op("Softmax", &[s], vec![attr("axis", AttrValue::Int(-1))]);
    let y = p.op("MatMul", &[s, v], vec![]);
    let dims = ["--dim", "S=2048"];
    let (c, tmp) = p.lowest(y, &dims);
    c.run_exact(&dims);
    // The region that ends at the attention's output starts at the query's own squeeze (before,
    // the attention was one region and the query's mix another, the halves made whole between).
    let steps = c.rep["chunking"]["steps"].as_array().unwrap();
    let attention = steps
        .iter()
        .find(|s| s["last"] == "MatMul_16")
        .unwrap_or_else(|| panic!("no region ends at the attention's output: {steps:?}"));
    assert_eq!(attention["first"], "Squeeze_3", "{attention}");
    let _ = std::fs::remove_dir_all(&tmp);
}
