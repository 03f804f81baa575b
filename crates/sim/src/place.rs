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

/// Steps per bucket of the time index used to find the placed buffers whose lifetimes overlap.
const BUCKET: usize = 32;

/// Greedy by size, best fit (as TFLite's and XLA's heap simulators): largest buffers first, each
/// into the smallest gap among the placed buffers whose lifetimes overlap it, else on top. Every
/// buffer takes its size rounded up to [`ALIGN`]; empty buffers take no space.
///
/// Overlapping buffers are found through a time index (buckets of [`BUCKET`] steps), so the cost is
/// about the number of overlapping pairs, not the square of the buffer count.
pub fn place_best_fit(t: &Timeline, sizes: &[u64]) -> Placement {
    let end = t.steps();
    let span = |i: usize| -> Option<(usize, usize)> {
        let b = &t.buffers[i];
        b.alloc
            .map(|a| (a, b.last.unwrap_or(end.saturating_sub(1)).max(a)))
    };
    let mut order: Vec<usize> = (0..t.buffers.len())
        .filter(|&i| span(i).is_some())
        .collect();
    order.sort_by(|&a, &b| {
        sizes[b]
            .cmp(&sizes[a])
            .then(span(a).cmp(&span(b)))
            .then(a.cmp(&b))
    });
    let mut offsets: Vec<Option<u64>> = vec![None; t.buffers.len()];
    let nb = end.div_ceil(BUCKET).max(1);
    let mut buckets: Vec<Vec<u32>> = vec![Vec::new(); nb];
    let mut stamp: Vec<u32> = vec![0; t.buffers.len()];
    let mut arena = 0u64;
    let mut busy: Vec<(u64, u64)> = Vec::new();
    for (round, &i) in order.iter().enumerate() {
        let (a0, a1) = span(i).unwrap_or((0, 0));
        let need = align(sizes[i]);
        if need == 0 {
            offsets[i] = Some(0);
            continue;
        }
        let mark = round as u32 + 1;
        busy.clear();
        for bucket in &buckets[a0 / BUCKET..=a1 / BUCKET] {
            for &j in bucket {
                let j = j as usize;
                if stamp[j] == mark {
                    continue;
                }
                stamp[j] = mark;
                let (b0, b1) = span(j).unwrap_or((0, 0));
                if b0 <= a1 && a0 <= b1 {
                    let off = offsets[j].unwrap_or(0);
                    busy.push((off, off + align(sizes[j])));
                }
            }
        }
        busy.sort_unstable();
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
        for bucket in &mut buckets[a0 / BUCKET..=a1 / BUCKET] {
            bucket.push(i as u32);
        }
    }
    Placement {
        offsets,
        arena_bytes: arena,
    }
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
    // Sweep by start step; only buffers still live can collide.
    items.sort();
    let mut active: Vec<(usize, usize, u64, u64, usize)> = Vec::new();
    for &(a0, a1, o0, e0, i) in &items {
        active.retain(|&(_, b1, ..)| b1 >= a0);
        for &(_, _, p0, f0, j) in &active {
            if o0 < f0 && p0 < e0 {
                return Err((j, i));
            }
        }
        active.push((a0, a1, o0, e0, i));
    }
    Ok(())
}
