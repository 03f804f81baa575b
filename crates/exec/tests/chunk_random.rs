//! Chunked random graphs run bit-identically: the property of `support/fitted.rs` (a random DAG
//! fitted to half its peak by `fit_budget`, run from its plan, same output bits as the original,
//! measured peak = planned) over a fixed set of seeds, some of them chunked, some narrowed, and
//! then offloaded to a smaller device budget.

#[path = "support/fitted.rs"]
mod fitted;

use memplan_plan::gen::SplitMix;

/// Random graphs checked.
const GRAPHS: u64 = 120;

#[test]
fn fitted_random_graphs_are_bit_identical() {
    let (mut chunked, mut narrowed, mut offloaded, mut folded, mut tails) = (0, 0, 0, 0, 0);
    for seed in 0..GRAPHS {
        match fitted::check_fitted(&mut SplitMix(seed), 40) {
            Ok(l) => {
                chunked += usize::from(l.chunked);
                narrowed += usize::from(l.narrowed);
                offloaded += usize::from(l.offloaded);
                folded += usize::from(l.folded);
                tails += usize::from(l.folded_tail);
            }
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
    eprintln!(
        "{GRAPHS} random graphs fitted to half their peak, {chunked} of them chunked, {narrowed} narrowed, {offloaded} offloaded, {folded} folded into a Scan ({tails} with a shorter last chunk left unrolled)"
    );
    assert!(
        tails >= 3,
        "only {tails} graphs folded with a shorter last chunk: the property is barely exercised"
    );
    assert!(
        folded >= GRAPHS as usize / 20,
        "only {folded} of {GRAPHS} graphs were folded: the property is barely exercised"
    );
    assert!(
        chunked >= GRAPHS as usize / 10,
        "only {chunked} of {GRAPHS} graphs were chunked: the property is barely exercised"
    );
    assert!(
        narrowed >= 3,
        "only {narrowed} of {GRAPHS} graphs were narrowed: the property is barely exercised"
    );
    assert!(
        offloaded >= GRAPHS as usize / 10,
        "only {offloaded} of {GRAPHS} graphs were offloaded: the property is barely exercised"
    );
}
