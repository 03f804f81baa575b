//! Arena placement behind a small trait: every block (a buffer, or an in-place chain of buffers) gets
//! an offset so that blocks live at the same step never overlap. The strategies differ only in the
//! order they place blocks in; each block goes into the smallest gap among the already placed blocks
//! whose lifetimes overlap it (best fit), else on top. The best of them is then improved by a local
//! search over its order ([`improve`]): a block near the top of the arena is placed earlier.

use memplan_sim::place::best_fit_after;
pub use memplan_sim::place::{best_fit, Block, ALIGN};

/// A placement strategy: the order its blocks are placed in, best fit.
pub trait Placer {
    fn name(&self) -> &'static str;
    /// Every block index once.
    fn order(&self, blocks: &[Block]) -> Vec<usize>;
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

/// Block indices sorted by `key`.
fn sorted_by<K: Ord>(blocks: &[Block], key: impl Fn(usize, &Block) -> K) -> Vec<usize> {
    let mut order: Vec<usize> = (0..blocks.len()).collect();
    order.sort_by_key(|&i| key(i, &blocks[i]));
    order
}

impl Placer for BySize {
    fn name(&self) -> &'static str {
        "best fit by size"
    }
    fn order(&self, blocks: &[Block]) -> Vec<usize> {
        sorted_by(blocks, |i, b| {
            (std::cmp::Reverse(b.size), b.first, b.last, i)
        })
    }
}

impl Placer for ByFirstUse {
    fn name(&self) -> &'static str {
        "best fit by first use"
    }
    fn order(&self, blocks: &[Block]) -> Vec<usize> {
        sorted_by(blocks, |i, b| (b.first, std::cmp::Reverse(b.size), i))
    }
}

impl Placer for ByLifetime {
    fn name(&self) -> &'static str {
        "best fit by lifetime"
    }
    fn order(&self, blocks: &[Block]) -> Vec<usize> {
        sorted_by(blocks, |i, b| {
            (
                std::cmp::Reverse(b.last - b.first),
                std::cmp::Reverse(b.size),
                i,
            )
        })
    }
}

/// Every strategy, in the order ties are broken.
pub fn all() -> [&'static dyn Placer; 3] {
    [&BySize, &ByFirstUse, &ByLifetime]
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
    /// Every placer tried, with its arena, in [`all`] order, then the local search ([`MOVED`]) when
    /// it ran.
    pub tried: Vec<(&'static str, u64)>,
}

/// The name of [`improve`]'s placement in [`Placement`].
pub const MOVED: &str = "best fit, blocks near the top placed earlier";

/// The least gap above the [`lower_bound`] that [`best`] searches to close, with 1/128 of the arena.
pub const MIN_GAP: u64 = 64 << 10;

/// Places `blocks` with every placer and keeps the smallest arena (the first on ties), then
/// improves it with [`improve`] where it is above the [`lower_bound`] by at least 1/128 and
/// [`MIN_GAP`] (a smaller gap is mostly the sizes rounded to [`ALIGN`], or not worth the work).
/// Reaching the bound ends the search: nothing can be smaller, so the placement is the same as
/// with every step taken, and `tried` lists what ran.
pub fn best(blocks: &[Block]) -> Placement {
    let lower = lower_bound(blocks);
    let mut out = Placement {
        arena: u64::MAX,
        offsets: Vec::new(),
        placer: "none",
        tried: Vec::new(),
    };
    let mut order = Vec::new();
    for placer in all() {
        let o = placer.order(blocks);
        let off = best_fit(blocks, &o);
        let a = arena(blocks, &off);
        out.tried.push((placer.name(), a));
        if a < out.arena {
            (out.arena, out.offsets, out.placer, order) = (a, off, placer.name(), o);
        }
        if out.arena <= lower {
            return out;
        }
    }
    if out.arena - lower < (out.arena / 128).max(MIN_GAP) {
        return out;
    }
    let (off, a) = improve(blocks, order, out.offsets.clone(), lower, MOVE_WORK);
    out.tried.push((MOVED, a));
    if a < out.arena {
        (out.arena, out.offsets, out.placer) = (a, off, MOVED);
    }
    out
}

/// The local search's work bound, in placed blocks looked at while placing (a try places the blocks
/// from the moved one's new position on): the same blocks give the same placement on any machine.
pub const MOVE_WORK: usize = 1 << 24;

/// At most this many tries, however few the blocks.
const MOVE_TRIES: u64 = 1024;

/// A local search over the order of a best-fit placement (`order`, placed at `offsets`): each try
/// takes a block whose top is within half its size of the arena's, places it at an earlier position
/// of the order (both drawn by a counter-based hash, so the search is the same on every run), and
/// keeps the new order when its arena is no larger (equal arenas let the search cross plateaus).
/// Ends at the `lower` bound, after [`MOVE_TRIES`] tries, or once the tries' work (see
/// [`best_fit_after`]) reaches `work`. Returns the offsets and their arena.
pub fn improve(
    blocks: &[Block],
    mut order: Vec<usize>,
    mut offsets: Vec<u64>,
    lower: u64,
    work: usize,
) -> (Vec<u64>, u64) {
    let mut best = arena(blocks, &offsets);
    let mut spent = 0;
    for k in 0..MOVE_TRIES {
        if best <= lower || spent >= work {
            break;
        }
        let near: Vec<usize> = (1..order.len())
            .filter(|&p| {
                let b = blocks[order[p]];
                b.size > 0 && offsets[order[p]] + b.size + b.size / 2 >= best
            })
            .collect();
        if near.is_empty() {
            break;
        }
        let from = near[draw(2 * k, near.len())];
        let to = draw(2 * k + 1, from);
        let mut o = order.clone();
        let moved = o.remove(from);
        o.insert(to, moved);
        let (off, w) = best_fit_after(blocks, &o, to, offsets.clone());
        spent += w;
        let a = arena(blocks, &off);
        if a <= best {
            (order, offsets, best) = (o, off, a);
        }
    }
    (offsets, best)
}

/// The `k`-th draw below `n` (splitmix64 of the counter).
fn draw(k: u64, n: usize) -> usize {
    let mut z = k.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z % n as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blk(first: usize, last: usize, size: u64) -> Block {
        Block { first, last, size }
    }

    /// The search ends at the first placer whose arena is the live-bytes lower bound; otherwise it
    /// tries every placer, then the local search where the gap is worth it, and keeps the smallest
    /// arena: on random block sets, some ending early, some searched and some not.
    #[test]
    fn the_search_ends_at_the_lower_bound_with_the_smallest_arena() {
        let (mut early, mut searched, mut left) = (0, 0, 0);
        for unit in [64, 4 << 10, 1 << 20] {
            for blocks in random_sets(100, 10, 12, unit) {
                let p = best(&blocks);
                let placers =
                    all().map(|pl| arena(&blocks, &best_fit(&blocks, &pl.order(&blocks))));
                let smallest = placers.iter().copied().min().unwrap();
                let lower = lower_bound(&blocks);
                assert!(!overlapping(&blocks, &p.offsets), "{blocks:?}");
                assert_eq!(p.arena, arena(&blocks, &p.offsets));
                if p.tried.len() < all().len() {
                    assert_eq!(p.arena, lower, "{blocks:?}");
                    assert_eq!(p.arena, smallest, "{blocks:?}");
                    early += 1;
                } else if p.tried.len() == all().len() {
                    assert_eq!(p.arena, smallest, "{blocks:?}");
                    assert!(smallest - lower < (smallest / 128).max(MIN_GAP));
                    left += 1;
                } else {
                    assert_eq!(p.tried.last().map(|t| t.0), Some(MOVED));
                    let a = p.tried.last().map_or(u64::MAX, |t| t.1);
                    assert_eq!(p.arena, a.min(smallest), "{blocks:?}");
                    searched += 1;
                }
            }
        }
        assert!(
            early > 0 && searched > 0 && left > 0,
            "{early} ended early, {searched} searched, {left} left above the bound"
        );
    }

    /// Random block sets from a seeded generator: up to `n` blocks over `steps` steps, sizes
    /// multiples of `unit`.
    fn random_sets(count: usize, n: u64, steps: u64, unit: u64) -> Vec<Vec<Block>> {
        (0..count as u64)
            .map(|s| {
                let blocks_in = 2 + draw(1_000_000 + s, n as usize);
                (0..blocks_in as u64)
                    .map(|i| {
                        let k = 4 * (s * 1000 + i);
                        let first = draw(k, steps as usize);
                        let len = draw(k + 1, 1 + steps as usize / 3);
                        let size = unit
                            * (1 + draw(k + 2, 8) as u64)
                            * (1 + 7 * (draw(k + 3, 4) == 0) as u64);
                        blk(first, first + len, size)
                    })
                    .collect()
            })
            .collect()
    }

    /// Whether two blocks live at the same step share bytes.
    fn overlapping(blocks: &[Block], offsets: &[u64]) -> bool {
        (0..blocks.len()).any(|i| {
            (0..i).any(|j| {
                let (a, b) = (blocks[i], blocks[j]);
                a.size > 0
                    && b.size > 0
                    && a.first <= b.last
                    && b.first <= a.last
                    && offsets[i] < offsets[j] + b.size
                    && offsets[j] < offsets[i] + a.size
            })
        })
    }

    /// The local search never raises the arena it starts from, never overlaps two live blocks,
    /// gives the same offsets on a second run, and lowers some arenas best fit by size leaves above
    /// the live-bytes bound.
    #[test]
    fn moving_blocks_near_the_top_earlier_lowers_some_arenas() {
        let (mut lowered, mut above) = (0, 0);
        for blocks in random_sets(300, 40, 30, 64) {
            let order = BySize.order(&blocks);
            let off = best_fit(&blocks, &order);
            let start = arena(&blocks, &off);
            let lower = lower_bound(&blocks);
            let (moved, a) = improve(&blocks, order.clone(), off.clone(), lower, MOVE_WORK);
            assert_eq!(a, arena(&blocks, &moved));
            assert!(a <= start && a >= lower, "{blocks:?}");
            assert!(!overlapping(&blocks, &moved), "{blocks:?}");
            assert_eq!(improve(&blocks, order, off, lower, MOVE_WORK).0, moved);
            above += (start > lower) as usize;
            lowered += (a < start) as usize;
        }
        assert!(
            lowered * 4 > above,
            "{lowered} of {above} arenas above the bound lowered"
        );
    }

    /// The search is bounded by blocks placed: with no work it places nothing and returns its start.
    #[test]
    fn the_search_stops_at_its_work_bound() {
        for blocks in random_sets(50, 40, 30, 64) {
            let order = BySize.order(&blocks);
            let off = best_fit(&blocks, &order);
            let (same, a) = improve(&blocks, order, off.clone(), 0, 0);
            assert_eq!((same, a), (off.clone(), arena(&blocks, &off)));
        }
    }

    #[test]
    fn disjoint_lifetimes_share_memory() {
        let b = [blk(0, 1, 100), blk(2, 3, 100), blk(1, 2, 64)];
        for p in all() {
            let off = best_fit(&b, &p.order(&b));
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
