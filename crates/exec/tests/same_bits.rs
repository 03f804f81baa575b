//! The check every chunking test ends with: a chunked model runs plain and from its plan to the
//! original's bits, and the planned run's measured peak is the planned one.

use std::collections::BTreeMap;

use memplan_exec::{run, run_planned, RunOptions, Tensor};
use memplan_ir::graph::Model;

/// `chunked` at `dims` runs plain and from its plan (optimized without a budget) to `want`'s
/// output 0 bit for bit, and the planned run measures its planned peak. `inputs` makes the inputs
/// afresh for each run; `what` names the case in a failure.
pub fn runs_to_the_bits_of(
    chunked: &Model,
    dims: &BTreeMap<String, i64>,
    inputs: impl Fn() -> BTreeMap<String, Tensor>,
    want: &[u8],
    what: &str,
) {
    let g = &chunked.graph;
    let f = memplan_ir::infer_model_for(chunked, dims).unwrap();
    let plain = run(g, &f, inputs(), &RunOptions::default()).unwrap();
    let out = memplan_plan::optimize(g, &f, dims, &Default::default()).unwrap();
    let planned = run_planned(g, &f, inputs(), &out.plan, 18).unwrap();
    for got in [&plain, &planned] {
        assert_eq!(got.outputs[0].1.bytes(), want, "{what}");
    }
    assert_eq!(planned.peak_bytes, out.report.peak_bytes_after, "{what}");
}
