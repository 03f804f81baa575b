//! Shared by the corpus tests: the repository root, running `memplan` for its JSON, and the third
//! size every corpus model is run at (besides the two sizes with onnxruntime fixtures).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn memplan(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(args)
        .output()
        .unwrap()
}

/// `memplan ARGS` must succeed; its stdout parsed as JSON.
pub fn json_of(args: &[&str]) -> serde_json::Value {
    let out = memplan(args);
    assert!(
        out.status.success(),
        "memplan {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The third size of each corpus model (by base name): odd extents between or beside the fixtures'
/// two sizes, and batch 3 where the fixtures have 1 and 2, so that extents of 1 and of more than 1
/// are both exercised. Inputs are random (`memplan run --random`) unless
/// `tests/fixtures/third_size/<base>.npz` exists (models whose inputs must be consistent; made by
/// `tools/third_size_inputs.py`).
pub const THIRD_SIZE: &[(&str, &[(&str, i64)])] = &[
    ("bert_encoder", &[("B", 3), ("S", 77)]),
    ("gpt2_decoder", &[("B", 3), ("S", 77)]),
    ("logspace_matrix_chain", &[("n", 6), ("t", 37)]),
    ("of3_attn_pair_bias", &[("N", 57)]),
    ("of3_pair_transition", &[("N", 57)]),
    ("of3_pairformer_block", &[("N", 57)]),
    (
        "of3_token_frame_atoms_gather",
        &[("N_atom", 297), ("N_token", 81)],
    ),
    ("of3_tri_att_start", &[("N", 57)]),
    ("of3_tri_mul_out", &[("N", 57)]),
];

/// `--dim=K=V` flags of a model's third size.
pub fn third_size_flags(base: &str) -> Vec<String> {
    THIRD_SIZE
        .iter()
        .find(|(b, _)| *b == base)
        .unwrap_or_else(|| panic!("{base} has no third size in THIRD_SIZE"))
        .1
        .iter()
        .map(|(k, v)| format!("--dim={k}={v}"))
        .collect()
}

/// `memplan run` arguments giving a model's third-size inputs (`seed` for random ones).
pub fn third_size_inputs(base: &str, seed: u64) -> Vec<String> {
    let npz = repo().join(format!("tests/fixtures/third_size/{base}.npz"));
    if npz.exists() {
        vec!["--inputs-npz".into(), npz.display().to_string()]
    } else {
        vec!["--random".into(), "--seed".into(), seed.to_string()]
    }
}
