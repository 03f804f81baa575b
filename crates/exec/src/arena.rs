//! One arena allocation per planned run, and the cursor that hands its planned ranges to the ops.
//!
//! A planned run (see [`crate::interp::run_planned`]) allocates one [`Arena`] of the plan's size,
//! charged once to the run's [`MemStats`]. Every value the plan places gets the range
//! `offset..offset + size` of it; views share their source's range; scratch comes from the node's
//! planned scratch range.
//!
//! **Invariant** (what makes the shared writes sound): the plan has passed `memplan_plan::check`, so
//! no two buffers live at the same step overlap, except an input and the output written over it in
//! place. The interpreter hands a writable range only to the op producing the value planned there,
//! while that op runs; it drops every value after its last reader; and it never hands out the range
//! of an in-place output to an op (see [`crate::inplace`]). The host tier's copier thread writes
//! only the range of a value being copied back, while the plan reserves that range for the copy
//! (see `host`). So while a range is writable, nothing else reads or writes any byte of it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::mem::{AllocError, Buf, MemStats};

/// One zeroed, 64-byte-aligned allocation whose disjoint ranges back the tensors of a planned run.
#[derive(Debug)]
pub struct Arena {
    buf: Buf,
}

// SAFETY: the arena's bytes are only reached through `range`/`range_mut`, whose callers guarantee
// (module invariant) that a range being written is not accessed by anyone else, on any thread.
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}

impl Arena {
    /// Allocates `len` zeroed bytes, charged to `stats`.
    pub fn new(len: usize, stats: Option<&Arc<MemStats>>) -> Result<Arc<Arena>, AllocError> {
        Ok(Arc::new(Arena {
            buf: Buf::zeroed(len, stats)?,
        }))
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    fn check(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|e| e <= self.len()),
            "arena range {offset}+{len} exceeds the arena of {} bytes",
            self.len()
        );
    }

    /// The bytes `offset..offset + len`.
    ///
    /// # Safety
    /// No `&mut` to an overlapping range may be alive while the returned slice is.
    pub unsafe fn range(&self, offset: usize, len: usize) -> &[u8] {
        self.check(offset, len);
        // SAFETY: in bounds (checked), initialized (zeroed at allocation), and the caller guarantees
        // no overlapping mutable borrow.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().add(offset), len) }
    }

    /// The bytes `offset..offset + len`, writable.
    ///
    /// # Safety
    /// No other reference to an overlapping range may be alive while the returned slice is.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn range_mut(&self, offset: usize, len: usize) -> &mut [u8] {
        self.check(offset, len);
        // SAFETY: in bounds; the pointer comes from the allocation (not from a shared reference to
        // all of it), and the caller guarantees exclusive access to this range.
        unsafe { std::slice::from_raw_parts_mut(self.buf.as_ptr().add(offset), len) }
    }
}

/// What the ops of the current node may take from the arena: set by the interpreter before it calls
/// an op and cleared after. Kept in the run's [`MemStats`] (which every op already reaches through
/// `OpCtx::stats`) so that `OpCtx` keeps its fields.
#[derive(Debug, Default)]
pub(crate) struct Cursor {
    pub arena: Option<Arc<Arena>>,
    /// The planned ranges of the node's outputs still to be handed out, in output order; `None`
    /// stands for an output that must not get an arena range (it goes to the heap).
    pub outputs: VecDeque<Option<(usize, usize)>>,
    /// The node's scratch range and the bytes of it in use (a stack: freed from the top).
    pub scratch: Option<(usize, usize)>,
    pub scratch_top: usize,
    /// Allocations that did not fit the plan (they went to the counted heap).
    pub misses: Vec<String>,
}

impl Cursor {
    /// The next output range if it is exactly `len` bytes; `None` sends the allocation to the heap.
    pub fn take_output(&mut self, len: usize) -> Option<(Arc<Arena>, usize)> {
        let arena = self.arena.clone()?;
        match self.outputs.front().copied() {
            Some(Some((off, size))) if size == len => {
                self.outputs.pop_front();
                Some((arena, off))
            }
            Some(None) => {
                self.outputs.pop_front();
                None
            }
            Some(Some((_, size))) => {
                self.misses.push(format!(
                    "an output of {len} B was allocated where the plan expects {size} B"
                ));
                None
            }
            None => {
                self.misses.push(format!(
                    "an allocation of {len} B beyond the planned outputs"
                ));
                None
            }
        }
    }

    /// `len` bytes aligned to `align` from the node's scratch range, if they fit.
    pub fn take_scratch(&mut self, len: usize, align: usize) -> Option<(Arc<Arena>, usize)> {
        let arena = self.arena.clone()?;
        let (off, size) = self.scratch.unwrap_or((0, 0));
        let start = (off + self.scratch_top).next_multiple_of(align.max(1)) - off;
        if start + len > size {
            self.misses.push(format!(
                "scratch of {len} B does not fit the planned {size} B ({} B in use)",
                self.scratch_top
            ));
            return None;
        }
        self.scratch_top = start + len;
        Some((arena, off + start))
    }

    /// Gives back scratch `offset..offset + len` if it is the top of the stack.
    pub fn release_scratch(&mut self, offset: usize, len: usize) {
        if let Some((off, _)) = self.scratch {
            if offset + len == off + self.scratch_top {
                self.scratch_top = offset - off;
            }
        }
    }
}

/// Locks a cursor, recovering from a poisoned lock (a panicking op leaves nothing half-written that
/// matters: the run fails anyway).
pub(crate) fn lock(m: &Mutex<Cursor>) -> MutexGuard<'_, Cursor> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use memplan_ir::graph::{AttrValue, Attribute, DeclDim, DeclType, Graph};
    use memplan_ir::{DataType, TensorData};

    use crate::interp::{run, run_planned, ExecError, RunOptions, RunResult};
    use crate::tensor::Tensor;

    const COLS: usize = 5000;

    /// x [N, COLS] -> Exp -> Add bias [COLS] (broadcast, in place) -> Sigmoid (staged in place, two
    /// chunks) -> Sub(Exp(x), .) (in place over input 1) -> Mul(d, d) (one value read twice) ->
    /// CumSum (in place, over its input) -> MatMul W [COLS, 3].
    fn graph() -> Graph {
        let mut g = Graph::default();
        let x = g.add_input(
            "x",
            DeclType::tensor(
                DataType::F32,
                vec![DeclDim::Param("N".into()), DeclDim::Value(COLS as i64)],
            ),
        );
        let bias: Vec<f32> = (0..COLS).map(|i| (i as f32 * 0.37).sin()).collect();
        let bias = g.add_initializer(TensorData::from_f32("bias", vec![COLS as u64], &bias));
        let w: Vec<f32> = (0..COLS * 3).map(|i| (i as f32 * 0.11).cos()).collect();
        let w = g.add_initializer(TensorData::from_f32("W", vec![COLS as u64, 3], &w));
        let axis = g.add_initializer(TensorData::from_i64("axis", vec![], &[1]));
        let (_, a) = g.add_node("exp", "Exp", &[Some(x)], &["a"], vec![]);
        let (_, a2) = g.add_node("exp2", "Exp", &[Some(x)], &["a2"], vec![]);
        let (_, b) = g.add_node("add", "Add", &[Some(a[0]), Some(bias)], &["b"], vec![]);
        let (_, c) = g.add_node("sig", "Sigmoid", &[Some(b[0])], &["c"], vec![]);
        let (_, d) = g.add_node("sub", "Sub", &[Some(a2[0]), Some(c[0])], &["d"], vec![]);
        let (_, e) = g.add_node("sq", "Mul", &[Some(d[0]), Some(d[0])], &["e"], vec![]);
        let (_, f) = g.add_node(
            "cs",
            "CumSum",
            &[Some(e[0]), Some(axis)],
            &["f"],
            vec![Attribute {
                name: "exclusive".into(),
                value: AttrValue::Int(0),
                doc: String::new(),
            }],
        );
        let (_, m) = g.add_node("mm", "MatMul", &[Some(f[0]), Some(w)], &["m"], vec![]);
        g.outputs.push(m[0]);
        g
    }

    fn inputs(n: usize) -> BTreeMap<String, Tensor> {
        let x: Vec<f32> = (0..n * COLS)
            .map(|i| (i as f32 * 0.013).sin() * 3.0)
            .collect();
        BTreeMap::from([(
            "x".to_string(),
            Tensor::from_vec::<f32>(&[n, COLS], &x, None).unwrap(),
        )])
    }

    fn plan_at(g: &Graph, n: i64) -> memplan_plan::Plan {
        let facts = memplan_ir::infer_graph(g, 18).unwrap();
        let dims = BTreeMap::from([("N".to_string(), n)]);
        memplan_plan::optimize(g, &facts, &dims, &memplan_plan::Options::default())
            .unwrap()
            .plan
    }

    fn bits(r: &RunResult) -> Vec<Vec<u8>> {
        r.outputs.iter().map(|(_, t)| t.bytes().to_vec()).collect()
    }

    #[test]
    fn planned_run_is_bit_identical_and_its_peak_is_the_plan() {
        let g = graph();
        let facts = memplan_ir::infer_graph(&g, 18).unwrap();
        let plan = plan_at(&g, 4);
        let ops_in_place: Vec<&str> = plan
            .inplace
            .iter()
            .map(|ip| g.nodes[ip.node as usize].op.as_str())
            .collect();
        for op in ["Add", "Sigmoid", "Sub", "Mul", "CumSum"] {
            assert!(
                ops_in_place.contains(&op),
                "{op} not in place: {ops_in_place:?}"
            );
        }
        let free = run(&g, &facts, inputs(4), &RunOptions::default()).unwrap();
        let planned = run_planned(&g, &facts, inputs(4), &plan, 18).unwrap();
        assert_eq!(bits(&free), bits(&planned));
        let rep = planned.plan.as_ref().unwrap();
        assert_eq!(rep.arena_bytes, plan.arena_bytes);
        assert_eq!(
            rep.planned_peak_bytes,
            plan.arena_bytes + plan.resident_bytes
        );
        assert!(rep.misses.is_empty(), "{:?}", rep.misses);
        assert!(rep.inplace_copied.is_empty(), "{:?}", rep.inplace_copied);
        assert_eq!(rep.inplace_done, plan.inplace.len());
        assert_eq!(planned.peak_bytes, rep.planned_peak_bytes);
    }

    /// A valid plan with fewer in-place decisions than the planner would make runs at its arena too.
    #[test]
    fn a_plan_with_fewer_inplace_decisions_runs_at_its_arena() {
        let g = graph();
        let facts = memplan_ir::infer_graph(&g, 18).unwrap();
        let mut plan = plan_at(&g, 3);
        // Drop the CumSum decision and give its output a buffer of its own, after the arena.
        let k = plan
            .inplace
            .iter()
            .position(|ip| g.nodes[ip.node as usize].op == "CumSum")
            .unwrap();
        plan.inplace.remove(k);
        let b = plan
            .buffers
            .iter_mut()
            .find(|b| b.values[0] == "f")
            .unwrap();
        b.offset = plan.arena_bytes.next_multiple_of(plan.align);
        plan.arena_bytes = b.offset + b.size;
        assert!(plan
            .inplace
            .iter()
            .all(|ip| crate::supports_inplace(&g.nodes[ip.node as usize].op)));
        let free = run(&g, &facts, inputs(3), &RunOptions::default()).unwrap();
        let planned = run_planned(&g, &facts, inputs(3), &plan, 18).unwrap();
        assert_eq!(bits(&free), bits(&planned));
        let rep = planned.plan.unwrap();
        assert!(rep.misses.is_empty() && rep.inplace_copied.is_empty());
        assert_eq!(planned.peak_bytes, plan.arena_bytes + plan.resident_bytes);
        assert_eq!(planned.resident_bytes, plan.resident_bytes);
    }

    #[test]
    fn invalid_or_foreign_plans_are_refused() {
        let g = graph();
        let facts = memplan_ir::infer_graph(&g, 18).unwrap();
        let plan = plan_at(&g, 4);
        let mut bad = plan.clone();
        bad.arena_bytes += 64;
        let e = run_planned(&g, &facts, inputs(4), &bad, 18).unwrap_err();
        assert!(matches!(e, ExecError::Plan(_)), "{e}");
        assert!(e.to_string().starts_with("invalid plan: arena:"), "{e}");
        // Two live buffers overlapping.
        let mut bad = plan.clone();
        let i = bad
            .buffers
            .iter()
            .position(|b| b.values[0] == "a2")
            .unwrap();
        let j = bad.buffers.iter().position(|b| b.values[0] == "a").unwrap();
        bad.buffers[i].offset = bad.buffers[j].offset;
        let e = run_planned(&g, &facts, inputs(4), &bad, 18).unwrap_err();
        assert!(e.to_string().starts_with("invalid plan: "), "{e}");
        // A plan for other dims.
        let e = run_planned(&g, &facts, inputs(2), &plan, 18).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid plan: the plan was made for N=4 but the inputs give N=2"
        );
    }

    /// A tensor of `dt` and `shape` with values from `seed` (integers odd, so never a zero divisor).
    fn make(dt: DataType, shape: &[usize], seed: f64) -> Tensor {
        let n: usize = shape.iter().product();
        let v: Vec<f64> = (0..n)
            .map(|i| ((i as f64 + seed) * 0.731).sin() * 7.0 + 0.5)
            .collect();
        let bytes: Vec<u8> = match dt {
            DataType::F32 => v.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect(),
            DataType::F64 => v.iter().flat_map(|&x| x.to_le_bytes()).collect(),
            DataType::F16 => v
                .iter()
                .flat_map(|&x| half::f16::from_f64(x).to_le_bytes())
                .collect(),
            DataType::BF16 => v
                .iter()
                .flat_map(|&x| half::bf16::from_f64(x).to_le_bytes())
                .collect(),
            DataType::I32 => v
                .iter()
                .flat_map(|&x| ((x as i32) | 1).to_le_bytes())
                .collect(),
            DataType::I64 => v
                .iter()
                .flat_map(|&x| ((x as i64) | 1).to_le_bytes())
                .collect(),
            DataType::U8 => v.iter().map(|&x| (x.abs() as u8 % 7) | 1).collect(),
            DataType::U32 => v
                .iter()
                .flat_map(|&x| ((x.abs() as u32 % 7) | 1).to_le_bytes())
                .collect(),
            _ => v.iter().map(|&x| u8::from(x > 0.5)).collect(),
        };
        let mut t = Tensor::zeros(dt, shape, None).unwrap();
        t.bytes_mut().unwrap().copy_from_slice(&bytes);
        t
    }

    /// Runs `op` on `ins` normally and in place over `ins[slot]` (copied into an arena range);
    /// `None` when the normal run fails (a type the kernel does not take).
    fn both_ways(
        op: &str,
        attrs: &[(&str, AttrValue)],
        ins: &[Option<Tensor>],
        slot: usize,
    ) -> Option<(Tensor, Option<Tensor>)> {
        let mut g = Graph::default();
        let attrs: Vec<Attribute> = attrs
            .iter()
            .map(|(k, v)| Attribute {
                name: k.to_string(),
                value: v.clone(),
                doc: String::new(),
            })
            .collect();
        let slots: Vec<Option<memplan_ir::ValueId>> = vec![None; ins.len()];
        let (id, _) = g.add_node("n", op, &slots, &["o"], attrs);
        let node = g.node(id).clone();
        let stats = crate::mem::MemStats::new();
        let ctx = crate::ops::OpCtx {
            node: &node,
            opset: 18,
            view: false,
            stats: &stats,
        };
        let f = crate::ops::lookup(&node).unwrap();
        let refs: Vec<Option<&Tensor>> = ins.iter().map(Option::as_ref).collect();
        let want = f(&ctx, &refs).ok()?.remove(0);
        let big = ins[slot].as_ref().unwrap();
        let len = big.bytes().len();
        let arena = super::Arena::new(len, None).unwrap();
        let mut target = Tensor::arena_range(big.dtype, &big.shape, arena.clone(), 0, len, true);
        target.bytes_mut().unwrap().copy_from_slice(big.bytes());
        target.freeze();
        let mut refs = refs;
        for (k, t) in ins.iter().enumerate() {
            if t.as_ref().is_some_and(|t| t.shares_buffer(big)) || k == slot {
                refs[k] = Some(&target);
            }
        }
        let got = crate::inplace::run(&ctx, f, &refs, slot, &arena, 0, len).unwrap();
        Some((want, got))
    }

    /// The op table is the one list of in-place ops: every op it lets overwrite an input runs in
    /// place (never the copy fallback), with the normal run's bits, for full-size, broadcast and
    /// scalar other inputs and every type its kernel takes.
    #[test]
    fn every_inplace_op_of_the_op_table_runs_in_place_with_the_kernel_bits() {
        use DataType::*;
        let shape = [3usize, 4, 5];
        let i64s = |shape: &[usize], v: &[i64]| Tensor::from_vec::<i64>(shape, v, None).unwrap();
        let mut ops_checked = 0;
        for op in memplan_ir::ops::supported_ops() {
            let def = memplan_ir::ops::lookup_op(op).unwrap();
            if def.mem.inplace.is_empty() {
                continue;
            }
            assert!(crate::supports_inplace(op), "{op}");
            let mut ran = 0;
            for dt in [F32, F64, F16, BF16, I32, I64, U8, U32, Bool] {
                let x = |seed| Some(make(dt, &shape, seed));
                // (attributes, inputs) cases; the overwritable slots have the output's shape.
                let mut cases: Vec<(Vec<(&str, AttrValue)>, Vec<Option<Tensor>>)> = Vec::new();
                let fmod = vec![("fmod", AttrValue::Int(i64::from(dt.is_float())))];
                match op {
                    "Trilu" => {
                        cases.push((vec![], vec![x(0.0)]));
                        cases.push((
                            vec![("upper", AttrValue::Int(0))],
                            vec![x(1.0), Some(i64s(&[], &[1]))],
                        ));
                    }
                    "CumSum" => {
                        for (axis, excl, rev) in [(1, 0, 0), (0, 1, 1), (2, 1, 0)] {
                            cases.push((
                                vec![
                                    ("exclusive", AttrValue::Int(excl)),
                                    ("reverse", AttrValue::Int(rev)),
                                ],
                                vec![x(0.0), Some(i64s(&[], &[axis]))],
                            ));
                        }
                    }
                    "ScatterND" => {
                        let idx = i64s(&[2, 1], &[2, 0]);
                        cases.push((
                            vec![],
                            vec![x(0.0), Some(idx.clone()), Some(make(dt, &[2, 4, 5], 3.0))],
                        ));
                        cases.push((
                            vec![("reduction", AttrValue::String(b"add".to_vec()))],
                            vec![x(0.0), Some(idx), Some(make(dt, &[2, 4, 5], 3.0))],
                        ));
                    }
                    "ScatterElements" => {
                        let idx: Vec<i64> = (0..20).map(|i| (i * 7 % 3) as i64).collect();
                        cases.push((
                            vec![],
                            vec![
                                x(0.0),
                                Some(i64s(&[1, 4, 5], &idx)),
                                Some(make(dt, &[1, 4, 5], 2.0)),
                            ],
                        ));
                    }
                    "TensorScatter" => {
                        let upd = Some(make(dt, &[3, 2, 5], 2.0));
                        cases.push((vec![], vec![x(0.0), upd.clone()]));
                        cases.push((vec![], vec![x(0.0), upd, Some(i64s(&[3], &[0, 1, 2]))]));
                    }
                    "Where" => {
                        let c = |s: &[usize]| Some(make(Bool, s, 4.0));
                        cases.push((vec![], vec![c(&shape), x(0.0), x(1.0)]));
                        cases.push((vec![], vec![c(&[4, 1]), x(0.0), Some(make(dt, &[5], 2.0))]));
                    }
                    "Clip" => {
                        let b = |v: f64| Some(make(dt, &[], v));
                        cases.push((vec![], vec![x(0.0), b(0.0), b(30.0)]));
                    }
                    _ => {
                        let arity =
                            memplan_ir::ops::arity(op).map_or(2, |(lo, hi)| lo.max(hi.min(3)));
                        let attrs = if op == "Mod" { fmod } else { vec![] };
                        if op == "BitShift" {
                            for d in ["LEFT", "RIGHT"] {
                                let a =
                                    vec![("direction", AttrValue::String(d.as_bytes().to_vec()))];
                                cases.push((a.clone(), vec![x(0.0), Some(make(dt, &[4, 1], 3.0))]));
                            }
                        } else if arity == 1 {
                            cases.push((attrs, vec![x(0.0)]));
                        } else {
                            let full: Vec<Option<Tensor>> =
                                (0..arity).map(|k| x(k as f64)).collect();
                            let mut bcast = full.clone();
                            bcast[arity - 1] = Some(make(dt, &[4, 1], 9.0));
                            let mut scalar = full.clone();
                            scalar[arity - 1] = Some(make(dt, &[], 5.0));
                            let mut twice = full.clone();
                            twice[arity - 1] = full[0].clone();
                            for c in [full, bcast, scalar, twice] {
                                cases.push((attrs.clone(), c));
                            }
                        }
                    }
                }
                for (attrs, ins) in &cases {
                    for &slot in def.mem.inplace {
                        let fits = ins
                            .get(slot)
                            .and_then(|t| t.as_ref())
                            .is_some_and(|t| t.shape == shape);
                        if !fits {
                            continue;
                        }
                        let Some((want, got)) = both_ways(op, attrs, ins, slot) else {
                            continue;
                        };
                        let got =
                            got.unwrap_or_else(|| panic!("{op} {dt} slot {slot}: not in place"));
                        assert_eq!(got.shape, want.shape, "{op} {dt} slot {slot}");
                        assert_eq!(got.bytes(), want.bytes(), "{op} {dt} slot {slot} {attrs:?}");
                        ran += 1;
                    }
                }
            }
            assert!(ran > 0, "{op}: no type ran");
            ops_checked += 1;
        }
        assert!(ops_checked > 50, "{ops_checked}");
    }
}
