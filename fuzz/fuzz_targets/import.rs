//! Fuzz target: arbitrary bytes through ONNX decode, import and shape inference must never panic.
//! Run with `cargo fuzz run import` from the repository root (needs cargo-fuzz and a nightly toolchain).
//! The same check runs for a bounded time in `cargo test` (`memplan_onnx::fuzzgen`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = memplan_onnx::fuzzgen::check_bytes(data);
});
