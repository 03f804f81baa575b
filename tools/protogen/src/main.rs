//! Regenerates `crates/onnx/src/proto.rs` from the vendored proto2 `onnx.proto`
//! (onnx 1.23.2, IR version 14) with `protox` (pure-Rust parser, no `protoc`) and `prost-build`.
//!
//! Usage, from the repository root: `cargo run --manifest-path tools/protogen/Cargo.toml`.
//! An optional first argument overrides the output path.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out_path = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| here.join("../../crates/onnx/src/proto.rs"));

    let fds = protox::compile([here.join("onnx.proto")], [&here])?;

    let tmp = tempdir(&here)?;
    let mut config = prost_build::Config::new();
    // `bytes` fields become `bytes::Bytes`, so raw tensor data decoded from a
    // `Bytes` buffer (an mmap) are slices of that buffer, not copies.
    config.bytes(["."]);
    config.out_dir(&tmp);
    config.compile_fds(fds)?;

    let generated = std::fs::read_to_string(tmp.join("onnx.rs"))?;
    std::fs::remove_dir_all(&tmp)?;
    let header = "\
//! Generated prost types for the ONNX protobuf schema (proto2 `onnx.proto` of onnx 1.23.2, IR version 14).
//!
//! Do not edit by hand. Regenerate from the repository root with
//! `cargo run --manifest-path tools/protogen/Cargo.toml` (source: `tools/protogen/onnx.proto`).
//! proto2 field presence is kept: optional scalars are `Option<T>`; `bytes` fields are `bytes::Bytes`.

#![allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]

";
    std::fs::write(&out_path, format!("{header}{generated}"))?;
    eprintln!("wrote {}", out_path.display());
    Ok(())
}

fn tempdir(base: &std::path::Path) -> std::io::Result<PathBuf> {
    let dir = base.join("target").join("protogen-out");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
