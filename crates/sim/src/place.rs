//! Arena placement: every non-resident buffer gets an offset in one arena so that buffers live at the
//! same step never overlap.

use crate::timeline::Timeline;

/// Offsets are multiples of this many bytes.
pub const ALIGN: u64 = 64;

/// The result of a placement at concrete sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Offset per buffer; `None` for resident buffers (weights, inputs), which live outside the arena.
    pub offsets: Vec<Option<u64>>,
    pub arena_bytes: u64,
}

fn align(x: u64) -> u64 {
    x.div_ceil(ALIGN) * ALIGN
}

/// Greedy by size, best fit (as TFLite's and XLA's heap simulators): largest buffers first, each
/// into the smallest gap among the buffers whose lifetimes overlap it, else on top.
pub fn place_best_fit(t: &Timeline, sizes: &[u64]) -> Placement {
    let end = t.steps();
    let span = |i: usize| -> Option<(usize, usize)> {
        let b = &t.buffers[i];
        b.alloc.map(|a| (a, b.last.unwrap_or(end)))
    };
    let mut order: Vec<usize> = (0..t.buffers.len()).filter(|&i| span(i).is_some()).collect();
    order.sort_by(|&a, &b| sizes[b].cmp(&sizes[a]).then(span(a).cmp(&span(b))).then(a.cmp(&b)));
    let mut offsets: Vec<Option<u64>> = vec![None; t.buffers.len()];
    let mut placed: Vec<usize> = Vec::new();
    let mut arena = 0u64;
    for i in order {
        let (a0, a1) = span(i).unwrap_or((0, 0));
        let need = align(sizes[i]);
        let mut busy: Vec<(u64, u64)> = placed
            .iter()
            .filter_map(|&j| {
                let (b0, b1) = span(j)?;
                let off = offsets[j]?;
                (b0 <= a1 && a0 <= b1 && sizes[j] > 0).then(|| (off, off + align(sizes[j])))
            })
            .collect();
        busy.sort();
        let mut best: Option<(u64, u64)> = None; // (gap size, offset)
        let mut cursor = 0u64;
        for &(s, e) in &busy {
            if s > cursor {
                let gap = s - cursor;
                if gap >= need && best.is_none_or(|(g, _)| gap < g) {
                    best = Some((gap, cursor));
                }
            }
            cursor = cursor.max(e);
        }
        let off = best.map(|(_, o)| o).unwrap_or(cursor);
        offsets[i] = Some(off);
        arena = arena.max(off + need);
        placed.push(i);
    }
    Placement { offsets, arena_bytes: arena }
}

/// Checks that no two buffers live at the same step overlap; returns the first offending pair.
pub fn check_placement(t: &Timeline, sizes: &[u64], p: &Placement) -> Result<(), (usize, usize)> {
    let end = t.steps();
    let mut items: Vec<(usize, usize, u64, u64, usize)> = Vec::new();
    for (i, b) in t.buffers.iter().enumerate() {
        if let (Some(a), Some(off)) = (b.alloc, p.offsets[i]) {
            if sizes[i] > 0 {
                items.push((a, b.last.unwrap_or(end), off, off + sizes[i], i));
            }
        }
    }
    for x in 0..items.len() {
        for y in x + 1..items.len() {
            let (a0, a1, o0, e0, i) = items[x];
            let (b0, b1, p0, f0, j) = items[y];
            if a0 <= b1 && b0 <= a1 && o0 < f0 && p0 < e0 {
                return Err((i, j));
            }
        }
    }
    Ok(())
}
