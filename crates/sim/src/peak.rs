//! Live bytes over the steps: symbolic per-step sums, and the concrete peak at given dims with the live
//! set and a per-category breakdown.

use std::collections::BTreeMap;

use memplan_ir::Expr;

use crate::timeline::{BufId, Category, SimError, Timeline};

/// Live bytes during each step, as expressions (resident buffers included).
pub fn symbolic_steps(t: &Timeline) -> Vec<Expr> {
    let n = t.steps();
    let mut delta_in: Vec<Vec<&Expr>> = vec![Vec::new(); n];
    let mut delta_out: Vec<Vec<&Expr>> = vec![Vec::new(); n];
    let mut base = Expr::zero();
    for b in &t.buffers {
        match b.alloc {
            None => base = &base + &b.size,
            Some(a) => {
                delta_in[a].push(&b.size);
                if let Some(l) = b.last {
                    delta_out[l].push(&b.size);
                }
            }
        }
    }
    let mut out = Vec::with_capacity(n);
    let mut live = base;
    for s in 0..n {
        for e in &delta_in[s] {
            live = &live + *e;
        }
        out.push(live.clone());
        for e in &delta_out[s] {
            live = &live - *e;
        }
    }
    out
}

/// Buffer sizes evaluated at concrete dims.
pub fn eval_sizes(t: &Timeline, env: &BTreeMap<String, i64>) -> Result<Vec<u64>, SimError> {
    t.buffers
        .iter()
        .map(|b| match b.size.eval_map(env) {
            Ok(v) => Ok(v.max(0) as u64),
            Err(memplan_ir::dim::EvalError::UnboundSymbol(s)) => Err(SimError::Unbound(s)),
            Err(e) => Err(SimError::Eval(format!("{e:?}"))),
        })
        .collect()
}

/// Live bytes during each step, from concrete buffer sizes.
pub fn concrete_steps(t: &Timeline, sizes: &[u64]) -> Vec<u64> {
    let n = t.steps();
    let mut diff = vec![0i128; n + 1];
    let mut base: i128 = 0;
    for (b, &sz) in t.buffers.iter().zip(sizes) {
        match b.alloc {
            None => base += sz as i128,
            Some(a) => {
                diff[a] += sz as i128;
                if let Some(l) = b.last {
                    diff[l + 1] -= sz as i128;
                }
            }
        }
    }
    let mut out = Vec::with_capacity(n);
    let mut live = base;
    for d in diff.iter().take(n) {
        live += d;
        out.push(live.max(0) as u64);
    }
    out
}

/// One buffer live at the peak.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LiveEntry {
    pub buf: BufId,
    pub bytes: u64,
    pub category: Category,
}

/// Bytes per category.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Breakdown {
    pub weights: u64,
    pub inputs: u64,
    pub activations: u64,
    pub outputs: u64,
    pub scratch: u64,
}

impl Breakdown {
    pub fn add(&mut self, c: Category, bytes: u64) {
        let slot = match c {
            Category::Weight => &mut self.weights,
            Category::Input => &mut self.inputs,
            Category::Activation => &mut self.activations,
            Category::Output => &mut self.outputs,
            Category::Scratch => &mut self.scratch,
        };
        *slot += bytes;
    }

    pub fn total(&self) -> u64 {
        self.weights + self.inputs + self.activations + self.outputs + self.scratch
    }
}

/// The peak at concrete dims.
#[derive(Clone, Debug, PartialEq)]
pub struct ConcretePeak {
    pub peak_bytes: u64,
    /// First step where the peak is reached; `None` for a graph with no nodes.
    pub peak_step: Option<usize>,
    pub per_step: Vec<u64>,
    /// Buffers live at the peak step, largest first (ties by buffer id).
    pub live: Vec<LiveEntry>,
    pub breakdown: Breakdown,
    /// Resident bytes (weights and inputs), live at every step.
    pub resident: u64,
    pub sizes: Vec<u64>,
}

/// Evaluates the timeline at `env`.
pub fn concrete_peak(t: &Timeline, env: &BTreeMap<String, i64>) -> Result<ConcretePeak, SimError> {
    let sizes = eval_sizes(t, env)?;
    Ok(concrete_peak_with_sizes(t, sizes))
}

/// Evaluates the timeline with already evaluated buffer sizes.
pub fn concrete_peak_with_sizes(t: &Timeline, sizes: Vec<u64>) -> ConcretePeak {
    let per_step = concrete_steps(t, &sizes);
    let resident: u64 = t
        .buffers
        .iter()
        .zip(&sizes)
        .filter(|(b, _)| b.alloc.is_none())
        .map(|(_, &s)| s)
        .sum();
    let mut peak_step = None;
    let mut peak_bytes = resident;
    for (s, &v) in per_step.iter().enumerate() {
        if peak_step.is_none() || v > peak_bytes {
            peak_bytes = v;
            peak_step = Some(s);
        }
    }
    let mut live: Vec<LiveEntry> = Vec::new();
    let mut breakdown = Breakdown::default();
    for (i, (b, &sz)) in t.buffers.iter().zip(&sizes).enumerate() {
        let is_live = match peak_step {
            Some(s) => b.live_at(s),
            None => b.alloc.is_none(),
        };
        if is_live {
            live.push(LiveEntry {
                buf: BufId(i as u32),
                bytes: sz,
                category: b.category,
            });
            breakdown.add(b.category, sz);
        }
    }
    live.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.buf.cmp(&b.buf)));
    ConcretePeak {
        peak_bytes,
        peak_step,
        per_step,
        live,
        breakdown,
        resident,
        sizes,
    }
}
