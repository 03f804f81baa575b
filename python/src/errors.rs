//! `memplan.Error` and its subclasses: an error from the library becomes the exception of its kind,
//! its message the one line the CLI prints after `error: `.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

use memplan_cli::UnsupportedError;

create_exception!(
    memplan,
    Error,
    PyException,
    "Any error memplan reports: the message is the CLI's one line."
);
create_exception!(
    memplan,
    ModelError,
    Error,
    "The model cannot be read, is inconsistent, or has nodes memplan has no rule for."
);
create_exception!(
    memplan,
    UsageError,
    Error,
    "An argument the model or the call does not accept (a missing or unknown dim, a bad size)."
);
create_exception!(
    memplan,
    PlanError,
    Error,
    "Planning failed, or a plan is invalid for the model."
);
create_exception!(
    memplan,
    RunError,
    Error,
    "The executor failed on an input, a node or an output."
);

/// The kinds of error, by the library type that reports them.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Model,
    Usage,
    Plan,
    Run,
}

/// The kind of one error in a chain, when its type has one.
fn kind_of(e: &(dyn std::error::Error + 'static)) -> Option<Kind> {
    if e.is::<memplan_onnx::OnnxError>()
        || e.is::<memplan_ir::infer::InferError>()
        || e.is::<UnsupportedError>()
        || e.is::<memplan_sim::SimError>()
    {
        Some(Kind::Model)
    } else if e.is::<memplan_cli::UsageError>() {
        Some(Kind::Usage)
    } else if e.is::<memplan_plan::PlanError>()
        || e.is::<memplan_plan::FitError>()
        || e.is::<memplan_plan::OptimizeError>()
    {
        Some(Kind::Plan)
    } else if e.is::<memplan_exec::ExecError>() {
        Some(Kind::Run)
    } else {
        None
    }
}

/// The exception for a library error: the class of the first error in its chain (outermost first)
/// that has a kind, `memplan.Error` when none has; the message is the CLI's line.
pub fn to_py_err(e: anyhow::Error) -> PyErr {
    let msg = memplan_cli::one_line(&e);
    match e.chain().find_map(kind_of) {
        Some(Kind::Model) => ModelError::new_err(msg),
        Some(Kind::Usage) => UsageError::new_err(msg),
        Some(Kind::Plan) => PlanError::new_err(msg),
        Some(Kind::Run) => RunError::new_err(msg),
        None => Error::new_err(msg),
    }
}

/// A usage error from a message (arguments the bindings check themselves).
pub fn usage(msg: String) -> PyErr {
    UsageError::new_err(msg)
}

/// Adds the exception classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("ModelError", py.get_type::<ModelError>())?;
    m.add("UsageError", py.get_type::<UsageError>())?;
    m.add("PlanError", py.get_type::<PlanError>())?;
    m.add("RunError", py.get_type::<RunError>())?;
    Ok(())
}
