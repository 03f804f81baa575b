//! The library behind the `memplan` command line and the Python package: one entry per subcommand
//! that computes its report as a value (`estimate::estimate_model`, `optimize::optimize_model`,
//! `run::run_model`), and the terminal rendering the binary prints.
//!
//! The binary (`main.rs`) parses arguments and prints; the Python extension (`python/`) calls the
//! same entries, so `memplan.estimate(...)` and `memplan estimate --json` are one computation.

pub mod commands;
pub mod estimate;
pub mod grad;
pub mod npz;
pub mod optimize;
pub mod plot;
pub mod run;
pub mod sysmem;
pub mod table;
pub mod units;

/// An error as the one line the CLI prints after `error: `: the chain of contexts, outermost first,
/// joined by `: `, with control characters (a newline inside a name from a malformed model) escaped.
pub fn one_line(e: &anyhow::Error) -> String {
    let mut msg: Vec<String> = Vec::new();
    for c in e.chain() {
        let m = memplan_ir::graph::printable(&c.to_string()).into_owned();
        // An error whose message already ends with its source's (an I/O error's) says it once.
        if !msg.last().is_some_and(|p| p.ends_with(&m)) {
            msg.push(m);
        }
    }
    msg.join(": ")
}

/// An argument the model or the command does not accept (a missing or unknown dim, a malformed
/// sweep, an option that needs another). Its message is the whole line.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A model memplan reads but cannot estimate, plan or run (nodes without a shape rule). Its
/// message is the whole line.
#[derive(Debug)]
pub struct UnsupportedError(pub String);

impl std::fmt::Display for UnsupportedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UnsupportedError {}

/// Returns early with a [`UsageError`] formatted like `format!`.
#[macro_export]
macro_rules! usage_bail {
    ($($t:tt)*) => {
        return Err(anyhow::Error::new($crate::UsageError(format!($($t)*))))
    };
}
