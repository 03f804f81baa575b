//! In-place execution: output 0 of a node written over the arena range of an input that dies there,
//! as a checked plan decides.
//!
//! The op table (`memplan_ir::ops`, `Mem::inplace`) is the one list of what may be written in place,
//! and the executor runs every such decision without a copy. Kernels take `&[T]` inputs and a
//! `&mut [T]` output, so handing an op an output that aliases one of its inputs would be undefined
//! behaviour. Two sound paths instead, both bit-identical to the normal run:
//!
//! - **staged** (`Mem::inplace_elementwise`: output element `i` reads element `i` of each input, or
//!   its broadcast source): the op runs on consecutive chunks of the output, each of whole rows of
//!   its trailing axes where every input either spans the leading axes or broadcasts over all of
//!   them (each input then keeps its own shape over a chunk), else of the flattened output. For each
//!   chunk, the overwritten input's elements (and those of any input reading the same bytes) are
//!   copied to a staging buffer, in flat chunks an input that broadcasts is gathered into one, and
//!   the op writes its output chunk straight into the arena. Large outputs are cut into one range per
//!   worker thread, each with its own staging buffers. Staging buffers hold at most [`STAGE_BYTES`]
//!   of the output type per input and thread, whatever the tensors' sizes, and are not charged to
//!   the run: like a kernel's stack, they do not grow with the dims. Each thread keeps its staging
//!   buffers from node to node ([`take_stage`]): a fresh one per node would be allocated and paged
//!   in again every time, a cost that a graph of many small chunks pays on every node. The op's own code computes every
//!   element, and an elementwise kernel computes each element the same way whatever slice it is given
//!   (the executor's kernel invariant), so the bits are the normal run's.
//! - **overwrite** (Trilu, CumSum, ScatterND, ScatterElements): the op's [`crate::ops::OverwriteFn`] turns the
//!   arena range, which holds input 0, into the output; it never reads input 0 through the tensor,
//!   and no other input reads that buffer (the plan checker's rule). The normal run is the same
//!   function over a copy of input 0.

use std::cell::RefCell;
use std::sync::Arc;

use memplan_ir::DataType;
use rayon::prelude::*;

use crate::arena::{self, Arena};
use crate::kernels::elementwise::broadcast_shapes;
use crate::mem::{Buf, MemStats};
use crate::ops::{OpCtx, OpFail, OpFn};
use crate::tensor::{byte_len, elem_size, Tensor};

/// Bytes of the overwritten input staged at a time.
pub const STAGE_BYTES: usize = 256 << 10;

/// Staging buffers a thread keeps between nodes, at most this many.
const STAGES_KEPT: usize = 8;

thread_local! {
    /// This thread's free staging buffers (see the module docs).
    static STAGES: RefCell<Vec<Arc<Buf>>> = const { RefCell::new(Vec::new()) };
}

/// A staging tensor of `n` elements of `dtype`, its contents stale: one of this thread's kept
/// buffers when one is large enough, else a new one of at least [`STAGE_BYTES`]. Taken out of the
/// thread's list while in use, so a task that this thread runs while it waits inside the op (a
/// stolen chunk of the same node) takes another.
fn take_stage(dtype: DataType, n: usize) -> Result<Tensor, OpFail> {
    let want = byte_len(dtype, n)?;
    let kept = STAGES.with(|s| {
        let mut s = s.borrow_mut();
        let i = s.iter().position(|b| b.len() >= want)?;
        Some(s.swap_remove(i))
    });
    let buf = match kept {
        Some(b) => b,
        None => Arc::new(Buf::for_overwrite(want.max(STAGE_BYTES), None)?),
    };
    Ok(Tensor::over_buf(dtype, &[n], buf)?)
}

/// Gives a staging tensor's buffer back to this thread's list (when nothing else holds it).
fn keep_stage(t: Tensor) {
    if let Some(b) = t.into_buf().filter(|b| Arc::strong_count(b) == 1) {
        STAGES.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < STAGES_KEPT {
                s.push(b);
            }
        });
    }
}

/// Whether the op table lets `op` (default domain) write output 0 over an input; the executor then
/// runs it in place without a copy (the overwritten input has the output's size and type, as the
/// planner and the checker require).
pub fn supports_inplace(op: &str) -> bool {
    memplan_ir::ops::lookup_op(op).is_some_and(|d| !d.mem.inplace.is_empty())
}

/// Runs the node of `ctx` in place: output 0 over `inputs[slot]`, which must occupy exactly
/// `offset..offset + len` of `arena`. `Ok(None)`: this node cannot be run in place soundly here
/// (the op table does not allow it, or the plan does not match the tensors); the caller then
/// computes on the heap and copies.
pub(crate) fn run(
    ctx: &OpCtx,
    f: OpFn,
    inputs: &[Option<&Tensor>],
    slot: usize,
    arena: &Arc<Arena>,
    offset: usize,
    len: usize,
) -> Result<Option<Tensor>, OpFail> {
    let Some(def) = memplan_ir::ops::lookup(ctx.node) else {
        return Ok(None);
    };
    if !def.mem.inplace.contains(&slot) || ctx.node.outputs.len() != 1 {
        return Ok(None);
    }
    let Some(Some(target)) = inputs.get(slot).copied() else {
        return Ok(None);
    };
    match target.arena_place() {
        Some((a, o, l)) if Arc::ptr_eq(a, arena) && o == offset && l == len => {}
        _ => return Ok(None),
    }
    if !def.mem.inplace_elementwise {
        let Some(over) = crate::ops::overwrite(&ctx.node.op) else {
            return Ok(None);
        };
        let shared = inputs
            .iter()
            .enumerate()
            .any(|(j, t)| j != slot && t.is_some_and(|t| t.shares_buffer(target)));
        if slot != 0 || shared {
            return Ok(None);
        }
        let (dtype, shape) = (target.dtype, target.shape.clone());
        // SAFETY: the range is the dead input's, which becomes the output: every other reader has
        // run (checked plan), no other input reads it (checked above), and `over` reads input 0's
        // type and shape only, never its bytes (`OverwriteFn` contract), so this is the only
        // reference to these bytes while it lives.
        let bytes = unsafe { arena.range_mut(offset, len) };
        over(ctx, inputs, bytes)?;
        return Ok(Some(Tensor::arena_range(
            dtype,
            &shape,
            arena.clone(),
            offset,
            len,
            false,
        )));
    }
    let shapes: Vec<&[usize]> = inputs
        .iter()
        .flatten()
        .map(|t| t.shape.as_slice())
        .collect();
    let Ok(oshape) = broadcast_shapes(&shapes) else {
        return Ok(None);
    };
    if target.numel() != oshape.iter().product::<usize>() {
        return Ok(None);
    }
    staged(ctx, f, inputs, slot, arena, offset, &oshape).map(Some)
}

/// One staged in-place node: what every range of it shares.
struct Job<'a> {
    f: OpFn,
    inputs: &'a [Option<&'a Tensor>],
    slot: usize,
    target: &'a Tensor,
    arena: &'a Arc<Arena>,
    offset: usize,
    oshape: &'a [usize],
    /// Output elements per staged chunk (whole rows in row mode).
    chunk: usize,
    /// The row split ([`row_split`]), `None` for flat chunks.
    split: Option<usize>,
}

/// The staged path (see the module docs). The output's chunks are independent, so large outputs
/// are cut into one contiguous range per worker thread, each staged chunk by chunk with its own
/// staging buffers; every element is still computed by the op's own code over a chunk, so the bits
/// do not depend on the split.
fn staged(
    ctx: &OpCtx,
    f: OpFn,
    inputs: &[Option<&Tensor>],
    slot: usize,
    arena: &Arc<Arena>,
    offset: usize,
    oshape: &[usize],
) -> Result<Tensor, OpFail> {
    let n: usize = oshape.iter().product();
    let target = inputs[slot].ok_or_else(|| OpFail::Invalid("in-place input missing".into()))?;
    let es = elem_size(target.dtype)?;
    let mut chunk = (STAGE_BYTES / es).max(1);
    // Row mode (see `row_split`): chunks are whole rows of the output's last `r - a` axes, and
    // every input keeps its own shape over them, so broadcasting stays the op's own.
    let split = row_split(inputs, oshape, chunk);
    if let Some(a) = split {
        let inner: usize = oshape[a..].iter().product();
        chunk = chunk / inner * inner;
    }
    let job = Job {
        f,
        inputs,
        slot,
        target,
        arena,
        offset,
        oshape,
        chunk,
        split,
    };
    let threads = rayon::current_num_threads();
    // Kernels on f16/bf16 widen into counted scratch, which must be charged to the run: those run
    // on one thread, through the run's own cursor.
    let narrow = inputs
        .iter()
        .flatten()
        .any(|t| matches!(t.dtype, DataType::F16 | DataType::BF16));
    if threads > 1 && !narrow && n >= 4 * chunk {
        let per = n.div_ceil(threads).next_multiple_of(chunk);
        let ranges: Vec<(usize, usize)> = (0..n)
            .step_by(per)
            .map(|c0| (c0, (c0 + per).min(n)))
            .collect();
        let results: Vec<Result<Vec<String>, OpFail>> = ranges
            .into_par_iter()
            .map(|(from, to)| {
                // A cursor of this worker's own over the same arena: the op's output chunk is
                // placed at its planned range without touching the run's cursor. These ops take
                // no scratch (no widening), which `local` confirms: it must stay at zero bytes.
                let local = MemStats::new();
                arena::lock(&local.cursor).arena = Some(arena.clone());
                let lctx = OpCtx {
                    node: ctx.node,
                    opset: ctx.opset,
                    view: false,
                    stats: &local,
                };
                staged_range(&lctx, &job, from, to)?;
                let mut misses = std::mem::take(&mut arena::lock(&local.cursor).misses);
                if local.peak() != 0 {
                    misses.push(format!(
                        "an in-place chunk took {} B of heap memory outside the plan",
                        local.peak()
                    ));
                }
                Ok(misses)
            })
            .collect();
        for r in results {
            let misses = r?;
            arena::lock(&ctx.stats.cursor).misses.extend(misses);
        }
    } else {
        staged_range(ctx, &job, 0, n)?;
    }
    Ok(Tensor::arena_range(
        target.dtype,
        oshape,
        arena.clone(),
        offset,
        n * es,
        false,
    ))
}

/// Output elements `from..to` of a staged node, `job.chunk` at a time through `ctx`'s cursor.
fn staged_range(ctx: &OpCtx, job: &Job, from: usize, to: usize) -> Result<(), OpFail> {
    let (f, inputs, slot, target) = (job.f, job.inputs, job.slot, job.target);
    let (arena, offset, oshape, chunk, split) =
        (job.arena, job.offset, job.oshape, job.chunk, job.split);
    let n: usize = oshape.iter().product();
    let es = elem_size(target.dtype)?;
    let r = oshape.len();
    let inner: usize = split.map_or(1, |a| oshape[a..].iter().product());
    // Flat mode: an input with the output's element count broadcasts to it without repeating, so it
    // has the output's layout: its chunk is a view, or a copy when the op reads it while writing the
    // arena range it came from. One-element inputs are passed whole; any other input broadcasts and
    // its chunk is gathered. In row mode only the overwritten input, and any input reading the same
    // bytes, is copied. Each copy or gather goes to a staging buffer of at most `chunk` elements,
    // whatever the tensor's size, so the heap staging takes does not depend on the dims.
    let mut stages: Vec<Option<Tensor>> = Vec::with_capacity(inputs.len());
    for (j, t) in inputs.iter().enumerate() {
        let staged = t.is_some_and(|t| {
            let full = t.numel() == n;
            let own = j == slot || t.shares_buffer(target);
            match split {
                Some(a) => own && lead_full(t, oshape, a),
                None => (full && own) || (!full && t.numel() != 1),
            }
        });
        // No chunk of this range is longer than the range: a small node stages only its size.
        stages.push(match t {
            Some(t) if staged => Some(take_stage(t.dtype, chunk.min(to - from))?),
            _ => None,
        });
    }
    let mut c0 = from;
    while c0 < to {
        let k = chunk.min(to - c0);
        let mut staged_ins: Vec<Option<Tensor>> = Vec::with_capacity(inputs.len());
        for (t, stage) in inputs.iter().zip(stages.iter_mut()) {
            let Some(t) = *t else {
                staged_ins.push(None);
                continue;
            };
            if let Some(a) = split {
                // This input over rows `c0 / inner..(c0 + k) / inner`: a view of those rows (or a
                // copy of them) when it spans the leading axes, else all of it, broadcast.
                let padded = padded_shape(t, r);
                let tail = &padded[a..];
                let tail_n: usize = tail.iter().product();
                let rows = k / inner;
                let full = lead_full(t, oshape, a);
                let mut shape = vec![if full { rows } else { 1 }];
                shape.extend_from_slice(tail);
                let at = if full { c0 / inner * tail_n } else { 0 };
                staged_ins.push(Some(match stage {
                    Some(stage) => {
                        let te = elem_size(t.dtype)?;
                        let m = rows * tail_n;
                        // Through a view of just these rows: other workers write other rows of
                        // the same range meanwhile.
                        stage.bytes_mut()?[..m * te].copy_from_slice(t.view(at, &[m])?.bytes());
                        stage.view(0, &shape)?
                    }
                    None => t.view(at, &shape)?,
                }));
                continue;
            }
            staged_ins.push(Some(match stage {
                Some(stage) => {
                    let te = elem_size(t.dtype)?;
                    let dst = &mut stage.bytes_mut()?[..k * te];
                    if t.numel() == n {
                        // Through a view of just this chunk: other workers write other chunks of
                        // the same range meanwhile.
                        dst.copy_from_slice(t.view(c0, &[k])?.bytes());
                    } else {
                        gather_into(t, oshape, c0, dst)?;
                    }
                    stage.view(0, &[k])?
                }
                None if t.numel() == n => t.view(c0, &[k])?,
                None => t.clone(),
            }));
        }
        let range = (offset + c0 * es, k * es);
        {
            let mut c = arena::lock(&ctx.stats.cursor);
            c.outputs.clear();
            c.outputs.push_back(Some(range));
        }
        let refs: Vec<Option<&Tensor>> = staged_ins.iter().map(Option::as_ref).collect();
        let outs = f(ctx, &refs)?;
        drop(refs);
        drop(staged_ins);
        let out = outs
            .into_iter()
            .next()
            .ok_or_else(|| OpFail::Invalid("produced no output".into()))?;
        let placed = out
            .arena_place()
            .is_some_and(|(a, o, l)| Arc::ptr_eq(a, arena) && (o, l) == range);
        if !placed {
            if out.bytes().len() != range.1 {
                return Err(OpFail::Invalid(format!(
                    "in place: a chunk of {} elements produced {} bytes",
                    k,
                    out.bytes().len()
                )));
            }
            // SAFETY: the range is this node's output chunk; no tensor other than `out` (a heap
            // buffer) is borrowed while it is written (arena invariant; the staged inputs are dropped).
            unsafe { arena.range_mut(range.0, range.1) }.copy_from_slice(out.bytes());
            arena::lock(&ctx.stats.cursor)
                .misses
                .push("an in-place chunk was not written in the arena; copied".into());
        }
        c0 += k;
    }
    arena::lock(&ctx.stats.cursor).outputs.clear();
    stages.into_iter().flatten().for_each(keep_stage);
    Ok(())
}

/// `t`'s shape with leading ones up to rank `r`.
fn padded_shape(t: &Tensor, r: usize) -> Vec<usize> {
    let mut p = vec![1; r.saturating_sub(t.rank())];
    p.extend_from_slice(&t.shape);
    p
}

/// Whether `t` (padded to the output's rank) spans the output's first `a` axes.
fn lead_full(t: &Tensor, oshape: &[usize], a: usize) -> bool {
    padded_shape(t, oshape.len())[..a] == oshape[..a]
}

/// The row split of the staged path: the most leading axes `a` (at least one) over which every
/// input either spans the output or has extent 1, provided one row (the last `r - a` axes) holds
/// at most `chunk` elements. Chunks are then runs of whole rows: each input spanning the leading
/// axes is a view of its rows, each other one is passed whole and broadcasts over them, so no
/// input needs gathering. `None` (flat chunks, broadcast inputs gathered) when no such split
/// exists or an input has a higher rank than the output.
fn row_split(inputs: &[Option<&Tensor>], oshape: &[usize], chunk: usize) -> Option<usize> {
    let r = oshape.len();
    let present: Vec<&Tensor> = inputs.iter().flatten().copied().collect();
    if r == 0 || present.iter().any(|t| t.rank() > r) {
        return None;
    }
    // Valid splits are a prefix of 1..=r (spanning or being 1 over `..a` implies it over `..a-1`).
    let valid = |a: usize| {
        present.iter().all(|t| {
            let p = padded_shape(t, r);
            p[..a] == oshape[..a] || p[..a].iter().all(|&d| d == 1)
        })
    };
    let mut a = 0;
    while a < r && valid(a + 1) {
        a += 1;
    }
    let inner: usize = oshape[a..].iter().product();
    (a > 0 && inner <= chunk && inner > 0).then_some(a)
}

/// Elements `c0..` (row-major over `oshape`) of `t` broadcast to `oshape`, written to `dst` (as many
/// elements as it holds).
fn gather_into(t: &Tensor, oshape: &[usize], c0: usize, dst: &mut [u8]) -> Result<(), OpFail> {
    let es = elem_size(t.dtype)?;
    let r = oshape.len();
    let not_broadcast = || {
        OpFail::Invalid(format!(
            "in place: {:?} does not broadcast to {oshape:?}",
            t.shape
        ))
    };
    if t.rank() > r {
        return Err(not_broadcast());
    }
    // Element strides of `t` aligned to the output's axes (0 where it broadcasts).
    let mut st = vec![0usize; r];
    let mut acc = 1usize;
    for q in (0..t.rank()).rev() {
        if t.shape[q] != 1 {
            st[r - t.rank() + q] = acc;
        }
        acc *= t.shape[q];
    }
    let mut idx = vec![0usize; r];
    let mut rem = c0;
    for ax in (0..r).rev() {
        idx[ax] = rem % oshape[ax].max(1);
        rem /= oshape[ax].max(1);
    }
    let mut j: usize = idx.iter().zip(&st).map(|(i, s)| i * s).sum();
    let src = t.bytes();
    if r == 0 {
        let from = src.get(..es).ok_or_else(not_broadcast)?;
        dst.chunks_exact_mut(es)
            .for_each(|d| d.copy_from_slice(from));
        return Ok(());
    }
    // Run by run along the last axis: a contiguous copy where it is not broadcast (stride 1), the
    // same element repeated where it is (stride 0).
    let (last, sl) = (oshape[r - 1], st[r - 1]);
    let mut at = 0;
    let total = dst.len() / es;
    while at < total {
        let run = (last - idx[r - 1]).min(total - at);
        let out = &mut dst[at * es..(at + run) * es];
        if sl == 0 {
            let from = src.get(j * es..(j + 1) * es).ok_or_else(not_broadcast)?;
            out.chunks_exact_mut(es)
                .for_each(|d| d.copy_from_slice(from));
        } else {
            let from = src.get(j * es..(j + run) * es).ok_or_else(not_broadcast)?;
            out.copy_from_slice(from);
        }
        at += run;
        // Advance the index by `run` along the last axis, carrying into the outer ones.
        idx[r - 1] += run;
        j += sl * run;
        let mut ax = r - 1;
        while idx[ax] >= oshape[ax] && ax > 0 {
            j -= st[ax] * oshape[ax];
            idx[ax] = 0;
            ax -= 1;
            idx[ax] += 1;
            j += st[ax];
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_reuses_its_staging_buffers_and_a_nested_take_gets_another() {
        // A worker of a pool of its own: no other test's stages on this thread.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        pool.install(|| {
            let a = take_stage(DataType::F32, 100).unwrap();
            let pa = a.bytes().as_ptr();
            assert_eq!(a.shape, vec![100]);
            // Taken while `a` is in use (a stolen chunk of the same node): another buffer.
            let b = take_stage(DataType::F32, 100).unwrap();
            assert_ne!(b.bytes().as_ptr(), pa);
            keep_stage(b);
            keep_stage(a);
            // Given back, a buffer serves the next node, of any type that fits it.
            let c = take_stage(DataType::I64, STAGE_BYTES / 8).unwrap();
            let d = take_stage(DataType::F32, 10).unwrap();
            let kept = [c.bytes().as_ptr(), d.bytes().as_ptr()];
            assert!(kept.contains(&pa));
            assert_ne!(kept[0], kept[1]);
            // A view still alive keeps its buffer out of the list.
            let view = c.view(0, &[1]).unwrap();
            keep_stage(c);
            assert!(STAGES.with(|s| s.borrow().is_empty()));
            drop(view);
        });
    }
}
