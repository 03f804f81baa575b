//! Fuzz target: a random graph built from the bytes is planned by every scheduler and by
//! `optimize`; the independent checker must accept every plan and the planner's peak model must
//! match the simulator. The same graph is then fitted to half its peak by `fit_budget` (chunked and
//! planned) and run from its plan: same output bits as the original, measured peak = planned. Run
//! with `cargo fuzz run plan` from the repository root (needs cargo-fuzz and a nightly toolchain).
//! The same checks run bounded in `cargo test` (`memplan_plan::gen`, `crates/exec/tests/chunk_random.rs`).

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/exec/tests/support/fitted.rs"]
mod fitted;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = memplan_plan::gen::check_bytes(data) {
        panic!("{e}");
    }
    if let Err(e) = fitted::check_fitted(&mut memplan_plan::gen::ByteSource::new(data), 48) {
        panic!("{e}");
    }
});
