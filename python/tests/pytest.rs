//! Runs the Python package's tests (pytest, `python/tests/test_*.py`) against the extension this
//! build made, so `cargo test --workspace --release` covers the Python API too.
//!
//! The package is staged under the target directory: `python/memplan/*` plus the extension
//! (`lib_memplan.so` built by this workspace, as `_memplan.abi3.so`). The interpreter is
//! `$MEMPLAN_PYTHON`, else the repository's `.venv/bin/python` when it has the test requirements,
//! else a virtual environment this test makes once in `target/py-venv` from `python3` and
//! `python/requirements-test.txt`. The CLI the tests compare with is this build's `memplan`
//! binary. Both the extension and the binary are brought up to date here first.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>`: the directory above this test binary's `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// True when `python` imports what the tests need.
fn has_requirements(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import numpy, onnx, onnxruntime, pytest"])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run_checked(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The interpreter to test with (see the module comment).
fn python(root: &Path, profile: &Path) -> PathBuf {
    if let Some(p) = std::env::var_os("MEMPLAN_PYTHON") {
        return PathBuf::from(p);
    }
    let dev = root.join(".venv/bin/python");
    if has_requirements(&dev) {
        return dev;
    }
    let venv = profile.parent().unwrap().join("py-venv");
    let py = venv.join("bin/python");
    if !has_requirements(&py) {
        run_checked(
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            "python3 -m venv",
        );
        run_checked(
            Command::new(&py)
                .args(["-m", "pip", "install", "--quiet", "-r"])
                .arg(root.join("python/requirements-test.txt")),
            "pip install -r python/requirements-test.txt",
        );
    }
    py
}

/// Copies the pure-Python package and the extension into `stage/memplan`.
fn stage(root: &Path, profile: &Path) -> PathBuf {
    let stage = profile.join("py-stage");
    let pkg = stage.join("memplan");
    let _ = std::fs::remove_dir_all(&pkg);
    std::fs::create_dir_all(&pkg).unwrap();
    for e in std::fs::read_dir(root.join("python/memplan")).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, pkg.join(p.file_name().unwrap())).unwrap();
        }
    }
    let ext = ["lib_memplan.so", "lib_memplan.dylib"]
        .iter()
        .map(|n| profile.join(n))
        .find(|p| p.exists())
        .expect("the extension lib_memplan.so is built with this test");
    std::fs::copy(ext, pkg.join("_memplan.abi3.so")).unwrap();
    stage
}

/// Brings this build's extension and `memplan` binary up to date: a test run builds neither (the
/// extension is a `cdylib`, which no test links).
fn build(root: &Path, profile: &Path) {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(root)
        .args(["build", "--quiet", "-p", "memplan-py", "-p", "memplan"]);
    if profile.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    run_checked(&mut cmd, "cargo build -p memplan-py -p memplan");
}

#[test]
fn python_package_tests() {
    let root = repo_root();
    let profile = profile_dir();
    build(&root, &profile);
    let stage = stage(&root, &profile);
    let bin = profile.join("memplan");
    let py = python(&root, &profile);
    let out = Command::new(&py)
        .current_dir(&root)
        .env("PYTHONPATH", &stage)
        .env("MEMPLAN_BIN", &bin)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "python/tests",
        ])
        .output()
        .expect("starting pytest");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "pytest failed:\n{text}");
}
