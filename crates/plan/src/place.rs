//! Arena placement behind a small trait: every block (a buffer, or an in-place chain of buffers) gets
//! an offset so that blocks live at the same step never overlap. The strategies differ only in the
//! order they place blocks in; each block goes into the smallest gap among the already placed blocks
//! whose lifetimes overlap it (best fit), else on top.

/// Offsets are multiples of this many bytes, and blocks take their size rounded up to it.
pub const ALIGN: u64 = 64;

/// A block to place: live during steps `first..=last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub first: usize,
    pub last: usize,
    pub size: u64,
}

/// A placement strategy.
pub trait Placer {
    fn name(&self) -> &'static str;
    /// One offset per block, each a multiple of [`ALIGN`].
    fn place(&self, blocks: &[Block]) -> Vec<u64>;
}

/// Largest blocks first (TFLite's and XLA's greedy-by-size).
#[derive(Clone, Copy, Debug)]
pub struct BySize;

/// In order of first use, as an allocator would see them, but best fit over whole lifetimes.
#[derive(Clone, Copy, Debug)]
pub struct ByFirstUse;

/// Longest-lived blocks first, so long lifetimes settle at the bottom.
#[derive(Clone, Copy, Debug)]
pub struct ByLifetime;

impl Placer for BySize {
    fn name(&self) -> &'static str {
        "best fit by size"
    }
    fn place(&self, blocks: &[Block]) -> Vec<u64> {
        let mut order: Vec<usize> = (0..blocks.len()).collect();
        order.sort_by_key(|&i| {
            let b = &blocks[i];
            (std::cmp::Reverse(b.size), b.first, b.last, i)
        });
        best_fit(blocks, &order)
    }
}

impl Placer for ByFirstUse {
    fn name(&self) -> &'static str {
        "best fit by first use"
    }
    fn place(&self, blocks: &[Block]) -> Vec<u64> {
        let mut order: Vec<usize> = (0..blocks.len()).collect();
        order.sort_by_key(|&i| {
            let b = &blocks[i];
            (b.first, std::cmp::Reverse(b.size), i)
        });
        best_fit(blocks, &order)
    }
}

impl Placer for ByLifetime {
    fn name(&self) -> &'static str {
        "best fit by lifetime"
    }
    fn place(&self, blocks: &[Block]) -> Vec<u64> {
        let mut order: Vec<usize> = (0..blocks.len()).collect();
        order.sort_by_key(|&i| {
            let b = &blocks[i];
            (
                std::cmp::Reverse(b.last - b.first),
                std::cmp::Reverse(b.size),
                i,
            )
        });
        best_fit(blocks, &order)
    }
}

/// Every strategy, in the order ties are broken.
pub fn all() -> [&'static dyn Placer; 3] {
    [&BySize, &ByFirstUse, &ByLifetime]
}

fn align(x: u64) -> u64 {
    x.div_ceil(ALIGN) * ALIGN
}

/// Steps per bucket of the time index that finds placed blocks overlapping a lifetime.
const BUCKET: usize = 32;

/// Places `blocks` in `order`, best fit. Empty blocks get offset 0 and take no space.
pub fn best_fit(blocks: &[Block], order: &[usize]) -> Vec<u64> {
    let steps = blocks.iter().map(|b| b.last + 1).max().unwrap_or(0);
    let nb = steps.div_ceil(BUCKET).max(1);
    let mut buckets: Vec<Vec<u32>> = vec![Vec::new(); nb];
    let mut stamp: Vec<u32> = vec![0; blocks.len()];
    let mut offsets = vec![0u64; blocks.len()];
    let mut busy: Vec<(u64, u64)> = Vec::new();
    for (round, &i) in order.iter().enumerate() {
        let b = blocks[i];
        let need = align(b.size);
        if need == 0 {
            continue;
        }
        let mark = round as u32 + 1;
        busy.clear();
        for bucket in &buckets[b.first / BUCKET..=b.last / BUCKET] {
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
    offsets
}

/// The arena a placement needs: the highest block end (exact sizes, not rounded).
pub fn arena(blocks: &[Block], offsets: &[u64]) -> u64 {
    blocks
        .iter()
        .zip(offsets)
        .filter(|(b, _)| b.size > 0)
        .map(|(b, &o)| o + b.size)
        .max()
        .unwrap_or(0)
}

/// The most bytes live at any step: no placement can use a smaller arena.
pub fn lower_bound(blocks: &[Block]) -> u64 {
    live_peak(blocks).map_or(0, |(bytes, _)| bytes)
}

/// The most bytes live at once and the first step where they are (`None` without blocks).
pub fn live_peak(blocks: &[Block]) -> Option<(u64, usize)> {
    let steps = blocks.iter().map(|b| b.last + 1).max()?;
    let mut diff = vec![0i128; steps + 1];
    for b in blocks {
        diff[b.first] += b.size as i128;
        diff[b.last + 1] -= b.size as i128;
    }
    let (mut live, mut best) = (0i128, (0i128, 0usize));
    for (s, d) in diff.iter().take(steps).enumerate() {
        live += d;
        if live > best.0 {
            best = (live, s);
        }
    }
    Some((best.0 as u64, best.1))
}

/// What [`best`] found: each placer's arena, and the smallest one's offsets.
pub struct Placement {
    pub arena: u64,
    pub offsets: Vec<u64>,
    pub placer: &'static str,
    /// Every placer tried, with its arena, in [`all`] order.
    pub tried: Vec<(&'static str, u64)>,
}

/// Places `blocks` with every placer and keeps the smallest arena (the first on ties). A placer
/// whose arena is the [`lower_bound`] ends the search: no later one can be smaller, so the
/// placement is the same as with every placer tried, and `tried` lists the placers that ran.
pub fn best(blocks: &[Block]) -> Placement {
    let lower = lower_bound(blocks);
    let mut out = Placement {
        arena: u64::MAX,
        offsets: Vec::new(),
        placer: "none",
        tried: Vec::new(),
    };
    for placer in all() {
        let off = placer.place(blocks);
        let a = arena(blocks, &off);
        out.tried.push((placer.name(), a));
        if a < out.arena {
            (out.arena, out.offsets, out.placer) = (a, off, placer.name());
        }
        if out.arena <= lower {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blk(first: usize, last: usize, size: u64) -> Block {
        Block { first, last, size }
    }

    /// The search ends at the first placer whose arena is the live-bytes lower bound, and keeps
    /// the smallest arena of all placers either way: on random block sets, some ending early and
    /// some trying every placer.
    #[test]
    fn the_search_ends_at_the_lower_bound_with_the_smallest_arena() {
        let (mut early, mut every) = (0, 0);
        let mut x: u64 = 1;
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        for _ in 0..200 {
            let n = 2 + next(10) as usize;
            let blocks: Vec<Block> = (0..n)
                .map(|_| {
                    let first = next(12) as usize;
                    blk(first, first + next(4) as usize, 64 * (1 + next(4)))
                })
                .collect();
            let p = best(&blocks);
            let smallest = all()
                .iter()
                .map(|pl| arena(&blocks, &pl.place(&blocks)))
                .min()
                .unwrap();
            assert_eq!(p.arena, smallest, "{blocks:?}");
            if p.tried.len() < all().len() {
                assert_eq!(p.arena, lower_bound(&blocks), "{blocks:?}");
                early += 1;
            } else {
                every += 1;
            }
        }
        assert!(
            early > 0 && every > 0,
            "{early} ended early, {every} tried every placer"
        );
    }

    #[test]
    fn disjoint_lifetimes_share_memory() {
        let b = [blk(0, 1, 100), blk(2, 3, 100), blk(1, 2, 64)];
        for p in all() {
            let off = p.place(&b);
            assert_eq!(off[0], off[1], "{}", p.name());
            assert_eq!(arena(&b, &off), 128 + 64, "{}", p.name());
        }
        assert_eq!(lower_bound(&b), 164);
    }

    #[test]
    fn best_fit_takes_the_smallest_gap() {
        // A 64-byte hole and a 192-byte hole open at step 2; the 64-byte block takes the first.
        let b = [
            blk(0, 1, 64),
            blk(0, 3, 64),
            blk(0, 1, 192),
            blk(0, 3, 64),
            blk(2, 3, 64),
        ];
        let off = best_fit(&b, &[0, 1, 2, 3, 4]);
        assert_eq!(off, vec![0, 64, 128, 320, 0]);
    }
}
