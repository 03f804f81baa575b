//! The one row-parallel loop of the kernels: an output cut into blocks of whole rows, each block a
//! rayon task. Each kernel family decides how many rows a task is worth (its cost per element), and
//! every kernel computes each row the same way whatever block it falls in, so the cut never
//! changes a bit.

use rayon::prelude::*;

/// Runs `body(first_row, block)` over `out` cut into blocks of `rows_per_task` rows of `row_len`
/// elements (the last block may be shorter), on rayon tasks. On the calling thread, as one block,
/// when `rows_per_task` is `None` (too little work to fan out), when one block would hold every
/// row, or when the pool has one thread.
pub(crate) fn row_blocks<O: Send>(
    out: &mut [O],
    row_len: usize,
    rows_per_task: Option<usize>,
    body: impl Fn(usize, &mut [O]) + Sync,
) {
    let ok = try_row_blocks(out, row_len, rows_per_task, |r, block| {
        body(r, block);
        Ok::<(), std::convert::Infallible>(())
    });
    match ok {
        Ok(()) => {}
        Err(never) => match never {},
    }
}

/// [`row_blocks`] with a body that can fail: the first error is returned (other blocks may have
/// run).
pub(crate) fn try_row_blocks<O: Send, E: Send>(
    out: &mut [O],
    row_len: usize,
    rows_per_task: Option<usize>,
    body: impl Fn(usize, &mut [O]) -> Result<(), E> + Sync,
) -> Result<(), E> {
    let row_len = row_len.max(1);
    let rows = out.len().div_ceil(row_len);
    match rows_per_task.map(|r| r.max(1)) {
        Some(rpt) if rpt < rows && rayon::current_num_threads() > 1 => out
            .par_chunks_mut(rpt * row_len)
            .enumerate()
            .try_for_each(|(t, block)| body(t * rpt, block)),
        _ => body(0, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row is visited once, with its own index, whatever the cut; `None` is one block.
    #[test]
    fn blocks_cover_every_row_once_with_its_index() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        pool.install(|| {
            for (len, row, rpt) in [
                (12, 3, Some(1)),
                (12, 3, Some(3)),
                (13, 3, Some(2)),
                (12, 3, None),
                (0, 3, Some(1)),
            ] {
                let mut out = vec![usize::MAX; len];
                let blocks = std::sync::atomic::AtomicUsize::new(0);
                row_blocks(&mut out, row, rpt, |r0, block| {
                    blocks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    for (i, v) in block.iter_mut().enumerate() {
                        *v = r0 * row + i;
                    }
                });
                assert!(
                    out.iter().enumerate().all(|(i, &v)| i == v),
                    "{len} {rpt:?}"
                );
                let want = match rpt {
                    Some(r) if r < len.div_ceil(row) => len.div_ceil(row * r),
                    _ => 1,
                };
                assert_eq!(blocks.into_inner(), want, "{len} {rpt:?}");
            }
            let mut out = vec![0u8; 8];
            let e = try_row_blocks(
                &mut out,
                2,
                Some(1),
                |r, _| if r == 2 { Err(r) } else { Ok(()) },
            );
            assert_eq!(e, Err(2));
        });
    }
}
