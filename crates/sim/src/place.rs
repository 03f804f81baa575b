//! Arena placement: every non-resident buffer gets an offset in one arena so that buffers live at the
//! same step never overlap.

use crate::timeline::Timeline;

/// Offsets are multiples of this many bytes, and blocks take their size rounded up to it.
pub const ALIGN: u64 = 64;

/// A block to place: live during steps `first..=last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub first: usize,
    pub last: usize,
    pub size: u64,
}

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

/// Steps per bucket of the time index that finds placed blocks overlapping a lifetime: the cost of
/// a placement is about the number of overlapping pairs, not the square of the block count.
const BUCKET: usize = 32;

/// Places `blocks` in `order`, best fit. Empty blocks get offset 0 and take no space.
pub fn best_fit(blocks: &[Block], order: &[usize]) -> Vec<u64> {
    best_fit_after(blocks, order, 0, vec![0; blocks.len()]).0
}

/// [`best_fit`] of `order[kept..]` over `order[..kept]`, already at their `offsets` (as best fit
/// placed them: the same prefix of an order places the same way). Also returns its work: the
/// placed blocks it looked at, each time it looked.
pub fn best_fit_after(
    blocks: &[Block],
    order: &[usize],
    kept: usize,
    mut offsets: Vec<u64>,
) -> (Vec<u64>, usize) {
    let mut work = 0;
    let steps = blocks.iter().map(|b| b.last + 1).max().unwrap_or(0);
    let nb = steps.div_ceil(BUCKET).max(1);
    let mut buckets: Vec<Vec<u32>> = vec![Vec::new(); nb];
    let mut stamp: Vec<u32> = vec![0; blocks.len()];
    let mut busy: Vec<(u64, u64)> = Vec::new();
    for (round, &i) in order.iter().enumerate() {
        let b = blocks[i];
        let need = align(b.size);
        if need == 0 {
            continue;
        }
        if round < kept {
            for bucket in &mut buckets[b.first / BUCKET..=b.last / BUCKET] {
                bucket.push(i as u32);
            }
            continue;
        }
        let mark = round as u32 + 1;
        busy.clear();
        for bucket in &buckets[b.first / BUCKET..=b.last / BUCKET] {
            work += bucket.len();
            for &j in bucket {
                let j = j as usize;
                if stamp[j] == mark {
                    continue;
                }
                stamp[j] = mark;
                let c = blocks[j];
                if c.first <= b.last && b.first <= c.last {
                    busy.push((offsets[j], offsets[j] + align(c.size)));
                }
            }
        }
        busy.sort_unstable();
        let mut best: Option<(u64, u64)> = None; // (gap, offset)
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
        offsets[i] = best.map(|(_, o)| o).unwrap_or(cursor);
        for bucket in &mut buckets[b.first / BUCKET..=b.last / BUCKET] {
            bucket.push(i as u32);
        }
    }
    (offsets, work)
}

/// Greedy by size, best fit (as TFLite's and XLA's heap simulators): largest buffers first (then
/// by lifetime, then index), [`best_fit`]. Every buffer takes its size rounded up to [`ALIGN`]
/// (the arena too); empty buffers take no space.
pub fn place_best_fit(t: &Timeline, sizes: &[u64]) -> Placement {
    let end = t.steps();
    let placed: Vec<usize> = (0..t.buffers.len())
        .filter(|&i| t.buffers[i].alloc.is_some())
        .collect();
    let blocks: Vec<Block> = placed
        .iter()
        .map(|&i| {
            let b = &t.buffers[i];
            let first = b.alloc.unwrap_or(0);
            Block {
                first,
                last: b.last.unwrap_or(end.saturating_sub(1)).max(first),
                size: sizes[i],
            }
        })
        .collect();
    let mut order: Vec<usize> = (0..blocks.len()).collect();
    order.sort_by_key(|&k| {
        let b = &blocks[k];
        (std::cmp::Reverse(b.size), b.first, b.last, k)
    });
    let at = best_fit(&blocks, &order);
    let mut offsets: Vec<Option<u64>> = vec![None; t.buffers.len()];
    let mut arena = 0u64;
    for (k, &i) in placed.iter().enumerate() {
        offsets[i] = Some(at[k]);
        if blocks[k].size > 0 {
            arena = arena.max(at[k] + align(blocks[k].size));
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
