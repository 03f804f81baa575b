//! Fuzz target: a random graph built from the bytes is planned by every scheduler and by
//! `optimize`; the independent checker must accept every plan and the planner's peak model must
//! match the simulator. Run with `cargo fuzz run plan` from the repository root (needs cargo-fuzz
//! and a nightly toolchain). The same check runs bounded in `cargo test` (`memplan_plan::gen`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = memplan_plan::gen::check_bytes(data) {
        panic!("{e}");
    }
});
