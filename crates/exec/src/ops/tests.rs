//! The op table and the implementations agree: every `OpDef` has an implementation in the
//! same-named family here, and every implementation has an `OpDef` there, up to the listed
//! exceptions.

use std::collections::BTreeMap;

/// Ops with a shape/memory rule in `ir` but no kernel entry: control flow, which the interpreter
/// runs with its bodies, and ops not implemented yet (`run` reports them unsupported).
const RULE_ONLY: &[(&str, &str)] = &[
    (
        "If",
        "run by the interpreter with its branches (ops::control::run)",
    ),
    (
        "Loop",
        "run by the interpreter with its body (ops::control::run)",
    ),
    (
        "Scan",
        "run by the interpreter with its body (ops::control::run)",
    ),
];

/// Ops with a kernel but no `OpDef`: inference stops at them ("no rule").
const KERNEL_ONLY: &[(&str, &str)] = &[];

#[test]
fn every_op_def_has_an_implementation_in_its_family_and_back() {
    let ir: BTreeMap<&str, &[memplan_ir::ops::OpDef]> =
        memplan_ir::ops::FAMILIES.iter().copied().collect();
    let exec: BTreeMap<&str, &[(&str, super::OpFn)]> = super::FAMILIES.iter().copied().collect();
    assert_eq!(
        ir.keys().collect::<Vec<_>>(),
        exec.keys().collect::<Vec<_>>(),
        "family names differ between ir and exec"
    );
    let excepted = |list: &[(&str, &str)], op: &str| list.iter().any(|(o, _)| *o == op);
    let mut problems = Vec::new();
    for (fam, defs) in &ir {
        for d in *defs {
            let here = exec[fam].iter().any(|(o, _)| *o == d.op);
            if here == excepted(RULE_ONLY, d.op) {
                problems.push(if here {
                    format!("{} is implemented now: remove it from RULE_ONLY", d.op)
                } else {
                    format!(
                        "{} (ir::ops::{fam}) has no implementation in exec::ops::{fam}",
                        d.op
                    )
                });
            }
        }
    }
    for (fam, ops) in &exec {
        for (op, _) in *ops {
            let here = ir[fam].iter().any(|d| d.op == *op);
            if here == excepted(KERNEL_ONLY, op) {
                problems.push(if here {
                    format!("{op} has an OpDef now: remove it from KERNEL_ONLY")
                } else {
                    format!("{op} (exec::ops::{fam}) has no OpDef in ir::ops::{fam}")
                });
            }
        }
    }
    for (op, _) in RULE_ONLY.iter().chain(KERNEL_ONLY) {
        if memplan_ir::ops::lookup_op(op).is_none()
            && super::implemented().binary_search(op).is_err()
        {
            problems.push(format!("{op} is listed as an exception but is nowhere"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
