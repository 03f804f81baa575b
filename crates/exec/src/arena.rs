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
//! of an in-place output to an op (see [`crate::inplace`]). So while a range is writable, nothing
//! else reads or writes any byte of it.

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
    /// CumSum (in place in the plan, not in the executor: copied) -> MatMul W [COLS, 3].
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
        // CumSum is not elementwise: its in-place decision is run on the heap and copied.
        assert_eq!(rep.inplace_copied, ["'cs' (CumSum)"]);
        assert_eq!(rep.inplace_done, plan.inplace.len() - 1);
        let out_bytes = (4 * COLS * 4) as u64;
        assert_eq!(planned.peak_bytes, rep.planned_peak_bytes + out_bytes);
    }

    #[test]
    fn without_unsupported_in_place_the_peak_is_exactly_the_plan() {
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

    #[test]
    fn broadcast_arithmetic_in_place_matches_the_kernel_bits() {
        // Every dtype and operand order of the element-by-element path against the normal kernel.
        for op in ["Add", "Sub", "Mul", "Div"] {
            for dt in [
                DataType::F32,
                DataType::F64,
                DataType::F16,
                DataType::BF16,
                DataType::I32,
                DataType::I64,
            ] {
                for slot in [0usize, 1] {
                    check_broadcast(op, dt, slot);
                }
            }
        }
    }

    fn check_broadcast(op: &str, dt: DataType, slot: usize) {
        let shape = [3usize, 4, 5];
        let small = [4usize, 1];
        let vals = |n: usize, seed: f64| -> Vec<f64> {
            (0..n)
                .map(|i| ((i as f64 + seed) * 0.731).sin() * 7.0 + 0.5)
                .collect()
        };
        let make = |shape: &[usize], v: &[f64]| -> Tensor {
            match dt {
                DataType::F32 => Tensor::from_vec(
                    shape,
                    &v.iter().map(|&x| x as f32).collect::<Vec<_>>(),
                    None,
                ),
                DataType::F64 => Tensor::from_vec(shape, v, None),
                DataType::F16 => Tensor::from_vec(
                    shape,
                    &v.iter()
                        .map(|&x| half::f16::from_f64(x))
                        .collect::<Vec<_>>(),
                    None,
                ),
                DataType::BF16 => Tensor::from_vec(
                    shape,
                    &v.iter()
                        .map(|&x| half::bf16::from_f64(x))
                        .collect::<Vec<_>>(),
                    None,
                ),
                DataType::I32 => Tensor::from_vec(
                    shape,
                    &v.iter().map(|&x| (x as i32) | 1).collect::<Vec<_>>(),
                    None,
                ),
                _ => Tensor::from_vec(
                    shape,
                    &v.iter().map(|&x| (x as i64) | 1).collect::<Vec<_>>(),
                    None,
                ),
            }
            .unwrap()
        };
        let big = make(&shape, &vals(60, 0.0));
        let other = make(&small, &vals(4, 9.0));
        let mut g = Graph::default();
        let (id, _) = g.add_node("n", op, &[None, None], &["o"], vec![]);
        let node = g.node(id).clone();
        let stats = crate::mem::MemStats::new();
        let ctx = crate::ops::OpCtx {
            node: &node,
            opset: 18,
            view: false,
            stats: &stats,
        };
        let f = crate::ops::lookup(&node).unwrap();
        let ins = if slot == 0 {
            [Some(&big), Some(&other)]
        } else {
            [Some(&other), Some(&big)]
        };
        let want = f(&ctx, &ins).unwrap().remove(0);
        let len = big.bytes().len();
        let arena = super::Arena::new(len, None).unwrap();
        let mut target = Tensor::arena_range(dt, &shape, arena.clone(), 0, len, true);
        target.bytes_mut().unwrap().copy_from_slice(big.bytes());
        target.freeze();
        let ins = if slot == 0 {
            [Some(&target), Some(&other)]
        } else {
            [Some(&other), Some(&target)]
        };
        let got = crate::inplace::run(&ctx, f, &ins, slot, &arena, 0, len).unwrap();
        if op == "Div" && slot == 1 && matches!(dt, DataType::I32 | DataType::I64) {
            // An integer divisor is left to the kernel, which checks it for zeros.
            assert!(got.is_none());
            return;
        }
        let got = got.unwrap_or_else(|| panic!("{op} {dt} slot {slot} not run in place"));
        assert_eq!(got.shape, want.shape);
        assert_eq!(got.bytes(), want.bytes(), "{op} {dt} slot {slot}");
    }
}
