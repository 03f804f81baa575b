//! Fuzz target: the bytes as a model (mutated structurally half of the time) through import,
//! inference and, where it has facts and a small peak, a run on zero inputs of its declared shapes:
//! never a panic, every error one line. Run with `cargo fuzz run run` from the repository root (needs
//! cargo-fuzz and a nightly toolchain). The same check runs bounded in `cargo test` over mutations of
//! every ONNX node conformance model (`crates/cli/tests/node_mutations.rs`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use memplan_onnx::fuzzgen::{mutate_model, Rng};
use prost::Message;

#[path = "../../crates/cli/tests/common/run_check.rs"]
mod run_check;

fuzz_target!(|data: &[u8]| {
    let mut bytes = data.to_vec();
    if let (Some(&seed), Ok(mut m)) = (data.first(), memplan_onnx::proto::ModelProto::decode(data)) {
        if seed % 2 == 0 {
            mutate_model(&mut Rng::new(u64::from(seed)), &mut m);
            bytes = m.encode_to_vec();
        }
    }
    if let Err(msg) = run_check::check_run(&bytes, Default::default()) {
        assert!(!msg.trim().is_empty() && !msg.contains('\n'), "{msg:?}");
    }
});
